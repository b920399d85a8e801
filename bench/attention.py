"""Time and peak memory of each attention backend for self-attention at 4 096 and 16 384 tokens.

    .venv/bin/python bench/attention.py [--tokens 4096 16384] [--heads 8] [--head-dim 40]
                                        [--max-gib 3] [--repeat 2]

Defaults are the first level of SD1.5's UNet (8 heads of 40 channels): 4 096 tokens is a 512 px
image, 16 384 tokens a 1024 px one. Each (backend, tokens) case runs in a fresh subprocess and
its peak memory is the growth of the process's peak resident set over the inputs (CPU), or
`torch.cuda.max_memory_allocated` (CUDA). Backends that materialise the full score matrix
(`naive`, and `split` with one slice) are skipped when that matrix alone would exceed
`--max-gib`; `split` is given enough slices to stay under it (on a shared machine, "free
memory" is not ours to take). `sub_quadratic`'s peak stays flat as tokens grow: its working set
is `heads x query_chunk x kv_chunk` scores, whatever the token count.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _case(backend: str, tokens: int, heads: int, head_dim: int, repeat: int, options: dict) -> dict:
    """Runs inside the subprocess: one backend, one size; prints a JSON line."""
    import torch

    sys.path.insert(0, str(ROOT))
    from bench.peak import time_and_peak
    from comfy_core.attention import attention, use_backend

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(1, tokens, heads * head_dim, generator=g).to(device) for _ in range(3))
    with use_backend(backend, **options):
        attention(q[:, :256], k[:, :256], v[:, :256], heads)  # warm-up on a small slice
        return time_and_peak(lambda: attention(q, k, v, heads), device, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=40)
    parser.add_argument("--max-gib", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--backends", nargs="+", default=None)
    parser.add_argument("--_case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._case:
        spec = json.loads(args._case)
        print(json.dumps(_case(**spec)))
        return

    sys.path.insert(0, str(ROOT))
    from comfy_core.attention import available_backends

    backends = args.backends or available_backends()
    cap = args.max_gib * 2**30
    print(f"self-attention, batch 1, {args.heads} heads x {args.head_dim} channels, fp32; "
          f"best of {args.repeat}; peak = memory added while attending")
    print(f"{'backend':<15}{'tokens':>8}{'time (s)':>11}{'peak (MiB)':>12}  note")
    for tokens in args.tokens:
        scores = args.heads * tokens * tokens * 4  # one fp32 score matrix
        for backend in backends:
            options: dict = {}
            note = ""
            if backend == "naive" and scores > cap:
                print(f"{backend:<15}{tokens:>8}{'-':>11}{'-':>12}  skipped: scores alone need {scores / 2**30:.1f} GiB")
                continue
            if backend == "split":
                slices = max(1, 2 ** math.ceil(math.log2(max(1.0, 2 * scores / cap))))
                options["slices"] = slices
                note = f"{slices} slices"
            if backend == "sub_quadratic":
                options = {"query_chunk_size": 1024, "kv_chunk_size": 1024}
                note = "chunks 1024 x 1024"
            spec = dict(backend=backend, tokens=tokens, heads=args.heads, head_dim=args.head_dim,
                        repeat=args.repeat, options=options)
            proc = subprocess.run([sys.executable, __file__, "--_case", json.dumps(spec)],
                                  capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                print(f"{backend:<15}{tokens:>8}{'-':>11}{'-':>12}  failed: {proc.stderr.strip().splitlines()[-1]}")
                continue
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"{backend:<15}{tokens:>8}{result['seconds']:>11.3f}{result['peak_bytes'] / 2**20:>12.1f}  "
                  f"{note}{' on ' + result['device'] if result['device'] != 'cpu' else ''}")


if __name__ == "__main__":
    main()

"""Text generation benchmark: the Qwen3 tower's key/value-cached decoding (prints figures; never
asserts on time).

    .venv/bin/python bench/text_generate.py                        # hidden 256, 4 blocks, bf16 storage, CPU
    .venv/bin/python bench/text_generate.py --hidden 2560 --layers 2 --heads 32 --kv-heads 8 --ffn 9728
                                                                   # two full-width Qwen3-4B blocks
    .venv/bin/python bench/text_generate.py --device cuda --tokens 64

A randomly initialised Qwen3 tower (Qwen's 151,680-row token table, tied LM head) stored in
`--dtype` runs a `--prompt`-token prefill and `--tokens` greedy steps, then the same number of
sampled steps with the TextGenerate widgets' defaults (temperature 0.7, top-k 64, top-p 0.95,
min-p 0.05, repetition penalty 1.05). It prints the prefill time, one cached decode step through
the blocks and the LM head separately, and the time per generated token (each the fastest of
`--repeat` runs); for `--layers` below the real depth it extrapolates a step, marked as such.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from comfy_core.text_encoders.generate import SamplingOptions, generate_tokens  # noqa: E402
from comfy_core.text_encoders.qwen3 import Qwen3Config, build_qwen3_encoder  # noqa: E402

VOCAB = 151_680


def random_state(hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, ffn: int,
                 dtype: torch.dtype) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)

    def w(*shape: int, scale: float = 0.05) -> torch.Tensor:
        return (scale * torch.randn(*shape, generator=g)).to(dtype)

    def one(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=dtype)

    state = {"model.embed_tokens.weight": w(VOCAB, hidden, scale=1.0), "model.norm.weight": one(hidden)}
    inner, kv = heads * head_dim, kv_heads * head_dim
    for i in range(layers):
        p = f"model.layers.{i}."
        state.update({
            p + "input_layernorm.weight": one(hidden), p + "post_attention_layernorm.weight": one(hidden),
            p + "self_attn.q_proj.weight": w(inner, hidden), p + "self_attn.k_proj.weight": w(kv, hidden),
            p + "self_attn.v_proj.weight": w(kv, hidden), p + "self_attn.o_proj.weight": w(hidden, inner),
            p + "self_attn.q_norm.weight": one(head_dim), p + "self_attn.k_norm.weight": one(head_dim),
            p + "mlp.gate_proj.weight": w(ffn, hidden), p + "mlp.up_proj.weight": w(ffn, hidden),
            p + "mlp.down_proj.weight": w(hidden, ffn)})
    return state


def timed(fn, repeat: int, device: torch.device) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--ffn", type=int, default=768)
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    parser.add_argument("--tokens", type=int, default=16, help="generated tokens per run")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--real-layers", type=int, default=36, help="depth to extrapolate to (Qwen3-4B: 36)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    state = random_state(args.hidden, args.layers, args.heads, args.kv_heads, args.head_dim, args.ffn,
                         getattr(torch, args.dtype))
    config = Qwen3Config.detect_from_weights(state, "")
    tower = build_qwen3_encoder(config, state).to(device)
    ids = torch.randint(0, VOCAB, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    embeds = tower.embed_ids(ids)
    greedy = SamplingOptions(do_sample=False)
    sampled = SamplingOptions(temperature=0.7, top_k=64, top_p=0.95, min_p=0.05, repetition_penalty=1.05, seed=0)

    with torch.no_grad():
        prefill, _ = timed(lambda: tower.decode_step(embeds, tower.new_cache(1, args.prompt + 1)), args.repeat, device)
        cache = tower.new_cache(1, args.prompt + 1 + args.repeat)
        tower.decode_step(embeds, cache)
        one = embeds[:, :1]
        step, _ = timed(lambda: tower.decode_step(one, cache), args.repeat, device)  # one token, warm cache
        hidden = torch.randn(1, args.hidden, device=device)
        head, _ = timed(lambda: tower.logits(hidden), args.repeat, device)
        runs = {}
        for name, options in (("greedy", greedy), ("sampled", sampled)):
            seconds, out = timed(lambda: generate_tokens(tower, embeds, args.tokens, options), args.repeat, device)
            runs[name] = (seconds, len(out))

    print(f"Qwen3 tower: hidden {args.hidden}, {args.layers} blocks, heads {args.heads}/{args.kv_heads} x "
          f"{args.head_dim}, ffn {args.ffn}, vocab {VOCAB}, {args.dtype} storage, float32 compute, {device}, "
          f"{args.threads} thread(s)")
    print(f"prefill of {args.prompt} tokens: {prefill * 1000:.1f} ms")
    print(f"one decode step through the blocks (cache of {args.prompt}): {step * 1000:.1f} ms; "
          f"LM head ({VOCAB} logits): {head * 1000:.1f} ms")
    for name, (seconds, count) in runs.items():
        per_token = (seconds - prefill) / count
        print(f"{name}: {count} tokens in {seconds * 1000:.1f} ms incl. prefill; {per_token * 1000:.1f} ms/token "
              f"({1 / per_token:.1f} tokens/s)")
    if args.layers < args.real_layers:
        per_block = step / args.layers
        print(f"EXTRAPOLATED to {args.real_layers} blocks (measured on {args.layers}): "
              f"~{(head + per_block * args.real_layers) * 1000:.0f} ms/token "
              f"({per_block * 1000:.2f} ms per block + the LM head)")

if __name__ == "__main__":
    main()

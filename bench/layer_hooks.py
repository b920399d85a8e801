"""What ComfyUI's per-layer weight contract costs a model that uses none of it: prints figures.

    .venv/bin/python bench/layer_hooks.py [--checkpoint FILE] [--size 32] [--repeat 30] [--rounds 6]

Our models are built from layers that answer ComfyUI's `comfy_cast_weights` / `weight_function`
/ `bias_function` (comfy_core/models/layers.py): each call first tests whether a hook is set. This
loads an SD1 checkpoint (by default a tiny generated one: its many small layers make the per-call
test weigh the most), then times the UNet's forward (batch 2, cfg-sized) with its layers as built
and with the same layers switched to torch's plain classes, alternating rounds in one process.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from comfy_core.loading import load_checkpoint  # noqa: E402
from comfy_core.models import layers  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="an SD1 checkpoint (default: a tiny generated one)")
    parser.add_argument("--size", type=int, default=32, help="latent side")
    parser.add_argument("--repeat", type=int, default=30, help="forwards per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    path = args.checkpoint
    if path is None:
        from tests.fixtures.checkpoints import write_tiny_checkpoint

        path = Path(tempfile.mkdtemp()) / "tiny_sd1.safetensors"
        write_tiny_checkpoint(path, "sd1")
    model, _clip, _vae = load_checkpoint(str(path), output_vae=False, output_clip=False)
    unet = model.model.diffusion_model
    built = [(layer, type(layer)) for layer in unet.modules() if isinstance(layer, layers.WeightHooks)]
    torch_class = {cls: next(b for b in cls.__mro__[1:] if b.__module__.startswith("torch.nn")) for _, cls in built}
    context_width = next(m for n, m in unet.named_modules() if n.endswith("attn2.to_k")).in_features
    x = torch.randn(2, 4, args.size, args.size)
    t = torch.tensor([500.0, 500.0])
    context = torch.randn(2, 77, context_width)

    def forward_ms() -> float:
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(args.repeat):
                unet(x, t, context=context)
            return (time.perf_counter() - start) / args.repeat * 1000

    def use(kind: str) -> None:
        for layer, cls in built:
            layer.__class__ = cls if kind == "hooked" else torch_class[cls]

    forward_ms()  # warm-up
    times: dict[str, list[float]] = {"hooked": [], "torch": []}
    for _ in range(args.rounds):
        for kind in times:
            use(kind)
            times[kind].append(forward_ms())
    use("hooked")
    print(f"{len(built)} layers with ComfyUI's weight hooks, latent {args.size}x{args.size}, batch 2, "
          f"{args.threads} threads, {args.rounds} rounds of {args.repeat} forwards")
    for kind, values in times.items():
        print(f"  {kind:6s}: median {statistics.median(values):8.2f} ms/forward  ({', '.join(f'{v:.1f}' for v in values)})")
    ratio = statistics.median(times["hooked"]) / statistics.median(times["torch"])
    print(f"  hooked / torch: {ratio:.4f}")


if __name__ == "__main__":
    main()

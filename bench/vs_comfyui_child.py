"""One measurement for bench/vs_comfyui.py, in a fresh process, for ours or for ComfyUI.

    python bench/vs_comfyui_child.py ours    CHECKPOINT FIGURE [--steps N] [--threads T]
    python bench/vs_comfyui_child.py comfyui CHECKPOINT FIGURE --comfyui DIR [-- COMFYUI FLAGS...]

FIGURE is `load` (the library call that loads a single-file checkpoint, CPU default precision:
ours `comfy_core.load_checkpoint`, ComfyUI's `comfy.sd.load_checkpoint_guess_config`) or `step`
(load, encode a prompt and an empty one, then KSampler's `sample` at 512x512, batch 1, cfg 7,
euler/normal; the figure is the median time between consecutive step callbacks, so set-up and
the first step's one-off costs are not in it). Both sides run the same calls through their own
APIs (ComfyUI's `comfy.sample.sample` has the signature ours has). Prints one JSON line.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def _api(impl: str, comfyui: str | None, flags: list[str]):
    """(load, sample, torch) for `impl`: load(path) -> (model, clip, vae)."""
    if impl == "ours":
        sys.path.insert(0, str(ROOT))
        import torch

        from comfy_core import load_checkpoint
        from comfy_core.sampling.ksampler import sample

        # Import cost is not load cost: before the clock, the modules ComfyUI's `import comfy.sd`
        # brings in too (its model definitions, comfy.supported_models; the CLIP tokenizer class,
        # comfy/sd1_clip.py's `from transformers import CLIPTokenizer`; the CLIP text model).
        import comfy_core.text_encoders  # noqa: F401
        import transformers.models.clip.modeling_clip  # noqa: F401
        from transformers import CLIPTokenizer  # noqa: F401
        from comfy_core.families import default_registry

        default_registry()  # imports the family packages (lazily imported by the loader)
        return load_checkpoint, sample, torch
    if not comfyui:
        raise SystemExit("comfyui: --comfyui DIR is required")
    sys.path.insert(0, comfyui)
    sys.argv = [sys.argv[0], *flags]
    import torch

    import comfy.options

    comfy.options.enable_args_parsing()
    import comfy.sample
    import comfy.sd

    def load(path):
        model, clip, vae, _ = comfy.sd.load_checkpoint_guess_config(str(path), output_vae=True, output_clip=True)
        return model, clip, vae

    return load, comfy.sample.sample, torch


def roofline(threads: int) -> dict:
    """This machine's fp32 matmul peak at `threads` (a 2048^3 torch.mm for ~5 s, wall clock, as the
    step figure is) and the FLOPs of one step (an SD1.5-layout UNet forward at 512x512, batch 2 for
    the cfg pair; convolutions and matmuls, counted by torch's FlopCounterMode): the step's
    achieved GFLOP/s over that peak is its roofline fraction."""
    sys.path.insert(0, str(ROOT))
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from comfy_core.models.unet import UNetConfig, UNetModel

    torch.set_num_threads(threads)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    started, n = time.perf_counter(), 0
    while time.perf_counter() - started < 5.0:
        torch.mm(a, b)
        n += 1
    peak = 2 * 2048 ** 3 * n / (time.perf_counter() - started)
    with torch.device("meta"):
        net = UNetModel(UNetConfig())
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        net(torch.randn(2, 4, 64, 64, device="meta"), torch.tensor([500.0, 500.0], device="meta"),
            torch.randn(2, 77, 768, device="meta"))
    return {"peak_flops": peak, "step_flops": counter.get_total_flops()}


def measure(impl: str, checkpoint: Path, figure: str, steps: int, threads: int, comfyui: str | None,
            flags: list[str]) -> dict:
    if figure == "roofline":
        return roofline(threads)
    load, sample, torch = _api(impl, comfyui, flags)
    torch.set_num_threads(threads)
    cpu, started = _cpu_s(), time.perf_counter()
    model, clip, vae = load(checkpoint)
    load_s, load_cpu = time.perf_counter() - started, _cpu_s() - cpu
    if figure == "load":
        return {"seconds": load_s, "cpu": load_cpu}
    if figure != "step":
        raise SystemExit(f"unknown figure {figure!r}; choose load or step")

    def encode(text):
        cond, pooled = clip.encode_from_tokens(clip.tokenize(text), return_pooled=True)
        return [[cond, {"pooled_output": pooled}]]

    positive, negative = encode("a photograph of a lighthouse at dusk"), encode("")
    latent = torch.zeros(1, 4, 64, 64)
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(0))
    stamps: list[float] = []

    def callback(step, x0, x, total):
        stamps.append(time.perf_counter())

    with torch.inference_mode():
        started = time.perf_counter()
        out = sample(model, noise, steps, 7.0, "euler", "normal", positive, negative, latent,
                     callback=callback, disable_pbar=True, seed=0)
    total = time.perf_counter() - started
    deltas = [b - a for a, b in zip(stamps, stamps[1:])]
    return {"seconds": statistics.median(deltas) if deltas else total, "first_step": stamps[0] - started,
            "deltas": deltas, "finite": bool(torch.isfinite(out).all())}


def main() -> None:
    args = sys.argv[1:]
    flags: list[str] = []
    if "--" in args:
        at = args.index("--")
        args, flags = args[:at], args[at + 1:]
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("impl", choices=("ours", "comfyui"))
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("figure", choices=("load", "step", "roofline"))
    # 4: three gaps between step callbacks, whose median skips the second step's one-off weight
    # packing (comfy_core/models/conv_prepack.py packs on a weight's second call).
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--comfyui", default=None)
    parsed = parser.parse_args(args)
    result = measure(parsed.impl, parsed.checkpoint, parsed.figure, parsed.steps, parsed.threads,
                     parsed.comfyui, flags)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

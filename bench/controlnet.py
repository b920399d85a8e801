"""ControlNet overhead per sampler step, at SD1 size with random weights.

    .venv/bin/python bench/controlnet.py [--latent 64] [--steps 3] [--threads N]

An SD1.x-size UNet (320 channels, 768-wide context, 860 M parameters) and a ControlNet of the
matching size (361 M parameters, written to a temporary `.safetensors` file in the original
`control_model.*` layout and read back through `comfy_core.controlnet.load_controlnet`), both
random, sample a `latent`x`latent` latent (64: 512x512 pixels) with euler, cfg 7 (positive and
negative in one batched pass of 2 rows) for `steps` steps, without and with ControlNetApplyAdvanced
(strength 1, whole range), after one warm-up step each. Prints seconds per step for both and the
difference (the ControlNet's cost per step), plus the load time of the ControlNet file.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latent", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()

    import torch
    from safetensors.torch import save_file

    from comfy_core.controlnet.config import ControlNetConfig
    from comfy_core.controlnet.load import load_controlnet
    from comfy_core.controlnet.model import ControlNetModel
    from comfy_core.models.diffusion import DiffusionModel
    from comfy_core.models.latent_formats import sd15_latent_format
    from comfy_core.models.unet import UNetConfig, UNetModel
    from comfy_core.patching.model import ModelPatcher
    from comfy_core.models.model_sampling import ModelSampling
    from nodes.controlnet import apply_to_pair
    from nodes.sampling import common_ksampler

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = UNetConfig()  # the SD1.x defaults
    with torch.no_grad():
        unet = UNetModel(config).eval()
        model = ModelPatcher(DiffusionModel(unet, ModelSampling("eps"), sd15_latent_format()).eval())
        network = ControlNetModel(ControlNetConfig(unet=config, hint_channels=3)).eval()
    params = lambda m: sum(p.numel() for p in m.parameters()) / 1e6  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "control_sd15_random.safetensors"
        save_file({"control_model." + k: v.contiguous() for k, v in network.state_dict().items()}, str(path))
        del network
        started = time.perf_counter()
        control = load_controlnet(path)
        load_s = time.perf_counter() - started
    positive = [[torch.randn(1, 77, 768), {}]]
    negative = [[torch.randn(1, 77, 768), {}]]
    image = torch.rand(1, args.latent * 8, args.latent * 8, 3)
    cpos, cneg = apply_to_pair(positive, negative, control, image.movedim(-1, 1), 1.0, 0.0, 1.0)
    latent = {"samples": torch.zeros(1, 4, args.latent, args.latent)}

    def per_step(pos: list, neg: list) -> float:
        with torch.no_grad():
            common_ksampler(model, 0, 1, 7.0, "euler", "normal", pos, neg, latent)  # warm-up
            started = time.perf_counter()
            common_ksampler(model, 0, args.steps, 7.0, "euler", "normal", pos, neg, latent)
        return (time.perf_counter() - started) / args.steps

    plain = per_step(positive, negative)
    controlled = per_step(cpos, cneg)
    print(f"UNet {params(unet):.0f} M parameters, ControlNet {params(control.control_model):.0f} M "
          f"(loaded in {load_s:.2f} s); latent {args.latent}x{args.latent}, batch 2 (cfg), "
          f"{args.steps} steps, {torch.get_num_threads()} threads")
    print(f"without ControlNet: {plain:.3f} s/step")
    print(f"with ControlNet:    {controlled:.3f} s/step")
    print(f"overhead:           {controlled - plain:.3f} s/step ({100 * (controlled - plain) / plain:.0f} %)")


if __name__ == "__main__":
    main()

"""LTX-Video 0.9.1+ VAE decode side by side with ComfyUI 0.3.64's, same random weights, same noise.

    .venv/bin/python bench/ltxv_vae_parity.py --comfyui /path/to/ComfyUI-0.3.64

From 0.9.1 on, LTX-Video's decoder is timestep-conditioned and mixes noise into what it decodes:
ComfyUI's `VideoVAE.decode` blends `noise_scale` of Gaussian noise into the latent and every
`inject_noise` residual block adds per-pixel noise, all drawn from torch's global generator (its
own code marks the seed as a to-do). A whole-workflow comparison (bench/pack_parity.py) cannot
line those draws up (each engine uses the global generator differently before the decode), so this
script compares the decode alone: it builds ComfyUI's `VideoVAE` from its own module at the
released base width (128, which ComfyUI fixes) and a short block list per layout, writes the
random weights to a file with that layout as the file's `config` metadata (as LTX-2's files carry
it), loads the file through our `load_vae` (the path a real file takes), seeds torch's global
generator the same way before each decode, and prints the largest difference of the decoded
frames in levels of 255, per layout (0.9.1-style: residual upsamplers, timestep conditioning, no
injected noise; 0.9.5-style: the same with noise injected in every residual block; LTX-2-style:
plain narrowing upsamplers, space-only and time-only stages).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

ENCODER = [["res_x", {"num_layers": 1}], ["compress_all_res", {"multiplier": 2}], ["res_x", {"num_layers": 1}],
           ["compress_all_res", {"multiplier": 2}], ["res_x", {"num_layers": 1}]]


def _layout(name: str) -> dict:
    if name == "ltx2":
        decoder = [["res_x", {"num_layers": 1, "inject_noise": False}],
                   ["compress_time", {"residual": False, "multiplier": 1}],
                   ["res_x", {"num_layers": 1, "inject_noise": False}],
                   ["compress_space", {"residual": False, "multiplier": 1}],
                   ["res_x", {"num_layers": 1, "inject_noise": False}]]
        extra = {"timestep_conditioning": False, "spatial_padding_mode": "zeros"}
    else:
        noise = name == "0.9.5"
        decoder = [["res_x", {"num_layers": 1, "inject_noise": noise}],
                   ["compress_all", {"residual": True, "multiplier": 2}],
                   ["res_x", {"num_layers": 1, "inject_noise": noise}],
                   ["compress_all", {"residual": True, "multiplier": 2}],
                   ["res_x", {"num_layers": 1, "inject_noise": noise}]]
        extra = {"timestep_conditioning": True}
    return {"_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3,
            "latent_channels": 128, "encoder_blocks": ENCODER, "decoder_blocks": decoder, "scaling_factor": 1.0,
            "norm_layer": "pixel_norm", "patch_size": 4, "latent_log_var": "uniform", "use_quant_conv": False,
            "causal_decoder": False, **extra}


def _import_comfyui(path: str) -> None:
    sys.path.insert(0, path)
    sys.argv = [sys.argv[0], "--cpu"]
    import comfy.options

    comfy.options.enable_args_parsing()


def _random_state(reference: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, value in reference.state_dict().items():
        x = torch.randn(value.shape, generator=generator)
        if value.ndim >= 2:  # convolutions and linears scaled by fan-in
            x = x / value[0].numel() ** 0.5
        elif name.endswith("per_channel_scale1") or name.endswith("per_channel_scale2"):
            x = x * 0.1
        elif "std-of-means" in name:
            x = x.abs() * 0.5 + 0.5
        elif name.endswith("timestep_scale_multiplier"):
            x = torch.full_like(x, 1000.0)
        else:
            x = x * 0.1
        state[name] = x.contiguous()
    return state


def compare(layout_name: str, frames: int = 2, size: int = 2, seed: int = 0) -> float:
    from safetensors.torch import save_file

    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE as Reference
    from comfy_core.loading import load_vae

    config = _layout(layout_name)
    reference = Reference(config=config).eval()
    state = _random_state(reference, seed)
    reference.load_state_dict(state, strict=True)
    latent = torch.randn(1, 128, frames, size, size, generator=torch.Generator().manual_seed(seed + 1))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"ltxv_{layout_name}_vae.safetensors"
        save_file(state, str(path), metadata={"config": json.dumps({"vae": config})})
        ours = load_vae(str(path))
    with torch.no_grad():
        torch.manual_seed(seed + 2)
        theirs_pixels = reference.decode(latent, timestep=0.05, noise_scale=0.025)
        torch.manual_seed(seed + 2)
        our_pixels = ours.model.decode_raw(latent, timestep=0.05, noise_scale=0.025)
    a = (theirs_pixels.clamp(-1, 1) + 1) * 127.5
    b = (our_pixels.clamp(-1, 1) + 1) * 127.5
    levels = (a - b).abs().amax(dim=(0, 1, 3, 4))
    print(f"{layout_name:6s} decode {tuple(theirs_pixels.shape)}: max |diff| per frame (levels of 255) "
          f"{[round(v, 4) for v in levels.tolist()]}; raw max |diff| {(theirs_pixels - our_pixels).abs().max():.2e}")
    return float(levels.max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comfyui", required=True, help="a ComfyUI 0.3.64 checkout")
    args = parser.parse_args()
    torch.set_num_threads(2)
    sys.path.insert(0, str(ROOT))
    _import_comfyui(args.comfyui)
    worst = max(compare(name) for name in ("0.9.1", "0.9.5", "ltx2"))
    print(f"largest difference over every frame and layout: {worst:.4f} levels of 255")


if __name__ == "__main__":
    main()

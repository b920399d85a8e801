"""Latent nodes: EmptyLatentImage, VAEDecode, VAEEncode, LatentUpscale, SaveLatent, LoadLatent.

Semantics are ComfyUI's (`nodes.py` at the reference snapshot, described in
`shared/reference/comfyui-contract.md`): LATENT is `{"samples": [B, 4, H/8, W/8]}` in the VAE's
raw space (a video VAE's `[B, C, T, h, w]`: VAEEncode of an IMAGE batch on a Wan VAE encodes the
images as the frames of one video, VAEDecode returns all videos' frames as one IMAGE batch);
`.latent` files are safetensors with `latent_tensor` and the marker
`latent_format_version_0` (files without the marker hold latents pre-multiplied by 0.18215 and
are divided back on load), so files move freely between ComfyUI and this engine.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from comfy_core.image.file_names import confined_file, save_location
from comfy_core.image.resize import center_crop, upscale_samples
from graph.native import MAX_RESOLUTION, Combo, Hidden, Input, Int, Output, String, node
import nodes.checks as checks
from nodes.environment import Environment, current_env
from nodes.errors import NodeInputError, image_input_errors
from nodes.image import file_sha256

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

LATENT_UPSCALE_METHODS = ["nearest-exact", "bilinear", "area", "bicubic", "bislerp"]
LATENT_CROP = ["disabled", "center"]
FORMAT_MARKER = "latent_format_version_0"
# Latents saved before the marker existed were stored multiplied by SD1's scale factor.
LEGACY_SCALE = 0.18215


@node("EmptyLatentImage", category="latent", display_name="Empty Latent Image",
      description="Create a new batch of empty latent images to be denoised via sampling.",
      inputs=[Int("width", default=512, min=16, max=MAX_RESOLUTION, step=8,
                  tooltip="The width of the latent images in pixels."),
              Int("height", default=512, min=16, max=MAX_RESOLUTION, step=8,
                  tooltip="The height of the latent images in pixels."),
              Int("batch_size", default=1, min=1, max=4096, tooltip="The number of latent images in the batch.")],
      outputs=[Output("LATENT")])
def empty_latent_image(width: int, height: int, batch_size: int = 1) -> tuple[dict]:
    import torch

    latent = torch.zeros([batch_size, 4, height // 8, width // 8])
    # Today's ComfyUI says the ratio it was made at: samplers resize it for a 1/16 model (Flux.2).
    return ({"samples": latent, "downscale_ratio_spacial": 8},)


@node("VAEDecode", category="latent", display_name="VAE Decode",
      description="Decodes latent images back into pixel space images.",
      inputs=[Input("samples", "LATENT", tooltip="The latent to be decoded."),
              Input("vae", "VAE", tooltip="The VAE model used for decoding the latent.")],
      outputs=[Output("IMAGE", tooltip="The decoded image.")])
def vae_decode(samples: dict, vae: Any) -> tuple[torch.Tensor]:
    latent = checks.latent(samples, ndims=(4, 5), nested=True)
    if getattr(latent, "is_nested", False):  # ComfyUI decodes a nested [video, audio] latent's first part
        latent = checks.latent({"samples": latent.unbind()[0]}, ndims=(4, 5))
    _check_latent_fits(latent, vae)
    images = vae.decode(latent)  # [B, H, W, 3]; a video VAE: [B, T, H, W, 3]
    if images.ndim == 5:  # ComfyUI combines the videos' frames into one IMAGE batch
        images = images.reshape(-1, *images.shape[-3:])
    return (images,)


def _check_latent_fits(latent: torch.Tensor, vae: Any) -> None:
    """A video latent [B, C, T, h, w] needs a video VAE, an image latent an image VAE."""
    axes = int(getattr(vae, "latent_dim", 2))
    if latent.ndim != axes + 2:
        kind = "a video latent [B, C, T, h, w]" if axes == 3 else "an image latent [B, C, h, w]"
        raise NodeInputError("samples", f"{kind} for this VAE", f"a latent of shape {list(latent.shape)}")


@node("VAEEncode", category="latent", display_name="VAE Encode",
      inputs=[Input("pixels", "IMAGE"), Input("vae", "VAE")], outputs=[Output("LATENT")])
def vae_encode(pixels: torch.Tensor, vae: Any) -> tuple[dict]:
    pixels = checks.image_batch(pixels, "pixels")
    return ({"samples": vae.encode(pixels[:, :, :, :3])},)


@node("LatentUpscale", category="latent", display_name="Upscale Latent",
      inputs=[Input("samples", "LATENT"), Combo("upscale_method", LATENT_UPSCALE_METHODS),
              Int("width", default=512, min=0, max=MAX_RESOLUTION, step=8),
              Int("height", default=512, min=0, max=MAX_RESOLUTION, step=8),
              Combo("crop", LATENT_CROP)],
      outputs=[Output("LATENT")])
def latent_upscale(samples: dict, upscale_method: str, width: int, height: int, crop: str) -> tuple[dict]:
    """Resize to width x height pixels (latent / 8); a 0 side keeps the aspect ratio (min 64 px),
    both 0 return the input, as ComfyUI's LatentUpscale."""
    latent = checks.latent(samples, ndims=(4,))
    checks.choice(upscale_method, LATENT_UPSCALE_METHODS, "upscale_method")
    if width == 0 and height == 0:
        return (samples,)
    if width == 0:
        height = max(64, height)
        width = max(64, round(latent.shape[-1] * height / latent.shape[-2]))
    elif height == 0:
        width = max(64, width)
        height = max(64, round(latent.shape[-2] * width / latent.shape[-1]))
    out = dict(samples)
    if upscale_method == "bislerp":
        from comfy_core.models.latent_resize import bislerp

        cropped = center_crop(latent, width // 8, height // 8) if crop == "center" else latent
        out["samples"] = bislerp(cropped, width // 8, height // 8)
    else:
        out["samples"] = upscale_samples(latent, width // 8, height // 8, upscale_method, crop)
    return (out,)


@node("SaveLatent", category="_for_testing", output_node=True,
      inputs=[Input("samples", "LATENT"), String("filename_prefix", default="latents/ComfyUI"),
              Hidden("prompt", "PROMPT"), Hidden("extra_pnginfo", "EXTRA_PNGINFO")])
def save_latent(samples: dict, filename_prefix: str = "latents/ComfyUI", prompt: Any = None,
                extra_pnginfo: Any = None) -> dict:
    """Write `<prefix>_<counter:05>_.latent` in the output folder with the workflow as metadata."""
    import torch
    from safetensors.torch import save_file

    latent = checks.latent(samples)  # image or video latents, as ComfyUI saves any tensor
    env = current_env()
    with image_input_errors():
        folder, filename, counter, subfolder = save_location(env.output_dir, filename_prefix, 0, 0)
    metadata: dict[str, str] = {}
    if prompt is not None:
        metadata["prompt"] = json.dumps(prompt)
    if isinstance(extra_pnginfo, dict):
        for key, value in extra_pnginfo.items():
            metadata[key] = json.dumps(value)
    name = f"{filename}_{counter:05}_.latent"
    tensors = {"latent_tensor": latent.contiguous(), FORMAT_MARKER: torch.tensor([])}
    save_file(tensors, str(folder / name), metadata=metadata)
    return {"ui": {"latents": [{"filename": name, "subfolder": subfolder, "type": "output"}]}}


def list_latent_files(env: Any = None) -> list[str]:
    """`.latent` files directly in the input folder, sorted (LoadLatent's combo)."""
    env = env if isinstance(env, Environment) else current_env()
    folder = env.input_dir
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.name.endswith(".latent"))


def _latent_path(latent: str) -> Path:
    with image_input_errors():
        return confined_file(current_env().input_dir, latent, input_name="latent")


def _latent_hash(latent: str, **_: Any) -> str:
    return file_sha256(_latent_path(latent))


def _latent_exists(latent: str) -> bool | str:
    try:
        path = _latent_path(latent)
    except ValueError as exc:
        return str(exc)
    return True if path.is_file() else f"Invalid latent file: {latent}"


@node("LoadLatent", category="_for_testing",
      inputs=[Combo("latent", list_latent_files)], outputs=[Output("LATENT")],
      is_changed=_latent_hash, validate_inputs=_latent_exists)
def load_latent(latent: str) -> tuple[dict]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = _latent_path(latent)
    try:
        tensors = load_file(str(path), device="cpu")
    except (SafetensorError, OSError) as exc:
        raise NodeInputError("latent", "a .latent (safetensors) file", f"{latent!r}: {exc}") from None
    if "latent_tensor" not in tensors:
        raise NodeInputError("latent", "a file holding 'latent_tensor'", f"{latent!r} with keys {sorted(tensors)}")
    multiplier = 1.0 if FORMAT_MARKER in tensors else 1.0 / LEGACY_SCALE
    return ({"samples": tensors["latent_tensor"].float() * multiplier},)

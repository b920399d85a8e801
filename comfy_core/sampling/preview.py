"""Live latent previews from a sampler's x0 predictions, after ComfyUI's `latent_preview.py`.

Two previewers, chosen by `make_previewer` from the host's preview method:
- `Latent2RGBPreviewer`: the first batch item of the model-space x0 through the family's linear
  `latent_rgb_factors` ([C][3], plus an optional bias): one preview pixel per latent pixel.
- `TAESDPreviewer`: the first batch item through a TAESD decoder (comfy_core/models/taesd.py):
  full image resolution, much closer to the final image.
Both map [-1, 1] to bytes by `((v + 1) / 2).clamp(0, 1) * 255` truncation and return
`("JPEG", image, max_size)`: the host scales the image to fit `max_size` (ComfyUI's server
enlarges small previews too, `ImageOps.contain`, bilinear) when it encodes the frame.
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

import torch
from PIL import Image

log = logging.getLogger(__name__)

PREVIEW_FORMAT = "JPEG"
MAX_PREVIEW_RESOLUTION = 512  # ComfyUI's default --preview-size
PREVIEW_METHODS = ("none", "auto", "latent2rgb", "taesd")  # ComfyUI's LatentPreviewMethod values
TAESD_FOLDER = "vae_approx"


class PreviewError(ValueError):
    """Latent and projection factors that do not fit together, or an unknown preview method."""


def preview_to_image(image: torch.Tensor) -> Image.Image:
    """[h, w, 3] values in [-1, 1] -> a PIL RGB image (ComfyUI's `preview_to_image`)."""
    pixels = ((image + 1.0) / 2.0).clamp(0, 1).mul(0xFF).to(dtype=torch.uint8, device="cpu")
    return Image.fromarray(pixels.numpy())


def latent_to_rgb(x0: torch.Tensor, factors: Sequence[Sequence[float]] | torch.Tensor,
                  bias: Sequence[float] | torch.Tensor | None = None) -> Image.Image:
    """PIL RGB image of `x0[0]` ([B, C, h, w] or [B, C, T, h, w]: first frame) through `factors` [C][3]."""
    weight = torch.as_tensor(factors, dtype=x0.dtype, device=x0.device).transpose(0, 1)  # [3, C]
    first = x0[0, :, 0] if x0.ndim == 5 else x0[0]  # [C, h, w]
    if weight.shape[1] != first.shape[0]:
        raise PreviewError(f"latent preview: {first.shape[0]} latent channels but factors for {weight.shape[1]}")
    b = torch.as_tensor(bias, dtype=x0.dtype, device=x0.device) if bias is not None else None
    rgb = torch.nn.functional.linear(first.movedim(0, -1), weight, bias=b)  # [h, w, 3]
    return preview_to_image(rgb)


class Latent2RGBPreviewer:
    """Makes `("JPEG", image, max_size)` previews from x0 predictions for one latent format."""

    kind = "latent2rgb"

    def __init__(self, latent_format: Any, max_size: int = MAX_PREVIEW_RESOLUTION) -> None:
        self.factors = getattr(latent_format, "latent_rgb_factors", None)
        self.bias = getattr(latent_format, "latent_rgb_factors_bias", None)
        # ComfyUI's `latent_rgb_factors_reshape` (Flux.2: 128 patched channels -> 32 at twice the size)
        self.reshape = getattr(latent_format, "latent_rgb_factors_reshape", None)
        self.max_size = max_size

    @property
    def available(self) -> bool:
        return bool(self.factors is not None and len(self.factors))

    def preview(self, x0: torch.Tensor) -> tuple[str, Image.Image, int] | None:
        if not self.available:
            return None
        x0 = x0.detach() if self.reshape is None else self.reshape(x0.detach())
        return (PREVIEW_FORMAT, latent_to_rgb(x0, self.factors, self.bias), self.max_size)


class TAESDPreviewer:
    """Previews decoded by a TAESD decoder (ComfyUI's `TAESDPreviewerImpl`)."""

    kind = "taesd"
    available = True

    def __init__(self, decoder: torch.nn.Module, max_size: int = MAX_PREVIEW_RESOLUTION) -> None:
        self.decoder = decoder
        self.max_size = max_size

    def preview(self, x0: torch.Tensor) -> tuple[str, Image.Image, int]:
        weight = next(self.decoder.parameters())
        if weight.device != x0.device:  # decode where the sampler runs (ComfyUI: the load device)
            self.decoder.to(x0.device)
            weight = next(self.decoder.parameters())
        with torch.inference_mode():
            latent = x0.detach()[:1].to(device=weight.device, dtype=weight.dtype)  # [1, C, h, w]
            image = self.decoder.decode(latent)[0].movedim(0, 2)  # [8h, 8w, 3] in [-1, 1]
        return (PREVIEW_FORMAT, preview_to_image(image), self.max_size)


def find_taesd_decoder(folders: Any, latent_format: Any) -> Any:
    """The path of the format's TAESD decoder in `vae_approx` (the first file, in name order,
    whose name starts with `latent_format.taesd_decoder_name`, as ComfyUI looks it up), or None."""
    prefix = getattr(latent_format, "taesd_decoder_name", None)
    if not prefix or folders is None:
        return None
    name = next((n for n in folders.filenames(TAESD_FOLDER) if n.startswith(prefix)), None)
    return folders.full_path(TAESD_FOLDER, name) if name is not None else None


def make_previewer(method: str, latent_format: Any, folders: Any, *, device: torch.device | str | None = None,
                   max_size: int = MAX_PREVIEW_RESOLUTION) -> Latent2RGBPreviewer | TAESDPreviewer | None:
    """The previewer for a preview method (ComfyUI's `get_previewer`), or None for no previews.

    "none": no previews. "latent2rgb": the linear projection. "taesd": the family's TAESD decoder
    from `models/vae_approx/` (`taesd_decoder.*` for SD1/SD2, `taesdxl_decoder.*` for SDXL), or
    the projection with a warning when that file is absent. "auto" is the projection, as in
    ComfyUI 0.3.64 (its `get_previewer` maps Auto to Latent2RGB).
    """
    if method not in PREVIEW_METHODS:
        raise PreviewError(f"preview method must be one of {PREVIEW_METHODS}, got {method!r}")
    if method == "none" or latent_format is None:
        return None
    if method == "taesd":
        path = find_taesd_decoder(folders, latent_format)
        if path is not None:
            from comfy_core.models.taesd import load_taesd_decoder

            return TAESDPreviewer(load_taesd_decoder(path, device=device), max_size)
        log.warning("TAESD previews enabled, but could not find models/%s/%s", TAESD_FOLDER,
                    getattr(latent_format, "taesd_decoder_name", None))
    previewer = Latent2RGBPreviewer(latent_format, max_size)
    return previewer if previewer.available else None

"""Latent previews: a cheap per-family linear projection of the x0 prediction to RGB.

ComfyUI's `latent_preview.Latent2RGBPreviewer`: take the first batch item of the model-space
x0 prediction, project each latent pixel with the family's `latent_rgb_factors` ([C][3], plus an
optional bias), map [-1, 1] to bytes by `((v + 1) / 2).clamp(0, 1) * 255` truncation. One preview
pixel per latent pixel (1/8 of the image size); the host scales it for display.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from PIL import Image

PREVIEW_FORMAT = "JPEG"
MAX_PREVIEW_RESOLUTION = 512  # ComfyUI's default --preview-size


class PreviewError(ValueError):
    """Latent and projection factors that do not fit together."""


def latent_to_rgb(x0: torch.Tensor, factors: Sequence[Sequence[float]] | torch.Tensor,
                  bias: Sequence[float] | torch.Tensor | None = None) -> Image.Image:
    """PIL RGB image of `x0[0]` ([B, C, h, w] or [B, C, T, h, w]: first frame) through `factors` [C][3]."""
    weight = torch.as_tensor(factors, dtype=x0.dtype, device=x0.device).transpose(0, 1)  # [3, C]
    first = x0[0, :, 0] if x0.ndim == 5 else x0[0]  # [C, h, w]
    if weight.shape[1] != first.shape[0]:
        raise PreviewError(f"latent preview: {first.shape[0]} latent channels but factors for {weight.shape[1]}")
    b = torch.as_tensor(bias, dtype=x0.dtype, device=x0.device) if bias is not None else None
    rgb = torch.nn.functional.linear(first.movedim(0, -1), weight, bias=b)  # [h, w, 3]
    pixels = ((rgb + 1.0) / 2.0).clamp(0, 1).mul(0xFF).to(dtype=torch.uint8, device="cpu")
    return Image.fromarray(pixels.numpy())


class Latent2RGBPreviewer:
    """Makes `("JPEG", image, max_size)` previews from x0 predictions for one latent format."""

    def __init__(self, latent_format: Any, max_size: int = MAX_PREVIEW_RESOLUTION) -> None:
        self.factors = getattr(latent_format, "latent_rgb_factors", None)
        self.bias = getattr(latent_format, "latent_rgb_factors_bias", None)
        self.max_size = max_size

    @property
    def available(self) -> bool:
        return bool(self.factors is not None and len(self.factors))

    def preview(self, x0: torch.Tensor) -> tuple[str, Image.Image, int] | None:
        if not self.available:
            return None
        return (PREVIEW_FORMAT, latent_to_rgb(x0.detach(), self.factors, self.bias), self.max_size)

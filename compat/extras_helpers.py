"""Module-level helpers of ComfyUI's `comfy_extras` modules that packs call directly, over ours.

- `composite` (comfy_extras/nodes_mask.py): the masked paste behind LatentCompositeMasked and
  ImageCompositeMasked; as in ComfyUI it writes into `destination` and returns it (packs use
  either), the arithmetic is `comfy_core.image.composite.paste`.
- `load_upscale_state_dict` (comfy_extras/chainner_models/model_loading.py, deprecated there):
  an upscale model from a state dict through spandrel, as the UpscaleModelLoader node loads one.
- `gaussian_kernel` (comfy_extras/nodes_post_processing.py, today's signature with `dtype`): the
  ImageBlur / ImageSharpen kernel, `comfy_core.image.filters.gaussian_kernel`, cast to `dtype`.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def composite(destination: "torch.Tensor", source: "torch.Tensor", x: int, y: int, mask: "torch.Tensor | None" = None,
              multiplier: int = 8, resize_source: bool = False) -> "torch.Tensor":
    """`source` [b, C, h, w] pasted into `destination` [B, C, H, W] at (x, y) / `multiplier`
    through `mask`, in place; returns `destination`."""
    from comfy_core.image.composite import paste

    result = paste(destination, source, x, y, mask, multiplier, resize_source)
    destination.copy_(result)
    return destination


def load_upscale_state_dict(state_dict: Mapping[str, Any]) -> Any:
    """The spandrel model descriptor for `state_dict` (ComfyUI logs the module as deprecated)."""
    from comfy_core.upscale.loading import model_from_state_dict

    log.warning("comfy_extras.chainner_models is deprecated and has been replaced by the spandrel library.")
    return model_from_state_dict(state_dict)


def gaussian_kernel(kernel_size: int, sigma: float, device: Any = None, dtype: Any = None) -> "torch.Tensor":
    """`[kernel_size, kernel_size]` samples of exp(-d^2 / (2 sigma^2)) on the grid linspace(-1, 1)^2,
    summing to 1, in `dtype` (ComfyUI's default float32)."""
    import torch

    from comfy_core.image.filters import gaussian_kernel as kernel

    return kernel(kernel_size, sigma, device=device).to(torch.float32 if dtype is None else dtype)

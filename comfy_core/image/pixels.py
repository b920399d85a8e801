"""IMAGE tensors and pixels: `[B, H, W, C]` floats in 0..1 become uint8 by `clip(255 * x)` then
truncation (not rounding), as ComfyUI does (nodes.py SaveImage), so the same image gives the
same PNG bytes."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from comfy_core.image.errors import ImageInputError

if TYPE_CHECKING:
    import numpy as np
    import torch


def image_to_uint8(image: torch.Tensor) -> np.ndarray:
    """One image `[H, W, C]` in 0..1 to uint8 pixels by `clip(255 * x)` and truncation."""
    import numpy as np
    import torch

    return np.clip(255.0 * image.detach().to("cpu", torch.float32).numpy(), 0, 255).astype(np.uint8)


def check_image_batch(images: Any, input_name: str = "images") -> torch.Tensor:
    """`images` as an IMAGE batch `[B, H, W, C]` with C in 1, 3, 4 and B, H, W > 0."""
    import torch

    if not isinstance(images, torch.Tensor):
        raise ImageInputError(input_name, "an IMAGE tensor [B, H, W, C]", type(images).__name__)
    if images.ndim != 4 or images.shape[-1] not in (1, 3, 4) or 0 in images.shape:
        raise ImageInputError(input_name, "an IMAGE tensor [B, H, W, C] with C = 1, 3 or 4",
                              f"shape {list(images.shape)}")
    return images

"""CLIP's image preprocessing as ComfyUI does it (`comfy/clip_vision.py: clip_preprocess`).

IMAGE `[B, H, W, C]` in 0..1 -> pixel values `[B, 3, size, size]`:

1. channels past the third are dropped (alpha); a single channel broadcasts over three in step 4;
2. unless the image already is `size` x `size`: with `crop`, the shortest side is resized to
   `size` (the other to `round(side * size / shortest)`, Python's rounding) and the centre
   `size` x `size` is cut out (offsets floored); without `crop`, it is resized to `size` x `size`
   (aspect ratio not kept). Resizing is bicubic with antialiasing (`torch.nn.functional.interpolate`);
3. values are quantised to 8 bits (`round(clip(255 x)) / 255`), as an image file would hold them;
4. each channel is normalised by the model's mean and std.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F


def resized_size(height: int, width: int, size: int, crop: bool) -> tuple[int, int]:
    """(height, width) an image is resized to before the centre crop."""
    if not crop:
        return size, size
    scale = size / min(height, width)
    return round(scale * height), round(scale * width)


# CLIP's normalisation (OpenAI), ComfyUI's defaults for `clip_preprocess`.
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def clip_preprocess(image: torch.Tensor, size: int = 224, mean: Sequence[float] = CLIP_MEAN,
                    std: Sequence[float] = CLIP_STD, crop: bool = True) -> torch.Tensor:
    """IMAGE `[B, H, W, C]` (0..1) -> normalised pixel values `[B, 3, size, size]` (the input's dtype).

    The defaults are ComfyUI's (`comfy.clip_vision.clip_preprocess(image, size=224, mean, std, crop)`)."""
    if image.ndim != 4:
        raise ValueError(f"clip_preprocess: expected an IMAGE [B, H, W, C], got shape {tuple(image.shape)}")
    pixels = image[..., :3].movedim(-1, 1)  # [B, C, H, W]
    height, width = pixels.shape[2], pixels.shape[3]
    if (height, width) != (size, size):
        pixels = F.interpolate(pixels, size=resized_size(height, width, size, crop), mode="bicubic",
                               antialias=True)
        top = (pixels.shape[2] - size) // 2
        left = (pixels.shape[3] - size) // 2
        pixels = pixels[:, :, top:top + size, left:left + size]
    pixels = torch.clamp(255.0 * pixels, 0, 255).round() / 255.0
    mean_t = torch.tensor(mean, device=pixels.device, dtype=pixels.dtype).view(3, 1, 1)
    std_t = torch.tensor(std, device=pixels.device, dtype=pixels.dtype).view(3, 1, 1)
    return (pixels - mean_t) / std_t

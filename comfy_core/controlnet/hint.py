"""Hint images: resizing to the latent's pixel size and matching the sampler's batch.

After ComfyUI's `comfy/controlnet.py` (`broadcast_image_to` and the hint preparation in
`ControlNet.get_control`): the hint `[B, C, H, W]` is resized with `common_upscale`'s rules
(centre crop to the target aspect ratio, then interpolation) to `latent size * compression`,
and a hint batch is cut or tiled to one conditioning's rows, then repeated once per
conditioning in the batched forward pass (`batched_number`).
"""
from __future__ import annotations

import torch

from comfy_core.image.resize import upscale_samples


def resize_hint(hint: torch.Tensor, width: int, height: int, method: str) -> torch.Tensor:
    """`[B, C, H, W]` -> `[B, C, height, width]`, centre-cropped to the target's aspect ratio."""
    return upscale_samples(hint, width, height, method, "center")


def broadcast_image_to(tensor: torch.Tensor, target_batch_size: int, batched_number: int) -> torch.Tensor:
    """A hint batch laid out for a forward pass of `target_batch_size` rows made of
    `batched_number` conditionings: a single image is left to broadcast; otherwise the first
    `target / batched_number` images (tiled when there are fewer) repeated `batched_number` times."""
    if tensor.shape[0] == 1:
        return tensor
    per_batch = target_batch_size // batched_number
    tensor = tensor[:per_batch]
    if per_batch > tensor.shape[0]:
        whole, part = divmod(per_batch, tensor.shape[0])
        tensor = torch.cat([tensor] * whole + [tensor[:part]], dim=0)
    if tensor.shape[0] == target_batch_size:
        return tensor
    return torch.cat([tensor] * batched_number, dim=0)


def repeat_to_batch_size(tensor: torch.Tensor, batch_size: int, dim: int = 0) -> torch.Tensor:
    """Cut or tile `tensor` along `dim` to `batch_size` (ComfyUI `comfy.utils.repeat_to_batch_size`)."""
    size = tensor.shape[dim]
    if size > batch_size:
        return tensor.narrow(dim, 0, batch_size)
    if size < batch_size:
        reps = [1] * tensor.ndim
        reps[dim] = -(-batch_size // size)
        return tensor.repeat(reps).narrow(dim, 0, batch_size)
    return tensor

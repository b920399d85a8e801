"""Upscaling an IMAGE batch with a loaded upscale model, after ComfyUI's
`comfy_extras/nodes_upscale_model.py: ImageUpscaleWithModel` (0.3.64), written here:

- the model moves to the compute device, the image goes there channels-first;
- each image is scaled in 512-pixel tiles overlapping by 32 (`tiling`, ComfyUI's feathered
  blending; an image of at most 512x512 is one call of the model), results gathered on the CPU
  in float32 with 3 channels;
- on an out-of-memory error the tile is halved and the whole batch starts again, down to 128
  pixels; below that the error is raised;
- the model goes back to the offload device, the result is clamped to 0..1 and returned
  `[B, H*scale, W*scale, 3]`.

Progress is one step per tile (restarting at 0 after a halving, as ComfyUI's progress bar).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from comfy_core.memory import is_out_of_memory
from comfy_core.upscale.tiling import get_tiled_scale_steps, scale_in_tiles

if TYPE_CHECKING:
    from spandrel import ImageModelDescriptor

TILE = 512
OVERLAP = 32
MIN_TILE = 128  # ComfyUI gives up once a halving would go below this
# ComfyUI's estimate of activation memory per input pixel and channel, times the scale.
ACTIVATION_FACTOR = 384.0

Progress = Callable[[int, int], None]  # (tiles done, tiles in all)


class _Steps:
    """ComfyUI's ProgressBar protocol (`update(1)` per tile) over a `(done, total)` callback."""

    def __init__(self, total: int, report: Progress | None) -> None:
        self.total, self.done, self.report = total, 0, report

    def update(self, value: int) -> None:
        self.done = min(self.done + value, self.total)
        if self.report is not None:
            self.report(self.done, self.total)


def memory_required(model: "ImageModelDescriptor", image: torch.Tensor) -> int:
    """ComfyUI's estimate of what an upscale needs on the device, in bytes: the weights, one
    512x512 tile's activations (scaled) and the input image."""
    weights = sum(t.numel() * t.element_size() for t in model.model.state_dict().values())
    activations = (TILE * TILE * 3) * image.element_size() * max(model.scale, 1.0) * ACTIVATION_FACTOR
    return int(weights + activations + image.nelement() * image.element_size())


def tile_steps(image: torch.Tensor, tile: int = TILE, overlap: int = OVERLAP) -> int:
    """The progress total for `image` [B, H, W, C] at `tile`."""
    return image.shape[0] * get_tiled_scale_steps(image.shape[2], image.shape[1], tile, tile, overlap)


def upscale_image(model: "ImageModelDescriptor", image: torch.Tensor, *, device: torch.device | str | None = None,
                  offload_device: torch.device | str = "cpu", progress: Progress | None = None,
                  tile: int = TILE, overlap: int = OVERLAP) -> torch.Tensor:
    """`image` [B, H, W, C] in 0..1 -> float32 [B, H*scale, W*scale, 3] on the CPU, clamped to 0..1.

    `device`: where the model runs (default: where it is); `progress(done, total)` after each
    tile (it may raise to stop, e.g. on an interrupt). The image is fed in the model's dtype."""
    device = torch.device(device) if device is not None else model.device
    model.to(device)
    try:
        with torch.no_grad():
            pixels = image.movedim(-1, -3).to(device=device, dtype=model.dtype)  # [B, C, H, W]
            while True:
                try:
                    steps = _Steps(tile_steps(image, tile, overlap), progress)
                    scaled = scale_in_tiles(pixels, model, (tile, tile), overlap=overlap, upscale_amount=model.scale,
                                            out_channels=3, output_device="cpu", pbar=steps)
                    break
                except Exception as exc:  # noqa: BLE001 -- only out-of-memory is handled, the rest re-raised
                    if not is_out_of_memory(exc) or tile // 2 < MIN_TILE:
                        raise
                # Out of the except block: the failed attempt's buffers (held by the traceback) are gone.
                tile //= 2
                _release_cached(device)
            # In place: the output is ours, and a clamped copy would double the peak memory.
            return scaled.clamp_(0.0, 1.0).movedim(-3, -1)
    finally:
        model.to(offload_device)


def _release_cached(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def wants_room(model: "ImageModelDescriptor", image: torch.Tensor, device: torch.device | str) -> bool:
    """True when the accelerator's free memory is below `memory_required` (the caller then asks
    its memory manager to offload other models first, as ComfyUI frees memory before upscaling)."""
    device = torch.device(device)
    if device.type != "cuda":
        return False
    free, _ = torch.cuda.mem_get_info(device)
    return free < memory_required(model, image)


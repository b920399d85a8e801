"""Scaling a tensor tile by tile with feathered overlaps, in bounded memory.

Semantics of ComfyUI's `comfy/utils.py: tiled_scale_multidim`, `tiled_scale` and
`get_tiled_scale_steps` (0.3.64), written here from their behaviour; on the same inputs the
result is bit for bit ComfyUI's (checked against ComfyUI's own function on random inputs):

- Along a spatial axis of length `size` longer than `tile`, tiles start at 0, tile - overlap,
  2 (tile - overlap), ... while the start is below `size - overlap`, and the last one is cut at
  the border (it may be shorter). An axis no longer than `tile` is one tile. Tiles run in
  row-major order (the first spatial axis slowest).
- Each tile's result `function(tile)` is placed at `round(position(start))` per axis, where
  `position` is `index_formulas` (default: the scale) applied to the start, and weighted by a
  mask: per axis, its first and last `f = round(scale(overlap))` entries are multiplied by
  (t + 1) / f for t = 0 .. f-1 (both ramps where they meet; an axis no longer than f is left
  unweighted). The weighted results are summed, the masks are summed, and the output is
  their quotient, so an overlap fades linearly from one tile into the next.
- A batch element that fits one tile on every axis is `function(element)` as it is.
- `scale` / `position` are a number (times the value; divided by it with `downscale`) or a
  callable of the value, per axis or one for all.

Unlike ComfyUI, which holds three output-sized buffers (the output, the weighted sum and the
summed masks), the weighted sum is accumulated in the output itself and the summed masks are
kept, single-channel, only for the band of output rows (first spatial axis) that later tiles
can still reach; rows that no remaining tile reaches are divided and left final. A 4x upscale
of a 2048x2048 image with 512-pixel tiles thus holds the output plus about one tile row of
weights and a few tile-sized temporaries, and each addition and division happens in the same
order as ComfyUI's, which keeps the result identical.
"""
from __future__ import annotations

import itertools
from typing import Callable, Protocol, Sequence, Union

import torch

# One tiling rule for the VAE and the upscalers: tiles step by (tile - overlap), the last one clipped.
from comfy_core.models.vae_tiling import TilingError, tile_spans

TileFunction = Callable[[torch.Tensor], torch.Tensor]  # [1, C, *tile] -> [1, C_out, *scaled tile]
Factor = Union[float, Callable[[float], float]]  # a scale: times (or, downscaling, over) a number, or a callable


class ProgressBar(Protocol):
    """What `pbar` must offer: ComfyUI's `ProgressBar.update(1)` after each tile."""

    def update(self, value: int) -> None: ...


def get_tiled_scale_steps(width: int, height: int, tile_x: int, tile_y: int, overlap: int) -> int:
    """How many tiles one [H, W] image takes (the progress total per batch element)."""
    return len(tile_spans(height, tile_y, overlap)) * len(tile_spans(width, tile_x, overlap))


def _per_axis(value: object, axes: int) -> list:
    return list(value) if isinstance(value, (tuple, list)) else [value] * axes


def _apply(factor: Factor, value: float, downscale: bool) -> float:
    if callable(factor):
        return factor(value)
    return value / factor if downscale else factor * value


def feather_mask(shape: Sequence[int], feathers: Sequence[int], dtype: torch.dtype,
                 device: torch.device | str) -> torch.Tensor:
    """The weights of one tile result, `[1, 1, *shape]`: per axis, entry t from each end is
    multiplied by (t + 1) / f, t < f = that axis's feather; an axis of length <= f stays 1.

    The scalar multiplications run in the same order and dtype as ComfyUI's (entry by entry,
    both ends per step, axis after axis), so the weights are the same floats, not merely close.
    One channel is enough: every channel of ComfyUI's mask holds the same values."""
    mask = torch.ones((1, 1, *shape), dtype=dtype, device=device)
    for axis, feather in enumerate(feathers, start=2):
        length = mask.shape[axis]
        if feather >= length:
            continue
        for step in range(feather):
            weight = (step + 1) / feather
            mask.narrow(axis, step, 1).mul_(weight)
            mask.narrow(axis, length - 1 - step, 1).mul_(weight)
    return mask


class _WeightBand:
    """The summed tile weights of output rows [low, low + rows held) of one batch element, one
    channel, on the output's device: only the rows that tiles may still add to."""

    def __init__(self, target: torch.Tensor) -> None:
        self.target = target  # [1, C, rows, *rest]: the weighted sum, divided in place when final
        self.low = 0
        self.weights: torch.Tensor | None = None  # [1, 1, held, *rest]

    def _reach(self, end: int) -> torch.Tensor:
        """The buffer, grown (zero-filled) to hold rows up to `end`."""
        held = 0 if self.weights is None else self.weights.shape[2]
        if end - self.low > held:
            grown = torch.zeros((1, 1, end - self.low, *self.target.shape[3:]), device=self.target.device)
            if self.weights is not None:
                grown[:, :, :held] = self.weights
            self.weights = grown
        return self.weights

    def add(self, offsets: Sequence[int], mask: torch.Tensor) -> None:
        window = self._reach(offsets[0] + mask.shape[2]).narrow(2, offsets[0] - self.low, mask.shape[2])
        for axis in range(1, len(offsets)):
            window = window.narrow(axis + 2, offsets[axis], mask.shape[axis + 2])
        window.add_(mask)

    def finish_below(self, end: int) -> None:
        """Rows before `end` get no more tiles: divide them by their weights; keep the rest."""
        count = end - self.low
        if count <= 0:
            return
        weights = self._reach(end)
        # Rows no tile reached divide 0 by 0, as ComfyUI's do.
        self.target.narrow(2, self.low, count).div_(weights[:, :, :count])
        left = weights.shape[2] - count
        if left:
            weights[:, :, :left] = weights[:, :, count:].clone()  # the overlap the next tile row adds to
        weights[:, :, left:].zero_()
        self.low = end


def _blend_tiles(item: torch.Tensor, target: torch.Tensor, function: TileFunction, tile: Sequence[int],
                 overlaps: Sequence[int], feathers: Sequence[int], place: Callable[[int, int], int],
                 output_device: torch.device | str, pbar: ProgressBar | None) -> None:
    """One batch element `item` [1, C, *sizes] in tiles, into `target` [1, C_out, *scaled sizes]."""
    axes = len(tile)
    spans = [tile_spans(item.shape[axis + 2], tile[axis], overlaps[axis]) for axis in range(axes)]
    target.zero_()
    band = _WeightBand(target)
    # The output row where each row of tiles starts. After a row of tiles, the output rows above
    # the highest start among the rows still to come are final (a minimum over all of them, not
    # just the next, since `place` may be any formula).
    row_starts = [place(0, start) for start, _ in spans[0]]
    for row, (start, length) in enumerate(spans[0]):
        for rest in itertools.product(*spans[1:]):
            region = ((start, length), *rest)
            piece = item
            for axis, (begin, size) in enumerate(region):
                piece = piece.narrow(axis + 2, begin, size)
            result = function(piece).to(output_device)  # [1, C_out, *tile result]
            mask = feather_mask(result.shape[2:], feathers, result.dtype, result.device)
            offsets = [place(axis, begin) for axis, (begin, _) in enumerate(region)]
            window = target
            for axis in range(axes):
                window = window.narrow(axis + 2, offsets[axis], result.shape[axis + 2])
            window.add_(result * mask)
            band.add(offsets, mask)
            if pbar is not None:
                pbar.update(1)
        band.finish_below(min(row_starts[row + 1:], default=target.shape[2]))


def scale_in_tiles(samples: torch.Tensor, function: TileFunction, tile: Sequence[int] = (64, 64),
                   overlap: int | Sequence[int] = 8, upscale_amount: Factor | Sequence[Factor] = 4,
                   out_channels: int = 3, output_device: torch.device | str = "cpu",
                   downscale: bool = False, index_formulas: Factor | Sequence[Factor] | None = None,
                   pbar: ProgressBar | None = None) -> torch.Tensor:
    """`samples` [B, C, *sizes] -> [B, out_channels, *round(scale(size))] on `output_device`
    (default dtype), `function` applied per tile as the module docstring describes.

    Runs in the caller's autograd mode (callers wrap it in `torch.no_grad()`): the output is an
    ordinary tensor that may be changed in place afterwards, which an inference-mode tensor
    (what ComfyUI's `tiled_scale_multidim` returns) may not."""
    axes = len(tile)
    scales = _per_axis(upscale_amount, axes)
    positions = scales if index_formulas is None else _per_axis(index_formulas, axes)
    overlaps = _per_axis(overlap, axes)

    def size(axis: int, value: int) -> int:
        return round(_apply(scales[axis], value, downscale))

    def place(axis: int, value: int) -> int:
        return round(_apply(positions[axis], value, downscale))

    feathers = [size(axis, overlaps[axis]) for axis in range(axes)]
    spatial = [size(axis, samples.shape[axis + 2]) for axis in range(axes)]
    output = torch.empty((samples.shape[0], out_channels, *spatial), device=output_device)
    for index in range(samples.shape[0]):
        item, target = samples[index:index + 1], output[index:index + 1]
        if all(item.shape[axis + 2] <= tile[axis] for axis in range(axes)):
            target[:] = function(item).to(output_device)
            if pbar is not None:
                pbar.update(1)
            continue
        _blend_tiles(item, target, function, tile, overlaps, feathers, place, output_device, pbar)
    return output


@torch.inference_mode()
def tiled_scale_multidim(samples: torch.Tensor, function: TileFunction, tile: Sequence[int] = (64, 64),
                         overlap: int | Sequence[int] = 8, upscale_amount: Factor | Sequence[Factor] = 4,
                         out_channels: int = 3, output_device: torch.device | str = "cpu",
                         downscale: bool = False, index_formulas: Factor | Sequence[Factor] | None = None,
                         pbar: ProgressBar | None = None) -> torch.Tensor:
    """ComfyUI's `comfy.utils.tiled_scale_multidim`: `scale_in_tiles` in inference mode."""
    return scale_in_tiles(samples, function, tile, overlap, upscale_amount, out_channels, output_device,
                          downscale, index_formulas, pbar)


def tiled_scale(samples: torch.Tensor, function: TileFunction, tile_x: int = 64, tile_y: int = 64,
                overlap: int = 8, upscale_amount: Factor = 4, out_channels: int = 3,
                output_device: torch.device | str = "cpu", pbar: ProgressBar | None = None) -> torch.Tensor:
    """Two spatial axes, `samples` [B, C, H, W]: `tiled_scale_multidim` with tile (tile_y, tile_x)."""
    return tiled_scale_multidim(samples, function, (tile_y, tile_x), overlap=overlap, upscale_amount=upscale_amount,
                                out_channels=out_channels, output_device=output_device, pbar=pbar)

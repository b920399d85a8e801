"""Tiled VAE decoding and encoding: overlapping tiles blended with linear feathering.

Behaviour of ComfyUI's `comfy/utils.py: tiled_scale_multidim` (two spatial axes) and of
`comfy/sd.py: VAE.decode_tiled_ / encode_tiled_`, written here from their description:

- Along one side of length `size`, tiles start at 0, (tile - overlap), 2 (tile - overlap), ...
  while the start is below `size - overlap`; the last tile is cut at the border (it may be
  shorter). A side no longer than `tile` is one tile.
- Each tile is mapped by `fn` (decode: x8 larger, encode: /8 smaller) and placed at its start
  times `scale` (rounded). It is weighted by a mask that ramps linearly, 1/f, 2/f, ..., 1, over
  its first and last `f = round(overlap * scale)` rows and columns (the product of the two 1-D
  ramps); the weighted tiles are summed and divided by the summed weights, so in an overlap the
  result fades linearly from one tile to the next and a seam leaves no visible step.
- A batch element that fits one tile on both sides is mapped whole, without weights.
- The result is the mean of three tilings, (tile_h, tile_w), (tile_h / 2, tile_w * 2) and
  (tile_h * 2, tile_w / 2): the seams of one tiling fall where the others are continuous, which
  hides what feathering alone leaves (GroupNorm and attention see different context per tile).
  Tilings that cut the image identically give identical results, so each distinct one is run
  once; when all three coincide (the image fits the tiles) the result is that one tiling's,
  exactly what the plain, untiled call gives.

Video latents (`tiled_nd`) are tiled over time and space at once, in one tiling, as ComfyUI's
`tiled_scale_multidim` does for video VAEs.

Batch elements are processed one at a time and every tile result is moved to `output_device`
at once, so the accelerator holds the module and one tile's activations, never the whole image.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

TileFn = Callable[[torch.Tensor], torch.Tensor]  # [1, C_in, h, w] -> [1, C_out, h*scale, w*scale]
Progress = Callable[[int, int], None]  # (tiles done, tiles in all)


class TilingError(ValueError):
    """Tile sizes that cannot cover the input (a tile no larger than the overlap, a zero tile)."""


def tile_spans(size: int, tile: int, overlap: int) -> list[tuple[int, int]]:
    """(start, length) of the tiles along one side of length `size`."""
    if tile < 1 or overlap < 0:
        raise TilingError(f"tile size must be at least 1 and overlap at least 0, got tile {tile}, overlap {overlap}")
    if size <= tile:
        return [(0, size)]
    if tile <= overlap:
        raise TilingError(f"tile size {tile} must be larger than the overlap {overlap} to cover {size}")
    return [(start, min(tile, size - start)) for start in range(0, size - overlap, tile - overlap)]


def feather_ramp(length: int, feather: int) -> torch.Tensor:
    """Weights [length]: rising (t + 1) / feather over the first `feather` entries and falling
    likewise over the last ones (both apply where they meet); all ones when `feather` does not
    fit in `length` or is 0, as ComfyUI leaves such an axis unweighted."""
    if feather <= 0 or feather >= length:
        return torch.ones(length)
    index = torch.arange(length, dtype=torch.float32)
    rise = torch.clamp((index + 1) / feather, max=1.0)
    fall = torch.clamp((length - index) / feather, max=1.0)
    return rise * fall


def three_tilings(tile_h: int, tile_w: int) -> list[tuple[int, int]]:
    """The (tile_h, tile_w) of the three tilings whose results are averaged."""
    return [(tile_h, tile_w), (tile_h // 2, tile_w * 2), (tile_h * 2, tile_w // 2)]


def tiled_pass(samples: torch.Tensor, fn: TileFn, tile: tuple[int, int], overlap: int, scale: float,
               out_channels: int, output_device: torch.device | str = "cpu",
               on_tile: Callable[[], None] | None = None) -> torch.Tensor:
    """One tiling: samples [B, C, H, W] -> float32 [B, out_channels, round(H*scale), round(W*scale)]."""
    batch, _, height, width = samples.shape
    rows = tile_spans(height, tile[0], overlap)
    cols = tile_spans(width, tile[1], overlap)
    out_h, out_w = round(height * scale), round(width * scale)
    output = torch.empty(batch, out_channels, out_h, out_w, device=output_device)
    if len(rows) == 1 and len(cols) == 1:
        for b in range(batch):
            output[b:b + 1] = fn(samples[b:b + 1])
            if on_tile is not None:
                on_tile()
        return output

    feather = round(overlap * scale)
    weight = torch.zeros(1, 1, out_h, out_w, device=output_device)  # the same for every element
    for b in range(batch):
        out = output[b:b + 1].zero_()
        for (y, h), (x, w) in itertools.product(rows, cols):
            piece = fn(samples[b:b + 1, :, y:y + h, x:x + w]).to(device=output_device, dtype=torch.float32)
            ramp_h = feather_ramp(piece.shape[-2], feather).to(output_device)
            ramp_w = feather_ramp(piece.shape[-1], feather).to(output_device)
            mask = ramp_h[:, None] * ramp_w[None, :]  # [h', w']
            top, left = round(y * scale), round(x * scale)
            # A last tile's result may reach past the border when the scale rounds up: cut it.
            keep_h, keep_w = min(piece.shape[-2], out_h - top), min(piece.shape[-1], out_w - left)
            mask = mask[:keep_h, :keep_w]
            out[..., top:top + keep_h, left:left + keep_w] += piece[..., :keep_h, :keep_w] * mask
            if b == 0:
                weight[..., top:top + keep_h, left:left + keep_w] += mask
            if on_tile is not None:
                on_tile()
        if b == 0 and not bool((weight > 0).all()):
            raise TilingError(f"tiles {tile} with overlap {overlap} leave parts of a {height}x{width} input uncovered")
        out.div_(weight)
    return output


def blended_tiles(samples: torch.Tensor, fn: TileFn, tile_h: int, tile_w: int, overlap: int, scale: float,
                  out_channels: int, output_device: torch.device | str = "cpu",
                  progress: Progress | None = None) -> torch.Tensor:
    """The mean of the three tilings of `samples` [B, C, H, W] (see the module docstring);
    `progress(done, total)` is called after each tile."""
    if samples.ndim != 4:
        raise TilingError(f"expected samples [B, C, H, W], got shape {tuple(samples.shape)}")
    height, width = samples.shape[-2:]
    layouts: dict[tuple, tuple[tuple[int, int], int]] = {}  # layout -> (tile, how many tilings give it)
    for tile in three_tilings(tile_h, tile_w):
        key = (tuple(tile_spans(height, tile[0], overlap)), tuple(tile_spans(width, tile[1], overlap)))
        first, count = layouts.get(key, (tile, 0))
        layouts[key] = (first, count + 1)
    total = samples.shape[0] * sum(len(rows) * len(cols) for rows, cols in layouts)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    result: torch.Tensor | None = None
    for tile, count in layouts.values():
        one = tiled_pass(samples, fn, tile, overlap, scale, out_channels, output_device, tick)
        if len(layouts) == 1:
            return one
        result = one.mul_(count) if result is None else result.add_(one, alpha=count)
    assert result is not None
    return result.div_(3.0)


def crop_to_multiple(pixels: torch.Tensor, factor: int) -> torch.Tensor:
    """Centre-crop IMAGE [B, H, W, C] to the largest multiple of `factor` on each side, as
    ComfyUI does before encoding (`VAE.vae_encode_crop_pixels`)."""
    height, width = (pixels.shape[1] // factor) * factor, (pixels.shape[2] // factor) * factor
    if (height, width) == tuple(pixels.shape[1:3]):
        return pixels
    top, left = (pixels.shape[1] % factor) // 2, (pixels.shape[2] % factor) // 2
    return pixels[:, top:top + height, left:left + width, :]


# --- Video latents: one tiling over time and space (ComfyUI's `tiled_scale_multidim`) ---


@dataclass(frozen=True)
class Axis:
    """How one axis of a video is tiled: `tile` and `overlap` in input units; `size(n)` is the
    output length of an input of length `n` (also the feather width of an overlap), `place(p)`
    the output start of a tile starting at input index `p` (they differ for Wan's time axis:
    T' latent frames decode to 4T' - 3 frames, a tile starting at latent frame p lands at 4p)."""

    tile: int
    overlap: int
    size: Callable[[int], float]
    place: Callable[[int], float]


def tiled_nd(samples: torch.Tensor, fn: TileFn, axes: Sequence[Axis], out_channels: int,
             output_device: torch.device | str = "cpu", progress: Progress | None = None) -> torch.Tensor:
    """samples [B, C, *dims] -> float32 [B, out_channels, *round(axis.size(dim))], mapped by `fn`
    in one tiling of overlapping tiles (spans as `tile_spans`), each weighted by the product of
    its axes' linear ramps (`feather_ramp`, width `round(axis.size(overlap))`) and normalised by
    the summed weights. A batch element that fits one tile is mapped whole. ComfyUI uses this
    single tiling (not the mean of three) for video VAEs; so does this."""
    if samples.ndim != 2 + len(axes):
        raise TilingError(f"expected samples [B, C] + {len(axes)} axes, got shape {tuple(samples.shape)}")
    dims = samples.shape[2:]
    out_dims = [round(axis.size(n)) for axis, n in zip(axes, dims)]
    spans = [tile_spans(n, axis.tile, axis.overlap) for axis, n in zip(axes, dims)]
    whole = all(len(s) == 1 for s in spans)
    total = samples.shape[0] * (1 if whole else math.prod(len(s) for s in spans))
    done = 0
    output = torch.empty(samples.shape[0], out_channels, *out_dims, device=output_device)
    for b in range(samples.shape[0]):
        element = samples[b:b + 1]
        if whole:
            output[b:b + 1] = fn(element).to(device=output_device, dtype=torch.float32)
            done += 1
            if progress is not None:
                progress(done, total)
            continue
        acc = torch.zeros(1, out_channels, *out_dims, device=output_device)
        weight = torch.zeros(1, 1, *out_dims, device=output_device)
        for corner in itertools.product(*spans):
            piece = element
            for d, (start, length) in enumerate(corner):
                piece = piece.narrow(d + 2, start, length)
            result = fn(piece).to(device=output_device, dtype=torch.float32)
            mask = torch.ones((), device=output_device)
            where = []
            for d, ((start, _), axis) in enumerate(zip(corner, axes)):
                top = round(axis.place(start))
                keep = min(result.shape[d + 2], out_dims[d] - top)  # a rounded-up last tile is cut
                result = result.narrow(d + 2, 0, keep)
                ramp = feather_ramp(keep, round(axis.size(axis.overlap))).to(output_device)
                mask = mask.unsqueeze(-1) * ramp  # grows to [keep_0, ..., keep_d]
                where.append(slice(top, top + keep))
            acc[(..., *where)] += result * mask
            weight[(..., *where)] += mask
            done += 1
            if progress is not None:
                progress(done, total)
        if not bool((weight > 0).all()):
            raise TilingError(f"tiles {[a.tile for a in axes]} with overlaps {[a.overlap for a in axes]} leave parts "
                              f"of a {list(dims)} input uncovered")
        output[b:b + 1] = acc / weight
    return output

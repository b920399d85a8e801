"""comfy_core.upscale.tiling: ComfyUI's tiled_scale semantics (spans, feather weights, blending),
against a plain reference written here with full-size buffers, and its bounded memory."""
from __future__ import annotations

import itertools
import weakref

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from comfy_core.upscale.tiling import (
    TilingError,
    feather_mask,
    get_tiled_scale_steps,
    scale_in_tiles,
    tile_spans,
    tiled_scale,
    tiled_scale_multidim,
)


def reference_tiled_scale(samples: torch.Tensor, fn, tile: tuple[int, ...], overlap: int, scale: float,
                          out_channels: int = 3) -> torch.Tensor:
    """ComfyUI's tiled_scale_multidim (numeric scale), written plainly: a full-size weighted sum
    and a full-size weight sum per image, divided at the end; tiles in row-major order."""
    axes = len(tile)
    out_sizes = [round(scale * s) for s in samples.shape[2:]]
    feather = round(scale * overlap)
    result = torch.empty(samples.shape[0], out_channels, *out_sizes)
    for b in range(samples.shape[0]):
        x = samples[b:b + 1]
        if all(x.shape[a + 2] <= tile[a] for a in range(axes)):
            result[b:b + 1] = fn(x)
            continue
        acc = torch.zeros(1, out_channels, *out_sizes)
        wsum = torch.zeros(1, out_channels, *out_sizes)
        starts = [[0] if x.shape[a + 2] <= tile[a] else list(range(0, x.shape[a + 2] - overlap, tile[a] - overlap))
                  for a in range(axes)]
        for corner in itertools.product(*starts):
            cut = tuple(slice(s, s + min(tile[a], x.shape[a + 2] - s)) for a, s in enumerate(corner))
            y = fn(x[(slice(None), slice(None), *cut)])
            w = torch.ones_like(y)
            for axis in range(2, w.ndim):
                n = w.shape[axis]
                if feather >= n:
                    continue
                for t in range(feather):
                    for i in (t, n - 1 - t):
                        index = [slice(None)] * w.ndim
                        index[axis] = slice(i, i + 1)
                        w[tuple(index)] *= (t + 1) / feather
            place = tuple(slice(round(scale * s), round(scale * s) + y.shape[a + 2]) for a, s in enumerate(corner))
            acc[(slice(None), slice(None), *place)] += y * w
            wsum[(slice(None), slice(None), *place)] += w
        result[b:b + 1] = acc / wsum
    return result


class Steps:
    def __init__(self) -> None:
        self.n = 0

    def update(self, value: int) -> None:
        self.n += value


def _conv_up(scale: int, out_channels: int = 3, dtype: torch.dtype = torch.float32, seed: int = 0):
    """A tile function with context (a 3x3 convolution), so tiles see different neighbourhoods."""
    w = torch.randn(out_channels, 3, 3, 3, generator=torch.Generator().manual_seed(seed)) * 0.3

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = F.conv2d(x.float(), w, padding=1)
        return torch.sigmoid(F.interpolate(y, scale_factor=scale, mode="nearest")).to(dtype)
    return fn


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


# --- tile layout ---------------------------------------------------------------------------------

def test_tile_spans_follow_the_stride_and_cut_the_last_tile():
    # 1000 px, tile 512, overlap 32: starts every 480 px while below 968, the last one cut to 40 px.
    assert tile_spans(1000, 512, 32) == [(0, 512), (480, 512), (960, 40)]
    assert tile_spans(512, 512, 32) == [(0, 512)]
    assert tile_spans(513, 512, 32) == [(0, 512), (480, 33)]
    assert tile_spans(10, 4, 0) == [(0, 4), (4, 4), (8, 2)]
    assert get_tiled_scale_steps(1000, 513, 512, 512, 32) == 3 * 2
    assert get_tiled_scale_steps(2048, 2048, 512, 512, 32) == 5 * 5


def test_tile_spans_refuse_tiles_that_cannot_cover():
    with pytest.raises(TilingError, match="larger than the overlap"):
        tile_spans(100, 8, 8)
    with pytest.raises(TilingError):
        tile_spans(100, 0, 0)
    with pytest.raises(TilingError):
        tile_spans(100, 16, -1)


def test_feather_mask_ramps_both_ends_per_axis():
    mask = feather_mask((6,), (2,), torch.float32, "cpu")
    assert mask.tolist() == [[[0.5, 1.0, 1.0, 1.0, 1.0, 0.5]]]
    # Where the ramps meet, both apply: length 4, feather 3 -> 1/3, 2/3 (x 1), 2/3, 1/3.
    mask = feather_mask((4,), (3,), torch.float32, "cpu")
    assert torch.equal(mask[0, 0], torch.tensor([1 / 3, 2 / 3, 2 / 3, 1 / 3], dtype=torch.float32))
    assert torch.equal(feather_mask((3,), (3,), torch.float32, "cpu"), torch.ones(1, 1, 3))  # too short: unweighted
    mask = feather_mask((4, 6), (2, 2), torch.float32, "cpu")
    rows, cols = torch.tensor([0.5, 1, 1, 0.5]), torch.tensor([0.5, 1, 1, 1, 1, 0.5])
    assert torch.equal(mask[0, 0], rows[:, None] * cols[None, :])


# --- blending --------------------------------------------------------------------------------------

@pytest.mark.parametrize("size,tile,overlap,scale,batch", [
    ((37, 53), (16, 24), 4, 2, 1),
    ((64, 20), (20, 20), 3, 4, 2),
    ((50, 50), (17, 13), 6, 3, 1),
    ((9, 70), (32, 32), 8, 1, 1),
    ((33, 33), (16, 16), 0, 2, 1),
])
def test_tiled_scale_equals_the_plain_reference_bit_for_bit(size, tile, overlap, scale, batch):
    x = _rand(batch, 3, *size, seed=sum(size))
    fn = _conv_up(scale)
    steps = Steps()
    got = tiled_scale(x, fn, tile_x=tile[1], tile_y=tile[0], overlap=overlap, upscale_amount=scale, pbar=steps)
    expected = reference_tiled_scale(x, fn, tile, overlap, scale)
    assert got.shape == (batch, 3, size[0] * scale, size[1] * scale)
    assert torch.equal(got, expected)
    assert steps.n == batch * get_tiled_scale_steps(size[1], size[0], tile[1], tile[0], overlap)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_tile_results_blend_as_comfyui(dtype):
    """Masks take the tile result's dtype (ComfyUI's ones_like), sums stay float32."""
    x = _rand(1, 3, 40, 45, seed=3)
    fn = _conv_up(2, dtype=dtype)
    got = tiled_scale(x, fn, tile_x=16, tile_y=16, overlap=4, upscale_amount=2)
    assert got.dtype == torch.float32
    assert torch.equal(got, reference_tiled_scale(x, fn, (16, 16), 4, 2))


def test_single_channel_results_fill_every_output_channel():
    x = _rand(1, 3, 30, 30, seed=4)
    fn = _conv_up(2, out_channels=1)
    got = tiled_scale(x, fn, tile_x=16, tile_y=16, overlap=4, upscale_amount=2, out_channels=3)
    assert torch.equal(got, reference_tiled_scale(x, fn, (16, 16), 4, 2))
    assert torch.equal(got[:, 0], got[:, 2])


def test_three_axes_blend_as_the_reference():
    x = _rand(1, 2, 11, 19, 23, seed=5)

    def fn(v: torch.Tensor) -> torch.Tensor:
        return torch.tanh(F.interpolate(v * 3 - 1, scale_factor=2, mode="nearest"))
    got = tiled_scale_multidim(x, fn, tile=(6, 8, 10), overlap=2, upscale_amount=2, out_channels=2)
    assert torch.equal(got, reference_tiled_scale(x, fn, (6, 8, 10), 2, 2, out_channels=2))


def test_a_pointwise_upscale_comes_out_seamless():
    """Tiles that agree in their overlaps blend to the untiled result (weights sum out)."""
    x = _rand(2, 3, 70, 41, seed=6)

    def nearest(v: torch.Tensor) -> torch.Tensor:
        return F.interpolate(v, scale_factor=4, mode="nearest")
    got = tiled_scale(x, nearest, tile_x=16, tile_y=24, overlap=5, upscale_amount=4)
    assert torch.allclose(got, nearest(x), rtol=0, atol=1e-6)


def test_downscale_with_an_index_formula():
    """Encoder-style use (ComfyUI's VAE encode): sizes and places divided by the factor, one
    axis given as a callable."""
    x = _rand(1, 3, 48, 40, seed=7)

    def pick(v: torch.Tensor) -> torch.Tensor:
        return v[:, :, ::4, ::4] * 2.0
    got = tiled_scale_multidim(x, pick, tile=(16, 16), overlap=4, upscale_amount=4, downscale=True,
                               index_formulas=(lambda value: value / 4, 4))
    assert got.shape == (1, 3, 12, 10)
    assert torch.allclose(got, pick(x), rtol=0, atol=1e-6)


def test_an_image_that_fits_one_tile_is_one_call():
    x = _rand(2, 3, 20, 30, seed=8)
    calls = []

    def fn(v: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(v.shape))
        return _conv_up(2)(v)
    steps = Steps()
    got = tiled_scale(x, fn, tile_x=30, tile_y=20, overlap=4, upscale_amount=2, pbar=steps)
    assert calls == [(1, 3, 20, 30), (1, 3, 20, 30)] and steps.n == 2
    assert torch.equal(got, torch.cat([_conv_up(2)(x[:1]), _conv_up(2)(x[1:])]))


def test_a_progress_bar_that_raises_stops_the_tiling():
    """An interrupt arrives through the progress report: no tile runs after it."""
    x = _rand(1, 3, 40, 40, seed=9)
    calls = []

    class Stop(Exception):
        pass

    class Interrupting:
        def update(self, value: int) -> None:
            raise Stop

    def fn(v: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return _conv_up(2)(v)
    with pytest.raises(Stop):
        tiled_scale(x, fn, tile_x=16, tile_y=16, overlap=4, upscale_amount=2, pbar=Interrupting())
    assert len(calls) == 1


def test_output_modes():
    """ComfyUI's names return inference tensors as ComfyUI's do; `scale_in_tiles` under no_grad
    returns an ordinary tensor that can be clamped in place."""
    x = _rand(1, 3, 20, 20, seed=10)
    assert tiled_scale(x, _conv_up(2), tile_x=8, tile_y=8, overlap=2, upscale_amount=2).is_inference()
    with torch.no_grad():
        out = scale_in_tiles(x, _conv_up(2), (8, 8), overlap=2, upscale_amount=2)
    assert not out.is_inference()
    out.clamp_(0, 1)


# --- memory ----------------------------------------------------------------------------------------

class PeakBytes(TorchDispatchMode):
    """Peak bytes of tensor storage created inside the mode and alive at the same time."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list] = {}
        self.current = self.peak = 0

    def _release(self, key: int, ident: int) -> None:
        holders = self.live.get(key)
        if holders is not None:
            holders[1].discard(ident)
            if not holders[1]:
                self.current -= holders[0]
                del self.live[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key == 0:
                    continue
                if key not in self.live:
                    self.live[key] = [storage.nbytes(), set()]
                    self.current += storage.nbytes()
                    self.peak = max(self.peak, self.current)
                if id(t) not in self.live[key][1]:
                    self.live[key][1].add(id(t))
                    weakref.finalize(t, self._release, key, id(t))
        return out


def test_memory_holds_the_output_plus_one_row_of_weights_and_a_few_tiles():
    """4x of 256x256 in 64-pixel tiles: ComfyUI's three output-sized buffers would be 36 MiB;
    here the output (12 MiB), one tile row of single-channel weights and tile temporaries."""
    x = _rand(1, 3, 256, 256, seed=11)

    def nearest(v: torch.Tensor) -> torch.Tensor:
        return F.interpolate(v, scale_factor=4, mode="nearest")
    output_bytes = 3 * 1024 * 1024 * 4
    tile_bytes = 3 * 256 * 256 * 4  # one 64x64 tile at 4x
    band_bytes = 256 * 1024 * 4  # one tile row of weights, one channel
    with PeakBytes() as meter:
        out = tiled_scale(x, nearest, tile_x=64, tile_y=64, overlap=8, upscale_amount=4)
    assert out.shape == (1, 3, 1024, 1024)
    assert meter.peak <= output_bytes + band_bytes + 4 * tile_bytes
    with PeakBytes() as meter:  # the meter sees a plain full-buffer implementation's 3 outputs
        reference_tiled_scale(x, nearest, (64, 64), 8, 4)
    assert meter.peak >= 3 * output_bytes

"""comfy_core.image.composite (paste, match_alpha, repeat_to_batch) and
comfy_core.image.porter_duff, against element-wise formulas written in the test."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from comfy_core.image.composite import match_alpha, overlap, paste, repeat_to_batch
from comfy_core.image.names import PORTER_DUFF_MODES as MODES
from comfy_core.image.porter_duff import RULES, porter_duff


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def _paste_by_loops(dst: np.ndarray, src: np.ndarray, left: int, top: int, weight: np.ndarray) -> np.ndarray:
    """Pixel by pixel: every source pixel that lands inside the destination blends into it."""
    out = dst.copy()
    for b in range(dst.shape[0]):
        for i in range(src.shape[2]):
            for j in range(src.shape[3]):
                r, c = top + i, left + j
                if 0 <= r < dst.shape[2] and 0 <= c < dst.shape[3]:
                    w = weight[b % weight.shape[0], :, i, j]
                    out[b, :, r, c] = w * src[b % src.shape[0], :, i, j] + (1 - w) * dst[b, :, r, c]
    return out


@pytest.mark.parametrize("x, y", [(0, 0), (3, 2), (7, 5), (-2, -1), (9, 0), (-5, 0)])
def test_paste_without_mask_copies_the_visible_part(x, y):
    dst, src = _rand(2, 3, 6, 8, seed=1), _rand(1, 3, 4, 5, seed=2)
    out = paste(dst, src, x, y, multiplier=1)
    expected = _paste_by_loops(dst.numpy(), src.numpy(), x, y, np.ones((1, 3, 4, 5), np.float32))
    assert torch.equal(out, torch.from_numpy(expected))
    assert not torch.equal(out, dst) or x >= 8 or x <= -5  # something was pasted unless out of reach


def test_paste_leaves_the_destination_untouched():
    dst = _rand(1, 4, 6, 6)
    before = dst.clone()
    paste(dst, torch.ones(1, 4, 2, 2), 8, 8)
    assert torch.equal(dst, before)


def test_paste_divides_offsets_by_the_multiplier_and_resizes_the_mask():
    dst, src = torch.zeros(1, 4, 8, 8), torch.ones(2, 4, 3, 3)
    mask = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # [h', w'] -> bilinear to 3 x 3
    out = paste(dst, src, 23, 9, mask, multiplier=8)  # latent pixels (2, 1)
    weight = F.interpolate(mask.reshape(1, 1, 2, 2), size=(3, 3), mode="bilinear")
    assert torch.equal(out[0, :, 1:4, 2:5], weight[0].expand(4, 3, 3))
    assert out.sum() == weight.sum() * 4  # nothing outside the 3 x 3 region


def test_paste_resize_source_fills_the_destination():
    dst, src = torch.zeros(1, 3, 6, 4), _rand(1, 3, 3, 2)
    out = paste(dst, src, 0, 0, multiplier=1, resize_source=True)
    assert torch.equal(out, F.interpolate(src, size=(6, 4), mode="bilinear"))


def test_repeat_to_batch_tiles_or_cuts():
    t = torch.arange(3.0).reshape(3, 1)
    assert repeat_to_batch(t, 7).flatten().tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert repeat_to_batch(t, 2).flatten().tolist() == [0, 1]
    assert repeat_to_batch(t, 3) is t


def test_overlap():
    assert overlap(2, 5, 6) == (2, 0, 4)
    assert overlap(-3, 5, 6) == (0, 3, 2)
    assert overlap(7, 5, 6)[2] <= 0


def test_match_alpha_follows_comfyui():
    rgb, rgba = _rand(1, 2, 2, 3), _rand(1, 2, 2, 4)
    d, s = match_alpha(rgb, rgba)
    assert d is rgb and torch.equal(s, rgba[..., :3])
    d, s = match_alpha(rgba, rgb)  # the destination, not the source, gains the opaque channel
    assert s is rgb and d.shape[-1] == 5 and torch.equal(d[..., :4], rgba) and torch.all(d[..., 4] == 1)


# --- Porter-Duff --------------------------------------------------------------------------------

def _pd_reference(mode: str, s: float, sa: float, d: float, da: float) -> tuple[float, float]:
    """Porter & Duff's table (premultiplied colours s, d; coverages sa, da), one pixel."""
    s, d = s * sa, d * da
    table = {
        "ADD": (min(s + d, 1), min(sa + da, 1)), "CLEAR": (0, 0), "DST": (d, da), "SRC": (s, sa),
        "SRC_OVER": (s + (1 - sa) * d, sa + (1 - sa) * da), "DST_OVER": (d + (1 - da) * s, da + (1 - da) * sa),
        "SRC_IN": (s * da, sa * da), "DST_IN": (d * sa, sa * da), "SRC_OUT": ((1 - da) * s, (1 - da) * sa),
        "DST_OUT": ((1 - sa) * d, (1 - sa) * da), "SRC_ATOP": (da * s + (1 - sa) * d, da),
        "DST_ATOP": (sa * d + (1 - da) * s, sa), "XOR": ((1 - da) * s + (1 - sa) * d, (1 - da) * sa + (1 - sa) * da),
        "MULTIPLY": (s * d, sa * da), "SCREEN": (s + d - s * d, sa + da - sa * da),
        "DARKEN": ((1 - da) * s + (1 - sa) * d + min(s, d), sa + da - sa * da),
        "LIGHTEN": ((1 - da) * s + (1 - sa) * d + max(s, d), sa + da - sa * da),
        "OVERLAY": (2 * s * d if 2 * d < da else sa * da - 2 * (da - s) * (sa - d), sa + da - sa * da),
    }
    colour, alpha = table[mode]
    colour = colour / alpha if alpha > 1e-5 else 0.0
    return min(max(colour, 0.0), 1.0), alpha


def test_porter_duff_modes_match_the_table():
    assert list(RULES) == MODES == sorted(MODES) and len(MODES) == 18
    s, s_mask, d, d_mask = _rand(3, 4, 5, 1, seed=3), _rand(3, 4, 5, 1, seed=4), _rand(3, 4, 5, 1, seed=5), \
        _rand(3, 4, 5, 1, seed=6)
    for mode in MODES:
        colour, mask = porter_duff(s, s_mask, d, d_mask, mode)
        for index in [(0, 0, 0, 0), (1, 2, 3, 0), (2, 3, 4, 0)]:
            want_colour, want_alpha = _pd_reference(mode, s[index].item(), 1 - s_mask[index].item(), d[index].item(),
                                                    1 - d_mask[index].item())
            assert colour[index].item() == pytest.approx(want_colour, abs=1e-6), mode
            assert mask[index].item() == pytest.approx(1 - want_alpha, abs=1e-6), mode


def test_porter_duff_empty_coverage_gives_black():
    colour, mask = porter_duff(torch.full((1, 1, 1, 3), 0.7), torch.ones(1, 1, 1, 1), torch.full((1, 1, 1, 3), 0.2),
                               torch.ones(1, 1, 1, 1), "SRC_OVER")
    assert torch.equal(colour, torch.zeros(1, 1, 1, 3)) and torch.equal(mask, torch.ones(1, 1, 1, 1))

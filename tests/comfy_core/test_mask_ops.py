"""comfy_core.mask.ops: feathering (with ComfyUI's far-side indexing), growing against SciPy's
grey morphology, combining and selecting by colour, each against a computation in the test."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage
import torch

from comfy_core.mask.names import COMBINE_OPERATIONS
from comfy_core.mask.ops import COMBINE, color_to_mask, combine, feather, grow


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def _feather_loops(mask: np.ndarray, left: int, top: int, right: int, bottom: int) -> np.ndarray:
    """ComfyUI's description, pixel by pixel: the t-th of n cells from a side is scaled by
    (t + 1) / n; on the right and bottom the t-th cell is index -t (so t = 0 is cell 0)."""
    out = mask.astype(np.float32).copy()
    h, w = out.shape[-2:]
    left, right, top, bottom = min(left, w), min(right, w), min(top, h), min(bottom, h)
    for t in range(left):
        out[..., :, t] *= np.float32((t + 1) / left)
    for t in range(right):
        out[..., :, -t] *= np.float32((t + 1) / right)
    for t in range(top):
        out[..., t, :] *= np.float32((t + 1) / top)
    for t in range(bottom):
        out[..., -t, :] *= np.float32((t + 1) / bottom)
    return out


@pytest.mark.parametrize("sides", [(0, 0, 0, 0), (3, 0, 0, 0), (0, 0, 3, 0), (2, 3, 4, 5), (20, 1, 30, 9)])
def test_feather_scales_each_side(sides):
    mask = _rand(2, 7, 10)
    assert np.array_equal(feather(mask, *sides).numpy(), _feather_loops(mask.numpy(), *sides))


def test_feather_right_side_is_one_cell_short_as_comfyui():
    out = feather(torch.ones(1, 1, 6), 0, 0, 3, 0)[0, 0].tolist()
    assert out == pytest.approx([1 / 3, 1, 1, 1, 1, 2 / 3])


@pytest.mark.parametrize("expand", [0, 1, 2, 4, -1, -3])
@pytest.mark.parametrize("tapered", [True, False])
def test_grow_equals_scipy_grey_morphology(expand, tapered):
    c = 0 if tapered else 1
    footprint = np.array([[c, 1, c], [1, 1, 1], [c, 1, c]], dtype=bool)
    mask = (_rand(2, 11, 13) > 0.85).float() * _rand(2, 11, 13, seed=1)
    if expand < 0:
        mask = 1 - mask
    want = []
    for m in mask.numpy():
        for _ in range(abs(expand)):
            m = (scipy.ndimage.grey_erosion if expand < 0 else scipy.ndimage.grey_dilation)(m, footprint=footprint)
        want.append(m)
    assert np.array_equal(grow(mask, expand, tapered).numpy(), np.stack(want))


def test_grow_tapered_makes_a_diamond():
    mask = torch.zeros(1, 7, 7)
    mask[0, 3, 3] = 1
    diamond = grow(mask, 2, True)[0]
    rows, cols = np.indices((7, 7))
    assert np.array_equal(diamond.numpy(), (np.abs(rows - 3) + np.abs(cols - 3) <= 2).astype(np.float32))
    assert grow(mask, 2, False)[0].sum() == 25


def test_combine_names_are_the_torch_free_list():
    assert list(COMBINE) == COMBINE_OPERATIONS


@pytest.mark.parametrize("operation", list(COMBINE))
@pytest.mark.parametrize("x, y", [(0, 0), (4, 2), (9, 6), (20, 0)])
def test_combine_operations_in_the_region(operation, x, y):
    dst, src = _rand(2, 6, 10) * 1.4 - 0.2, _rand(1, 3, 4, seed=1)
    d, s = dst.numpy().copy(), src.numpy()
    h, w = max(0, min(3, 6 - y)), max(0, min(4, 10 - x))
    region, part = d[:, y:y + h, x:x + w], s[:, :h, :w]
    on_region, on_part = np.round(region) != 0, np.round(part) != 0
    ops = {"multiply": region * part, "add": region + part, "subtract": region - part,
           "and": on_region & on_part, "or": on_region | on_part, "xor": on_region ^ on_part}
    d[:, y:y + h, x:x + w] = ops[operation]
    assert np.array_equal(combine(dst, src, x, y, operation).numpy(), np.clip(d, 0, 1))


def test_combine_rounds_half_to_even_for_logic():
    assert combine(torch.full((1, 1, 1), 0.5), torch.ones(1, 1, 1), 0, 0, "or").item() == 1.0
    assert combine(torch.full((1, 1, 1), 0.5), torch.ones(1, 1, 1), 0, 0, "and").item() == 0.0


def test_color_to_mask_matches_8bit_rgb():
    levels = torch.tensor([[[[0, 85, 170], [255, 0, 85]], [[0, 85, 170], [1, 2, 3]]]]) / 255.0  # [1, 2, 2, 3]
    mask = color_to_mask(levels, 0x0055AA)
    assert mask.dtype == torch.float32 and mask.tolist() == [[[1.0, 0.0], [1.0, 0.0]]]
    assert color_to_mask(torch.full((1, 1, 1, 4), 1.3), 0xFFFFFF).item() == 1.0  # clamped first

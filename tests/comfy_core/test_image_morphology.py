"""comfy_core.image.morphology against a brute-force window search written in the test, with
kornia 0.9's conventions: Minkowski dilation (reflected window for even sizes), pixels outside
the image ignored."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from comfy_core.image.names import MORPHOLOGY_OPERATIONS
from comfy_core.image.morphology import OPERATIONS, bottom_hat, closing, dilate, erode, gradient, opening, top_hat


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def _brute(planes: np.ndarray, size: int, reduce, before: int) -> np.ndarray:
    """Each output pixel reduces the input pixels (y - before .. y - before + size - 1) x
    (same for x) that exist."""
    out = np.empty_like(planes)
    height, width = planes.shape[-2:]
    for y in range(height):
        for x in range(width):
            rows = slice(max(y - before, 0), min(y - before + size, height))
            cols = slice(max(x - before, 0), min(x - before + size, width))
            out[..., y, x] = reduce(planes[..., rows, cols], axis=(-2, -1))
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 8, 30])
def test_dilate_and_erode_reduce_the_right_windows(size):
    planes = _rand(2, 3, 7, 9)
    want_dilate = _brute(planes.numpy(), size, np.max, size - 1 - size // 2)
    want_erode = _brute(planes.numpy(), size, np.min, size // 2)
    assert np.array_equal(dilate(planes, size).numpy(), want_dilate)
    assert np.array_equal(erode(planes, size).numpy(), want_erode)


@pytest.mark.parametrize("size", [3, 4])
def test_compound_operations(size):
    planes = _rand(1, 2, 8, 6, seed=1)
    d, e = dilate(planes, size), erode(planes, size)
    assert torch.equal(opening(planes, size), dilate(e, size))
    assert torch.equal(closing(planes, size), erode(d, size))
    assert torch.equal(gradient(planes, size), d - e)
    assert torch.equal(top_hat(planes, size), planes - dilate(e, size))
    assert torch.equal(bottom_hat(planes, size), erode(d, size) - planes)
    # Opening is anti-extensive and closing extensive, also for an even square (reflected window).
    assert torch.all(opening(planes, size) <= planes) and torch.all(closing(planes, size) >= planes)


def test_operation_names_are_comfyuis():
    assert list(OPERATIONS) == MORPHOLOGY_OPERATIONS == ["erode", "dilate", "open", "close", "gradient",
                                                         "bottom_hat", "top_hat"]


def test_a_single_bright_pixel_dilates_to_a_square():
    planes = torch.zeros(1, 1, 7, 7)
    planes[0, 0, 3, 3] = 1.0
    out = dilate(planes, 3)
    assert out.sum() == 9 and torch.all(out[0, 0, 2:5, 2:5] == 1)
    assert torch.equal(erode(out, 3), planes)  # erosion undoes it here

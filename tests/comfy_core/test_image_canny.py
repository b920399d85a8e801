"""Canny edge maths (comfy_core/image/canny.py), checked on hand-made cases; the whole detector is
compared with kornia's on recorded images in tests/nodes/test_controlnet_nodes.py."""
from __future__ import annotations

import pytest
import torch

from comfy_core.image.canny import canny, gaussian_kernel1d, hysteresis, sobel, to_grey


def test_a_vertical_step_gives_one_column_of_edges_on_its_left_side():
    image = torch.zeros(1, 1, 12, 16)
    image[..., 8:] = 1.0
    _magnitude, edges = canny(image, 0.1, 0.2)
    columns = edges[0, 0].sum(dim=0)
    assert columns.nonzero().flatten().tolist() == [7]  # of the tied pair 7/8 the left one stays
    assert columns[7] == 12


def test_a_flat_image_has_no_edges():
    _m, edges = canny(torch.full((2, 3, 8, 8), 0.3), 0.1, 0.2)
    assert edges.sum() == 0 and edges.shape == (2, 1, 8, 8)


def test_grey_uses_the_bt601_weights_and_sobel_is_unnormalised():
    rgb = torch.tensor([1.0, 0.0, 0.0]).view(1, 3, 1, 1)
    assert to_grey(rgb).item() == pytest.approx(0.299)
    ramp = torch.arange(5.0).repeat(5, 1).view(1, 1, 5, 5)  # slope 1 along x
    gx, gy = sobel(ramp)
    assert gx[0, 0, 2, 2] == 8 and gy[0, 0, 2, 2] == 0


def test_gaussian_kernel_is_normalised_and_symmetric():
    k = gaussian_kernel1d(5, 1.0, torch.float64, torch.device("cpu"))
    assert k.sum().item() == pytest.approx(1.0) and torch.equal(k, k.flip(0))
    assert (k[2] / k[1]).item() == pytest.approx(torch.tensor(0.5).exp().item())


def test_hysteresis_keeps_weak_pixels_connected_to_strong_ones():
    weak = torch.zeros(1, 1, 5, 5, dtype=torch.bool)
    strong = torch.zeros_like(weak)
    strong[0, 0, 0, 0] = True
    weak[0, 0, 1, 1] = weak[0, 0, 2, 2] = True  # a diagonal chain from the strong pixel
    weak[0, 0, 4, 0] = True  # isolated
    out = hysteresis(weak | strong, strong)[0, 0]
    assert out.nonzero().tolist() == [[0, 0], [1, 1], [2, 2]]


def test_thresholds_must_be_ordered():
    with pytest.raises(ValueError):
        canny(torch.zeros(1, 1, 4, 4), 0.5, 0.2)

"""MarigoldV2PostProcess (nodes/marigold_nodes.py) against the equations, written here per pixel in
numpy: depth = per-image min-max normalised channel mean with near (small) as white, normals =
unit vectors of 2x - 1 stored as (v + 1) / 2, albedo = the sRGB transfer function of linear RGB.
Its `/object_info` entry is checked against the record by tests/nodes/test_object_info_2026.py."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nodes.errors import NodeInputError
from nodes.marigold_nodes import marigold_v2_post_process


def _image(seed: int, shape=(2, 5, 7, 3)) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def test_depth_is_the_per_image_normalised_channel_mean_with_near_white():
    image = _image(0)
    image[1] *= 0.25  # a second image with another range: each image is normalised on its own
    out = marigold_v2_post_process(image, "depth")[0]
    assert out.shape == (2, 5, 7, 3)
    data = image.double().numpy()
    for b in range(2):
        d = [[sum(data[b, y, x]) / 3 for x in range(7)] for y in range(5)]
        near, far = min(min(row) for row in d), max(max(row) for row in d)
        for y in range(5):
            for x in range(7):
                want = (far - d[y][x]) / (far - near)
                assert out[b, y, x].tolist() == pytest.approx([want] * 3, abs=1e-6)
    assert out[0].max() == 1.0 and out[0].min() == 0.0


def test_flat_depth_gives_black_instead_of_dividing_by_zero():
    out = marigold_v2_post_process(torch.full((1, 3, 4, 3), 0.4), "depth")[0]
    assert torch.equal(out, torch.zeros(1, 3, 4, 3))


def test_normals_are_unit_vectors_stored_in_zero_one():
    image = _image(1)
    image[0, 0, 0] = 0.5  # the zero vector stays zero (F.normalize's clamped length): mid grey
    out = marigold_v2_post_process(image, "normals")[0]
    data = image.double().numpy()
    for b, y, x in np.ndindex(2, 5, 7):
        v = [2 * c - 1 for c in data[b, y, x]]
        length = max(math.sqrt(sum(c * c for c in v)), 1e-12)
        want = [(c / length + 1) / 2 for c in v]
        assert out[b, y, x].tolist() == pytest.approx(want, abs=1e-6)
        if (b, y, x) != (0, 0, 0):
            assert sum((2 * c - 1) ** 2 for c in out[b, y, x].tolist()) == pytest.approx(1.0, abs=1e-5)
    assert out[0, 0, 0].tolist() == [0.5, 0.5, 0.5]


def test_albedo_is_linear_to_srgb():
    values = torch.tensor([0.0, 0.001, 0.0031308, 0.01, 0.18, 0.5, 1.0])
    out = marigold_v2_post_process(values.view(1, 1, -1, 1).expand(1, 1, -1, 3).contiguous(), "albedo")[0]

    def srgb(c: float) -> float:
        return 12.92 * c if c <= 0.0031308 else 1.055 * c ** (1 / 2.4) - 0.055

    assert out[0, 0, :, 0].tolist() == pytest.approx([srgb(c) for c in values.tolist()], abs=1e-6)
    assert out[0, 0, -1, 0].item() == pytest.approx(1.0, abs=1e-6) and out[0, 0, 0, 0].item() == 0.0
    assert torch.equal(out[..., 0], out[..., 2])  # per channel, channels untouched otherwise


def test_the_input_is_not_changed_and_bad_input_is_named():
    image = _image(2)
    before = image.clone()
    for prediction in ("depth", "normals", "albedo"):
        marigold_v2_post_process(image, prediction)
    assert torch.equal(image, before)
    with pytest.raises(NodeInputError, match="prediction"):
        marigold_v2_post_process(image, "curvature")
    with pytest.raises(NodeInputError, match="image"):
        marigold_v2_post_process(torch.zeros(5, 7, 3), "depth")

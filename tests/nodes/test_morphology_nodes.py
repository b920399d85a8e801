"""Morphology, ImageRGBToYUV, ImageYUVToRGB (comfy_extras.nodes_morphology): ComfyUI's
/object_info entries, behaviour on [B, H, W, C] images and typed errors (the maths is checked in
tests/comfy_core/test_image_morphology.py and test_image_filters.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from nodes import morphology
from nodes.errors import NodeInputError


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def test_morphology_works_per_channel_on_images():
    image = torch.zeros(1, 7, 7, 4)
    image[0, 3, 3, 1] = 1.0  # one bright green pixel; alpha 0
    (dilated,) = morphology.morphology(image, "dilate", 3)
    assert dilated.shape == image.shape and dilated[..., 1].sum() == 9 and dilated[..., [0, 2, 3]].sum() == 0
    (eroded,) = morphology.morphology(dilated, "erode", 3)
    assert torch.equal(eroded, image)
    (edges,) = morphology.morphology(dilated, "gradient", 3)
    assert edges[0, 3, 3, 1] == 0 and edges[..., 1].sum() == 24  # a ring around the centre
    (top,) = morphology.morphology(image, "top_hat", 3)
    assert torch.equal(top, image)  # the pixel is smaller than the square: opening removes it


def test_morphology_errors():
    with pytest.raises(NodeInputError, match="'operation'"):
        morphology.morphology(_rand(1, 4, 4, 3), "thin", 3)
    with pytest.raises(NodeInputError, match="'kernel_size'"):
        morphology.morphology(_rand(1, 4, 4, 3), "erode", 0)
    with pytest.raises(NodeInputError, match="'image'"):
        morphology.morphology(torch.zeros(4, 4), "erode", 3)


def test_rgb_to_yuv_and_back():
    image = _rand(2, 3, 4, 3)
    y, u, v = morphology.image_rgb_to_yuv(image)
    r, g, b = (image[..., i].double().numpy() for i in range(3))
    luma = 0.299 * r + 0.587 * g + 0.114 * b
    assert y.shape == u.shape == v.shape == image.shape
    assert np.allclose(y[..., 2].numpy(), luma, atol=1e-6) and torch.equal(y[..., 0], y[..., 2])
    assert np.allclose(u[..., 0].numpy(), (b - luma) * 0.564 + 0.5, atol=1e-6)
    assert np.allclose(v[..., 1].numpy(), (r - luma) * 0.713 + 0.5, atol=1e-6)
    (back,) = morphology.image_yuv_to_rgb(y, u, v)
    assert torch.allclose(back, image, atol=1e-5)
    # A plane is read as the mean of its image's channels.
    (grey,) = morphology.image_yuv_to_rgb(torch.full((1, 2, 2, 3), 0.5), torch.full((1, 2, 2, 1), 0.5),
                                          torch.tensor([0.4, 0.6, 0.5]).expand(1, 2, 2, 3))
    assert torch.allclose(grey, torch.full((1, 2, 2, 3), 0.5), atol=1e-6)


def test_yuv_errors():
    with pytest.raises(NodeInputError, match="'image' expected an RGB IMAGE"):
        morphology.image_rgb_to_yuv(_rand(1, 2, 2, 4))
    with pytest.raises(NodeInputError, match="'V' expected an IMAGE of Y's batch and size"):
        morphology.image_yuv_to_rgb(_rand(1, 2, 2, 3), _rand(1, 2, 2, 3), _rand(1, 3, 2, 3))

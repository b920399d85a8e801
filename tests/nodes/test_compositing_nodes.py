"""PorterDuffImageComposite, SplitImageWithAlpha, JoinImageWithAlpha (comfy_extras.nodes_compositing):
ComfyUI's /object_info entries, behaviour against formulas written here, and typed errors."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nodes import compositing
from nodes.errors import NodeInputError


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def test_src_over_composites_with_mask_alphas():
    source, destination = _rand(2, 4, 5, 3), _rand(2, 4, 5, 3, seed=1)
    source_mask, destination_mask = _rand(2, 4, 5, seed=2), _rand(2, 4, 5, seed=3)
    image, mask = compositing.porter_duff_image_composite(source, source_mask, destination, destination_mask,
                                                          "SRC_OVER")
    sa, da = (1 - source_mask)[..., None], (1 - destination_mask)[..., None]
    alpha = sa + (1 - sa) * da
    colour = (source * sa + (1 - sa) * destination * da) / alpha
    assert torch.allclose(image, colour.clamp(0, 1), atol=1e-6) and torch.allclose(mask, 1 - alpha[..., 0], atol=1e-6)


def test_dst_keeps_the_destination_and_sizes_follow_it():
    source, destination = _rand(3, 6, 6, 3), _rand(2, 4, 8, 3, seed=1)
    opaque = torch.zeros(2, 4, 8)
    image, mask = compositing.porter_duff_image_composite(source, torch.zeros(3, 2, 2), destination, opaque, "DST")
    assert image.shape == (2, 4, 8, 3) and torch.allclose(image, destination, atol=1e-6)
    assert torch.equal(mask, opaque)


def test_porter_duff_resizes_the_source_bicubic_centre_crop():
    source, destination = _rand(1, 8, 8, 3), torch.zeros(1, 4, 8, 3)
    image, _ = compositing.porter_duff_image_composite(source, torch.zeros(1, 8, 8), destination,
                                                       torch.zeros(1, 4, 8), "SRC")
    # The centred 4 x 8 band of the square source, resized (here: kept) to 4 x 8.
    expected = F.interpolate(source[:, 2:6].movedim(-1, 1), size=(4, 8), mode="bicubic").movedim(1, -1)
    assert torch.allclose(image, expected.clamp(0, 1), atol=1e-6)


def test_porter_duff_errors():
    with pytest.raises(NodeInputError, match="'source' expected an IMAGE with 3 channels"):
        compositing.porter_duff_image_composite(_rand(1, 2, 2, 4), torch.zeros(1, 2, 2), _rand(1, 2, 2, 3),
                                                torch.zeros(1, 2, 2), "SRC")
    with pytest.raises(NodeInputError, match="'mode'"):
        compositing.porter_duff_image_composite(_rand(1, 2, 2, 3), torch.zeros(1, 2, 2), _rand(1, 2, 2, 3),
                                                torch.zeros(1, 2, 2), "OVER")
    with pytest.raises(NodeInputError, match="'destination_alpha'"):
        compositing.porter_duff_image_composite(_rand(1, 2, 2, 3), torch.zeros(1, 2, 2), _rand(1, 2, 2, 3),
                                                "mask", "SRC")


def test_split_image_with_alpha():
    rgba = _rand(2, 3, 4, 4)
    image, mask = compositing.split_image_with_alpha(rgba)
    assert torch.equal(image, rgba[..., :3]) and torch.equal(mask, 1.0 - rgba[..., 3])
    image, mask = compositing.split_image_with_alpha(rgba[..., :3])
    assert image.shape == (2, 3, 4, 3) and torch.equal(mask, torch.zeros(2, 3, 4))


def test_join_image_with_alpha_resizes_the_mask_and_takes_the_shorter_batch():
    image, alpha = _rand(3, 4, 6, 3), _rand(2, 2, 3, seed=1)
    (out,) = compositing.join_image_with_alpha(image, alpha)
    resized = F.interpolate(alpha[:, None], size=(4, 6), mode="bilinear")[:, 0]
    assert out.shape == (2, 4, 6, 4) and torch.equal(out[..., :3], image[:2]) and torch.equal(out[..., 3], 1 - resized)
    with pytest.raises(NodeInputError, match="'image' expected an RGB or RGBA IMAGE"):
        compositing.join_image_with_alpha(_rand(1, 2, 2, 1), torch.zeros(1, 2, 2))

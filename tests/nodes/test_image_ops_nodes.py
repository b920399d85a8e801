"""ImageScaleBy, ImageInvert, ImageBatch, EmptyImage, ImagePadForOutpaint: ComfyUI's sockets,
pixels and masks, and typed errors naming the node and the input."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from graph.native import spec_of
from nodes.errors import NodeInputError
from nodes.image import upscale_samples
from nodes.image_ops import (
    empty_image,
    image_batch,
    image_invert,
    image_pad_for_outpaint,
    image_scale_by,
    outpaint_mask,
)


def _spec(fn) -> tuple:
    spec = spec_of(fn)
    return (spec.node_id, spec.category, spec.display_name, [i.name for i in spec.inputs],
            [o.type for o in spec.outputs])


def _ramp(batch: int = 1, height: int = 4, width: int = 6, channels: int = 3) -> torch.Tensor:
    return torch.linspace(0, 1, batch * height * width * channels).reshape(batch, height, width, channels)


def test_specs_match_comfyui():
    assert _spec(image_scale_by) == ("ImageScaleBy", "image/upscaling", "Upscale Image By",
                                     ["image", "upscale_method", "scale_by"], ["IMAGE"])
    assert spec_of(image_scale_by).input("upscale_method").type == [
        "nearest-exact", "bilinear", "area", "bicubic", "lanczos"]
    assert spec_of(image_scale_by).input("scale_by").options == {"default": 1.0, "min": 0.01, "max": 8.0,
                                                                  "step": 0.01}
    assert _spec(image_invert) == ("ImageInvert", "image", "Invert Image", ["image"], ["IMAGE"])
    assert _spec(image_batch) == ("ImageBatch", "image", "Batch Images", ["image1", "image2"], ["IMAGE"])
    # ComfyUI (0.3.64) has no display name for EmptyImage: the editor shows the node name.
    assert _spec(empty_image) == ("EmptyImage", "image", "EmptyImage", ["width", "height", "batch_size", "color"],
                                  ["IMAGE"])
    assert spec_of(empty_image).input("color").options == {"default": 0, "min": 0, "max": 0xFFFFFF, "step": 1,
                                                           "display": "color"}
    assert spec_of(empty_image).input("batch_size").options == {"default": 1, "min": 1, "max": 4096}
    assert _spec(image_pad_for_outpaint) == ("ImagePadForOutpaint", "image", "Pad Image for Outpainting",
                                             ["image", "left", "top", "right", "bottom", "feathering"],
                                             ["IMAGE", "MASK"])
    assert spec_of(image_pad_for_outpaint).input("left").options == {"default": 0, "min": 0, "max": 16384, "step": 8}
    assert spec_of(image_pad_for_outpaint).input("feathering").options == {"default": 40, "min": 0, "max": 16384,
                                                                           "step": 1}


def test_image_scale_by_sizes_and_methods():
    image = _ramp(2, 10, 20)
    (out,) = image_scale_by(image, "bilinear", 0.5)
    assert out.shape == (2, 5, 10, 3)
    expected = F.interpolate(image.movedim(-1, 1), size=(5, 10), mode="bilinear").movedim(1, -1)
    assert torch.equal(out, expected)
    (out,) = image_scale_by(_ramp(1, 5, 3), "nearest-exact", 1.5)  # round(7.5) = 8, round(4.5) = 4
    assert out.shape == (1, 8, 4, 3)
    (out,) = image_scale_by(image, "lanczos", 2.0)
    assert torch.equal(out, upscale_samples(image.movedim(-1, 1), 40, 20, "lanczos", "disabled").movedim(1, -1))
    (out,) = image_scale_by(image, "nearest-exact", 2.0)
    assert torch.equal(out[:, ::2, ::2], image)


def test_image_scale_by_rejects_bad_input():
    with pytest.raises(NodeInputError, match="input 'upscale_method'"):
        image_scale_by(_ramp(), "bislerp", 2.0)
    with pytest.raises(NodeInputError, match="input 'scale_by'"):
        image_scale_by(_ramp(1, 4, 6), "bilinear", 0.1)
    with pytest.raises(NodeInputError, match="input 'image'"):
        image_scale_by(torch.zeros(4, 6, 3), "bilinear", 2.0)


def test_image_invert_every_channel():
    image = _ramp(1, 2, 3, 4)
    (out,) = image_invert(image)
    assert torch.allclose(out, 1.0 - image) and torch.allclose(out[..., 3], 1.0 - image[..., 3])
    with pytest.raises(NodeInputError, match="input 'image'"):
        image_invert({"image": 1})


def test_image_batch_concatenates_and_resizes_the_second():
    first, second = _ramp(2, 4, 4), _ramp(1, 4, 4) * 0.5
    (out,) = image_batch(first, second)
    assert torch.equal(out, torch.cat([first, second]))
    # A wider image2 is centre-cropped to image1's aspect ratio, then resized (bilinear).
    wide = torch.zeros(1, 4, 8, 3)
    wide[:, :, 2:6] = 1.0
    (out,) = image_batch(first, wide)
    assert out.shape == (3, 4, 4, 3) and torch.equal(out[2:], torch.ones(1, 4, 4, 3))
    (out,) = image_batch(first, _ramp(1, 8, 8))  # larger, same aspect: plain bilinear
    expected = F.interpolate(_ramp(1, 8, 8).movedim(-1, 1), size=(4, 4), mode="bilinear").movedim(1, -1)
    assert torch.equal(out[2:], expected)


def test_image_batch_rejects_bad_input():
    with pytest.raises(NodeInputError, match="input 'image2'.*4 channels"):
        image_batch(_ramp(1, 4, 4, 3), _ramp(1, 4, 4, 4))
    with pytest.raises(NodeInputError, match="input 'image1'"):
        image_batch(None, _ramp())


def test_empty_image_fills_the_colour():
    (image,) = empty_image(4, 3, 2, 0xFF8000)
    assert image.shape == (2, 3, 4, 3) and image.dtype == torch.float32
    assert torch.equal(image[0, 0, 0], torch.tensor([1.0, 128 / 255, 0.0]))
    assert torch.equal(image, image[:1, :1, :1].expand(2, 3, 4, 3))
    (black,) = empty_image(2, 2)
    assert not black.any()
    with pytest.raises(NodeInputError, match="input 'width'"):
        empty_image(0, 4)
    with pytest.raises(NodeInputError, match="input 'color'"):
        empty_image(4, 4, 1, 0x1000000)


def test_pad_for_outpaint_places_the_image_on_grey():
    image = _ramp(2, 4, 6)
    padded, mask = image_pad_for_outpaint(image, 8, 16, 0, 8, 0)
    assert padded.shape == (2, 4 + 16 + 8, 6 + 8, 3) and mask.shape == (1, 28, 14)
    assert torch.equal(padded[:, 16:20, 8:14], image)
    border = torch.ones(28, 14, dtype=torch.bool)
    border[16:20, 8:14] = False
    assert padded[:, border].eq(0.5).all()
    assert mask[0, border].eq(1).all() and not mask[0, ~border].any()


def test_pad_for_outpaint_feathers_towards_padded_sides():
    image = torch.zeros(1, 16, 16, 3)
    # Padded on the left only: columns 0..3 ramp down ((4 - d) / 4)^2 with d the column.
    _, mask = image_pad_for_outpaint(image, 8, 0, 0, 0, 4)
    inner = mask[0, :, 8:]
    assert inner[0, :5].tolist() == [1.0, 0.5625, 0.25, 0.0625, 0.0]
    assert torch.equal(inner, inner[:1].expand(16, 16))  # the rows are unaffected
    # On the right the distance is counted as width - column: the edge pixel has d = 1.
    _, mask = image_pad_for_outpaint(image, 0, 0, 8, 0, 4)
    assert mask[0, 0, 12:16].tolist() == [0.0, 0.0625, 0.25, 0.5625] and mask[0, 0, 16:].eq(1).all()
    # Top and left padded: the nearer side wins.
    top_left = outpaint_mask(16, 16, 8, 8, 0, 0, 4)[8:, 8:]
    assert top_left[0, 3].item() == 1.0 and top_left[2, 1].item() == 0.5625 and top_left[3, 3].item() == 0.0625


def test_pad_for_outpaint_skips_feathering_wider_than_half_the_image():
    _, mask = image_pad_for_outpaint(torch.zeros(1, 8, 16, 3), 8, 0, 0, 0, 4)  # 2 * 4 is not under 8
    assert not mask[0, :, 8:].any()
    with pytest.raises(NodeInputError, match="input 'left'"):
        image_pad_for_outpaint(torch.zeros(1, 8, 8, 3), -8, 0, 0, 0, 0)
    with pytest.raises(NodeInputError, match="input 'image'"):
        image_pad_for_outpaint(torch.zeros(8, 8, 3), 8, 0, 0, 0, 0)

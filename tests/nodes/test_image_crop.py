"""ImageCropV2 and ImageCropToMask (ComfyUI's nodes_images.py, 2026): the bounding-box widget's
region, clamped as ImageCrop clamps it, with a preview; a subject framed from its mask."""
from __future__ import annotations

import pytest
import torch

from nodes.errors import NodeInputError
from nodes.image_crop import crop_to_region, frame_subject, image_crop_to_mask
from tests.nodes.workflow_2026 import Runner, node


def test_crop_to_region_clamps_the_corner_inside_the_image():
    image = torch.arange(1 * 6 * 8 * 3, dtype=torch.float32).reshape(1, 6, 8, 3)
    assert torch.equal(crop_to_region(image, {"x": 2, "y": 1, "width": 3, "height": 2}), image[:, 1:3, 2:5])
    assert crop_to_region(image, {"x": 50, "y": 50, "width": 4, "height": 4}).shape == (1, 1, 1, 3)
    assert crop_to_region(image, {}).shape == (1, 6, 8, 3)  # the default 512 x 512 box at 0, 0
    with pytest.raises(NodeInputError, match="crop_region"):
        crop_to_region(image, "0,0,1,1")


async def test_crop_v2_in_a_prompt_previews_the_crop(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"img": node("EmptyImage", width=16, height=12, batch_size=1, color=0xFF0000),
              "crop": node("ImageCropV2", image=["img", 0], crop_region={"x": 4, "y": 2, "width": 8, "height": 6}),
              "size": node("GetImageSize", image=["crop", 0]), "out": node("PreviewAny", source=["size", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["8"]}
    preview = out.ui_outputs["crop"]["images"]
    assert len(preview) == 1 and preview[0]["type"] == "temp"
    assert (tmp_path / "temp" / preview[0]["subfolder"] / preview[0]["filename"]).is_file()


def square_subject(h: int = 40, w: int = 60) -> tuple[torch.Tensor, torch.Tensor]:
    image = torch.full((1, h, w, 3), 0.5)
    mask = torch.zeros(1, h, w)
    mask[0, 10:20, 30:40] = 1.0  # a 10 x 10 subject centred at (35, 15)
    image[0, 10:20, 30:40] = torch.tensor([1.0, 0.0, 0.0])
    return image, mask


def test_frame_subject_cuts_the_mask_box_at_the_output_aspect():
    image, mask = square_subject()
    framed = frame_subject(image[0], mask[0], max_size=1024, pad_factor=1.0, grow=0, background=(0.0, 0.0, 1.0),
                           aspect=1.0)
    assert framed.shape == (1, 3, 10, 10)
    assert torch.allclose(framed[0, :, 5, 5], torch.tensor([1.0, 0.0, 0.0]))
    wide = frame_subject(image[0], mask[0], max_size=1024, pad_factor=1.0, grow=0, background=(0, 0, 1), aspect=2.0)
    assert wide.shape == (1, 3, 10, 20)  # grown to 2:1; outside the mask the background shows
    assert torch.allclose(wide[0, :, 5, 0], torch.tensor([0.0, 0.0, 1.0]))


def test_padding_outside_the_image_and_an_inverted_mask():
    image = torch.rand(1, 20, 20, 3)
    mask = torch.ones(1, 20, 20)
    mask[0, 0:6, 0:6] = 0.0  # set border, clear corner: not "inverted" (the centre is set)
    framed = frame_subject(image[0], mask[0], max_size=1024, pad_factor=2.0, grow=0, background=(0, 0, 0), aspect=1.0)
    assert framed.shape == (1, 3, 40, 40)  # 20 x 20 box doubled: cut with zero padding
    inverted = torch.ones(1, 20, 20)
    inverted[0, 4:16, 4:16] = 0.0  # border set, centre clear: taken as the inverse
    framed = frame_subject(image[0], inverted[0], max_size=1024, pad_factor=1.0, grow=0, background=(0, 0, 0),
                           aspect=1.0)
    assert framed.shape == (1, 3, 12, 12)


def test_crop_to_mask_node_outputs_the_requested_size_and_background():
    image, mask = square_subject()
    (out,) = image_crop_to_mask(image.repeat(2, 1, 1, 1), mask, 64, 32, 1.0, 0, "#00ff00")
    assert out.shape == (2, 32, 64, 3) and out.dtype == torch.float32
    assert torch.allclose(out[0, 16, 2], torch.tensor([0.0, 1.0, 0.0]), atol=0.02)  # left edge: background
    assert torch.allclose(out[0, 16, 32], torch.tensor([1.0, 0.0, 0.0]), atol=0.02)  # centre: the subject
    with pytest.raises(NodeInputError, match="masks"):
        image_crop_to_mask(image.repeat(3, 1, 1, 1), mask.repeat(2, 1, 1), 64, 64, 1.0, 0, "#000000")


def test_grow_mask_widens_the_frame():
    image, mask = square_subject()
    grown = frame_subject(image[0], mask[0], max_size=1024, pad_factor=1.0, grow=2, background=(0, 0, 0), aspect=1.0)
    assert grown.shape == (1, 3, 14, 14)

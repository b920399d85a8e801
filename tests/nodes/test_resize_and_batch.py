"""ResizeImageMaskNode and BatchImagesNode (ComfyUI's nodes_post_processing.py, 2026): sizes as
ComfyUI computes them for each `resize_type`, images and masks alike, and the dynamic inputs as
the editor sends them (`resize_type.width`, `images.image0`, ...)."""
from __future__ import annotations

import pytest
import torch

from graph.v3_schema import DynamicInputError
from nodes.resize_and_batch import batch_images_node, resize_image_mask, target_size
from tests.nodes.workflow_2026 import Runner, node


def image(h: int, w: int, c: int = 3, b: int = 1) -> torch.Tensor:
    return torch.rand(b, h, w, c)


@pytest.mark.parametrize("resize_type, size", [
    ({"resize_type": "scale by multiplier", "multiplier": 1.5}, (30, 15)),
    ({"resize_type": "scale dimensions", "width": 8, "height": 0, "crop": "center"}, (8, 4)),
    ({"resize_type": "scale dimensions", "width": 0, "height": 5, "crop": "disabled"}, (10, 5)),
    ({"resize_type": "scale width", "width": 40}, (40, 20)),
    ({"resize_type": "scale height", "height": 4}, (8, 4)),
    ({"resize_type": "scale longer dimension", "longer_size": 50}, (50, 25)),
    ({"resize_type": "scale shorter dimension", "shorter_size": 50}, (100, 50)),
    ({"resize_type": "scale total pixels", "megapixels": 0.001, "multiple": 8}, (48, 24)),
])
def test_target_sizes_of_a_20x10_input(resize_type, size):
    assert target_size(20, 10, resize_type) == size


def test_zero_and_zero_keeps_the_input():
    x = image(10, 20)
    assert resize_image_mask(x, {"resize_type": "scale dimensions", "width": 0, "height": 0, "crop": "center"},
                             "area")[0] is x


def test_an_image_stays_an_image_and_a_mask_a_mask():
    (img,) = resize_image_mask(image(10, 20, b=2), {"resize_type": "scale by multiplier", "multiplier": 0.5}, "area")
    (mask,) = resize_image_mask(torch.rand(3, 10, 20), {"resize_type": "scale width", "width": 40}, "bilinear")
    assert img.shape == (2, 5, 10, 3) and mask.shape == (3, 20, 40)


def test_match_size_takes_the_reference_size():
    (out,) = resize_image_mask(image(10, 20), {"resize_type": "match size", "match": torch.rand(1, 7, 9),
                                               "crop": "center"}, "nearest-exact")
    assert out.shape == (1, 7, 9, 3)


def test_scale_to_multiple_covers_then_crops_centred():
    (out,) = resize_image_mask(image(33, 70), {"resize_type": "scale to multiple", "multiple": 16}, "area")
    assert out.shape == (1, 32, 64, 3)
    x = image(32, 64)
    assert resize_image_mask(x, {"resize_type": "scale to multiple", "multiple": 16}, "area")[0] is x


def test_batch_pads_rgb_to_rgba_and_resizes_to_the_first():
    a, b = image(8, 8, 4), image(16, 16, 3)
    (out,) = batch_images_node({"image0": a, "image1": b})
    assert out.shape == (2, 8, 8, 4) and torch.equal(out[0], a[0]) and torch.all(out[1, ..., 3] == 1.0)


async def test_dynamic_inputs_as_the_editor_sends_them(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"img": node("EmptyImage", width=20, height=10, batch_size=1, color=0),
              "r": node("ResizeImageMaskNode", input=["img", 0], scale_method="area",
                        **{"resize_type": "scale dimensions", "resize_type.width": 8, "resize_type.height": 6,
                           "resize_type.crop": "center"}),
              "b": node("BatchImagesNode", **{"images.image0": ["r", 0], "images.image1": ["img", 0]}),
              "size": node("GetImageSize", image=["b", 0]),
              "w": node("PreviewAny", source=["size", 0]), "n": node("PreviewAny", source=["size", 2])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["w"] == {"text": ["8"]} and out.ui_outputs["n"] == {"text": ["2"]}


async def test_a_widget_of_the_chosen_option_that_is_missing_is_an_error(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"img": node("EmptyImage", width=20, height=10, batch_size=1, color=0),
              "r": node("ResizeImageMaskNode", input=["img", 0], scale_method="area",
                        **{"resize_type": "scale by multiplier"}),
              "o": node("PreviewAny", source=["r", 0])}
    out = await runner.run(prompt)
    assert out.status == "error" and "resize_type.multiplier" in out.error["exception_message"]


async def test_validation_refuses_an_unknown_resize_type_and_a_missing_first_image(tmp_path):
    runner = Runner(tmp_path)
    bad = {"img": node("EmptyImage", width=20, height=10, batch_size=1, color=0),
           "r": node("ResizeImageMaskNode", input=["img", 0], scale_method="area", resize_type="scale by magic"),
           "o": node("PreviewAny", source=["r", 0])}
    assert not (await runner.validate(bad)).ok
    empty = {"b": node("BatchImagesNode"), "o": node("PreviewAny", source=["b", 0])}
    assert not (await runner.validate(empty)).ok


def test_nesting_names_the_missing_widget():
    from nodes.resize_and_batch import RESIZE_TYPE
    with pytest.raises(DynamicInputError, match="resize_type.width"):
        RESIZE_TYPE.nest({"resize_type": "scale width"})
    assert RESIZE_TYPE.nest({"resize_type": "scale width", "resize_type.width": 3, "resize_type.height": 9}) == \
        {"resize_type": "scale width", "width": 3}

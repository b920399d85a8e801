"""ImageCrop, ImageRotate, ImageFlip, ImageStitch, ResizeAndPadImage, ImageScaleToMaxDimension:
ComfyUI's semantics, checked against numpy / Pillow / hand-built expectations, and typed errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from nodes.errors import NodeInputError
from nodes.image_transform import (
    image_crop,
    image_flip,
    image_rotate,
    image_scale_to_max_dimension,
    image_stitch,
    resize_and_pad_image,
)


def _ramp(batch: int, height: int, width: int, channels: int = 3) -> torch.Tensor:
    return torch.linspace(0, 1, batch * height * width * channels).reshape(batch, height, width, channels)


def _solid(batch: int, height: int, width: int, color: tuple[float, ...]) -> torch.Tensor:
    return torch.tensor(color, dtype=torch.float32).expand(batch, height, width, len(color)).clone()


def _pil_lanczos(image: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Pillow's Lanczos on uint8 pixels (clip(255 x), truncated), the way ComfyUI resizes."""
    frames = []
    for frame in image:
        pixels = np.clip(255.0 * frame.numpy(), 0, 255).astype(np.uint8)
        resized = Image.fromarray(pixels).resize((width, height), resample=Image.Resampling.LANCZOS)
        frames.append(torch.from_numpy(np.array(resized).astype(np.float32) / 255.0))
    return torch.stack(frames)


# --- ImageCrop -----------------------------------------------------------------------------------

def test_crop_takes_the_region_and_cuts_at_the_edges():
    image = _ramp(2, 10, 12)
    assert torch.equal(image_crop(image, 5, 4, 3, 2)[0], image[:, 2:6, 3:8, :])
    assert torch.equal(image_crop(image, 50, 50, 8, 0)[0], image[:, :, 8:, :])


def test_crop_origin_past_the_edge_keeps_the_last_row_and_column():
    image = _ramp(1, 10, 12)
    out = image_crop(image, 5, 4, 30, 20)[0]
    assert out.shape == (1, 1, 1, 3) and torch.equal(out, image[:, 9:, 11:, :])


@pytest.mark.parametrize("kwargs, name", [({"image": "x"}, "image"), ({"width": 0}, "width"), ({"x": -1}, "x")])
def test_crop_refuses_bad_inputs(kwargs, name):
    args = {"image": _ramp(1, 4, 4), "width": 2, "height": 2, "x": 0, "y": 0, **kwargs}
    with pytest.raises(NodeInputError) as info:
        image_crop(**args)
    assert info.value.input_name == name


# --- ImageRotate / ImageFlip ---------------------------------------------------------------------

@pytest.mark.parametrize("rotation, turns", [("none", 0), ("90 degrees", 1), ("180 degrees", 2), ("270 degrees", 3)])
def test_rotate_turns_clockwise(rotation, turns):
    image = _ramp(2, 3, 5)
    # numpy's rot90 turns counter-clockwise for positive k on (H, W).
    expected = np.rot90(image.numpy(), k=-turns, axes=(1, 2))
    assert np.array_equal(image_rotate(image, rotation)[0].numpy(), expected)


def test_rotate_90_puts_the_bottom_left_pixel_top_left():
    image = _ramp(1, 3, 5)
    out = image_rotate(image, "90 degrees")[0]
    assert out.shape == (1, 5, 3, 3) and torch.equal(out[0, 0, 0], image[0, 2, 0])


def test_flip_mirrors_rows_or_columns():
    image = _ramp(1, 3, 4)
    assert torch.equal(image_flip(image, "x-axis: vertically")[0], image[:, [2, 1, 0]])
    assert torch.equal(image_flip(image, "y-axis: horizontally")[0], image[:, :, [3, 2, 1, 0]])
    with pytest.raises(NodeInputError):
        image_flip(image, "z-axis")


# --- ImageStitch ---------------------------------------------------------------------------------

def test_stitch_without_image2_returns_image1():
    image = _ramp(1, 4, 4)
    assert image_stitch(image, "right", True, 0, "white")[0] is image


@pytest.mark.parametrize("direction, order, axis", [("right", (0, 1), 2), ("left", (1, 0), 2),
                                                     ("down", (0, 1), 1), ("up", (1, 0), 1)])
def test_stitch_same_size_concatenates_in_the_direction(direction, order, axis):
    a, b = _solid(1, 4, 4, (1.0, 0.0, 0.0)), _solid(1, 4, 4, (0.0, 0.0, 1.0))
    expected = torch.cat([(a, b)[order[0]], (a, b)[order[1]]], dim=axis)
    assert torch.equal(image_stitch(a, direction, True, 0, "white", b)[0], expected)


def test_stitch_spacing_is_even_and_coloured():
    a, b = _solid(1, 4, 3, (0.2, 0.2, 0.2)), _solid(1, 4, 5, (0.4, 0.4, 0.4))
    out = image_stitch(a, "right", False, 3, "red", b)[0]
    assert out.shape == (1, 4, 3 + 4 + 5, 3)  # 3 px of spacing round up to 4
    assert torch.equal(out[0, :, 3:7], _solid(1, 4, 4, (1.0, 0.0, 0.0))[0])
    assert torch.equal(out[0, :, 7:], b[0])


def test_stitch_without_matching_pads_the_smaller_image_centred_in_the_grey_level():
    a, b = _solid(1, 6, 2, (0.5, 0.5, 0.5)), _solid(1, 3, 2, (0.1, 0.1, 0.1))
    out = image_stitch(a, "right", False, 0, "white", b)[0]
    assert out.shape == (1, 6, 4, 3)
    right = out[0, :, 2:, 0]
    # 3 rows missing: 1 above, 2 below, filled with white (1.0).
    assert torch.equal(right[:, 0], torch.tensor([1.0, 0.1, 0.1, 0.1, 1.0, 1.0]))
    # A colour (red) pads with black: only white / black are grey levels.
    assert torch.equal(image_stitch(a, "right", False, 0, "red", b)[0][0, 0, 2:], torch.zeros(2, 3))


def test_stitch_matching_resizes_image2_with_lanczos_to_image1s_height():
    a, b = _ramp(1, 10, 12), _ramp(1, 7, 5)
    out = image_stitch(a, "right", True, 0, "white", b)[0]
    width = int(10 * 5 / 7)  # aspect ratio kept, truncated
    assert out.shape == (1, 10, 12 + width, 3)
    assert torch.equal(out[:, :, 12:], _pil_lanczos(b, width, 10))
    down = image_stitch(a, "down", True, 0, "white", b)[0]
    assert down.shape == (1, 10 + int(12 / (5 / 7)), 12, 3)


def test_stitch_evens_batches_with_the_last_image_and_channels_with_ones():
    a = _solid(1, 2, 2, (0.3, 0.3, 0.3, 0.5))
    b = torch.stack([_solid(1, 2, 2, (v, v, v))[0] for v in (0.1, 0.2, 0.3)])
    out = image_stitch(a, "right", False, 2, "blue", b)[0]
    assert out.shape == (3, 2, 6, 4)
    assert all(torch.equal(out[i, :, :2], a[0]) for i in range(3))
    assert torch.equal(out[:, :, 4:, 3], torch.ones(3, 2, 2))  # RGB next to RGBA: opaque
    assert torch.equal(out[0, 0, 2], torch.tensor([0.0, 0.0, 1.0, 1.0]))  # blue spacer, opaque


def test_stitch_refuses_a_bad_direction():
    with pytest.raises(NodeInputError) as info:
        image_stitch(_ramp(1, 2, 2), "diagonal", True, 0, "white", _ramp(1, 2, 2))
    assert info.value.input_name == "direction"


# --- ResizeAndPadImage ---------------------------------------------------------------------------

def test_resize_and_pad_scales_to_fit_and_centres():
    image = _ramp(1, 2, 4)  # W 4, H 2 into 8 x 8: scale 2 -> 8 x 4, 2 rows above and below
    out = resize_and_pad_image(image, 8, 8, "black", "nearest-exact")[0]
    assert out.shape == (1, 8, 8, 3)
    doubled = image.repeat_interleave(2, dim=1).repeat_interleave(2, dim=2)
    assert torch.equal(out[:, 2:6], doubled)
    assert torch.equal(out[:, :2], torch.zeros(1, 2, 8, 3)) and torch.equal(out[:, 6:], torch.zeros(1, 2, 8, 3))
    white = resize_and_pad_image(image, 8, 9, "white", "nearest-exact")[0]
    assert torch.equal(white[:, :2], torch.ones(1, 2, 8, 3)) and torch.equal(white[:, 2:6], doubled)
    assert torch.equal(white[:, 6:], torch.ones(1, 3, 8, 3))  # the odd row goes below


def test_resize_and_pad_truncates_sizes():
    out = resize_and_pad_image(_ramp(1, 7, 5), 8, 30, "white", "lanczos")[0]
    # scale min(8/5, 30/7) = 1.6: 5 x 7 -> 8 x int(11.2) = 11, centred at row (30 - 11) // 2 = 9.
    assert torch.equal(out[:, 9:20], _pil_lanczos(_ramp(1, 7, 5), 8, 11))
    assert torch.equal(out[:, :9], torch.ones(1, 9, 8, 3))


def test_resize_and_pad_refuses_a_fit_with_no_pixels():
    with pytest.raises(NodeInputError) as info:
        resize_and_pad_image(_ramp(1, 1, 100), 10, 10, "white", "area")
    assert info.value.input_name == "image"


# --- ImageScaleToMaxDimension --------------------------------------------------------------------

@pytest.mark.parametrize("height, width, size", [(10, 12, (17, 14)), (12, 10, (14, 17)), (9, 9, (17, 17))])
def test_max_dimension_sizes(height, width, size):
    out = image_scale_to_max_dimension(_ramp(1, height, width), "bilinear", 17)[0]
    assert (out.shape[2], out.shape[1]) == size


def test_max_dimension_lanczos_is_pillows():
    image = _ramp(2, 10, 12)
    assert torch.equal(image_scale_to_max_dimension(image, "lanczos", 17)[0], _pil_lanczos(image, 17, 14))


def test_max_dimension_zero_is_refused():
    with pytest.raises(NodeInputError) as info:
        image_scale_to_max_dimension(_ramp(1, 4, 4), "area", 0)
    assert info.value.input_name == "largest_size"

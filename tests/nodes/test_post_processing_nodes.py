"""ImageBlend, ImageBlur, ImageSharpen, ImageQuantize, ImageScaleToTotalPixels
(comfy_extras.nodes_post_processing): ComfyUI's /object_info entries, behaviour against
references written here (Pillow for palettes, torch's interpolation for resizing) and typed errors."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from nodes import post_processing as post
from nodes.errors import NodeInputError


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


# --- ImageBlend ---------------------------------------------------------------------------------

def test_blend_multiply_mixes_by_the_factor():
    a, b = _rand(2, 3, 4, 3), _rand(2, 3, 4, 3, seed=1)
    (out,) = post.image_blend(a, b, 0.25, "multiply")
    assert torch.allclose(out, (a * 0.75 + a * b * 0.25).clamp(0, 1), atol=1e-7)
    (out,) = post.image_blend(a, b, 1.0, "difference")
    assert torch.allclose(out, (a - b).clamp(0, 1))  # signed, as ComfyUI


def test_blend_resizes_image2_and_reconciles_channels():
    a, b = _rand(1, 4, 6, 3), _rand(1, 8, 8, 4, seed=1)
    (out,) = post.image_blend(a, b, 1.0, "normal")
    expected = F.interpolate(b[:, 1:7, :, :3].movedim(-1, 1), size=(4, 6), mode="bicubic").movedim(1, -1)
    assert out.shape == (1, 4, 6, 3) and torch.allclose(out, expected.clamp(0, 1), atol=1e-6)
    with pytest.raises(NodeInputError, match="'image2' expected an IMAGE with at least 4 channels, as image1"):
        post.image_blend(_rand(1, 2, 2, 4), _rand(1, 2, 2, 3), 0.5, "normal")
    with pytest.raises(NodeInputError, match="'image2' expected an IMAGE batch of 1 or 2"):
        post.image_blend(_rand(2, 2, 2, 3), _rand(3, 2, 2, 3), 0.5, "normal")
    with pytest.raises(NodeInputError, match="'blend_mode'"):
        post.image_blend(_rand(1, 2, 2, 3), _rand(1, 2, 2, 3), 0.5, "hue")


# --- ImageBlur / ImageSharpen -------------------------------------------------------------------

def test_blur_smooths_and_keeps_the_size():
    image = torch.zeros(1, 9, 9, 3)
    image[0, 4, 4] = 1.0
    (out,) = post.image_blur(image, 2, 1.0)
    assert out.shape == image.shape and torch.isclose(out.sum(), torch.tensor(3.0), atol=1e-5)
    assert out[0, 4, 4, 0] == out.max() and out[0, 4, 2, 0] > 0 and out[0, 4, 1, 0] == 0
    assert torch.allclose(out[0, 4, 3], out[0, 3, 4])  # isotropic


def test_sharpen_leaves_flat_areas_and_boosts_edges():
    flat = torch.full((1, 6, 6, 3), 0.4)
    assert torch.allclose(post.image_sharpen(flat, 1, 1.0, 1.0)[0], flat, atol=1e-6)
    step = torch.zeros(1, 6, 6, 3)
    step[:, :, 3:] = 0.5
    (out,) = post.image_sharpen(step, 1, 1.0, 0.5)
    assert out[0, 0, 3, 0] > 0.5 and out[0, 0, 2, 0] == 0.0  # overshoot, clamped below at 0


def test_filter_radius_must_fit_the_image():
    with pytest.raises(NodeInputError, match="'blur_radius' expected an int from 1 to 3"):
        post.image_blur(_rand(1, 4, 8, 3), 4, 1.0)
    with pytest.raises(NodeInputError, match="'sharpen_radius'"):
        post.image_sharpen(_rand(1, 4, 8, 3), 0, 1.0, 1.0)
    with pytest.raises(NodeInputError, match="'sigma'"):
        post.image_blur(_rand(1, 4, 8, 3), 1, 0.0)


# --- ImageQuantize ------------------------------------------------------------------------------

def _pixels(image: torch.Tensor) -> np.ndarray:
    return (image.numpy() * 255).astype(np.uint8)


@pytest.mark.parametrize("colors", [2, 7, 256])
def test_quantize_without_dither_equals_pillows_palette_mapping(colors):
    image = _rand(2, 9, 11, 3)
    (out,) = post.image_quantize(image, colors, "none")
    for item, result in zip(image, out):
        source = Image.fromarray(_pixels(item))
        palette = source.quantize(colors=colors)
        expected = np.asarray(source.quantize(palette=palette, dither=Image.Dither.NONE).convert("RGB"))
        assert np.array_equal((result.numpy() * 255).round().astype(np.uint8), expected)
        assert len(np.unique(expected.reshape(-1, 3), axis=0)) <= colors


def test_quantize_floyd_steinberg_and_bayer_keep_the_palette():
    image = _rand(1, 16, 16, 3, seed=3)
    source = Image.fromarray(_pixels(image[0]))
    palette = {tuple(c) for c in np.asarray(source.quantize(colors=4).convert("RGB")).reshape(-1, 3)}
    results = {}
    for dither in post.DITHER_MODES:
        (out,) = post.image_quantize(image, 4, dither)
        colours = {tuple(c) for c in (out[0].numpy() * 255).round().astype(np.uint8).reshape(-1, 3)}
        assert colours <= palette, dither
        results[dither] = out
    assert not torch.equal(results["none"], results["floyd-steinberg"])
    assert not torch.equal(results["bayer-2"], results["bayer-16"])


def test_bayer_dither_of_a_flat_grey_is_the_threshold_pattern():
    from comfy_core.image.dither import bayer_offsets

    # Two colours: spread 256, offsets 256 * M + 0.5 = [[-95.5, 32.5], [96.5, -31.5]] on 128.
    shifted = bayer_offsets(torch.full((4, 4, 3), 128, dtype=torch.uint8), 2, 2).numpy()
    assert shifted[:2, :2, 0].tolist() == [[32, 160], [224, 96]] and np.array_equal(shifted[2:], shifted[:2])
    black_white = Image.fromarray(np.repeat(np.array([[0], [255]], np.uint8), 3, axis=1)[:, None, :]).quantize(colors=2)
    mapped = np.asarray(Image.fromarray(shifted).quantize(palette=black_white, dither=Image.Dither.NONE).convert("RGB"))
    assert mapped[:2, :2, 0].tolist() == [[0, 255], [255, 0]]  # the checkerboard of a 50% grey
    (out,) = post.image_quantize(torch.full((1, 4, 4, 3), 128 / 255), 1, "bayer-4")
    assert torch.all(out == out[0, 0, 0, 0])  # one palette colour: nothing to dither between


def test_quantize_errors():
    with pytest.raises(NodeInputError, match="'image' expected an RGB IMAGE"):
        post.image_quantize(_rand(1, 2, 2, 4), 4, "none")
    with pytest.raises(NodeInputError, match="'colors'"):
        post.image_quantize(_rand(1, 2, 2, 3), 0, "none")
    with pytest.raises(NodeInputError, match="'dither'"):
        post.image_quantize(_rand(1, 2, 2, 3), 4, "atkinson")


# --- ImageScaleToTotalPixels --------------------------------------------------------------------

@pytest.mark.parametrize("method", ["nearest-exact", "bilinear", "area", "bicubic"])
def test_scale_to_total_pixels_keeps_the_aspect_ratio(method):
    image = _rand(2, 30, 50, 3)
    (out,) = post.image_scale_to_total_pixels(image, method, 0.01)
    scale = math.sqrt(int(0.01 * 1024 * 1024) / (50 * 30))
    size = (round(30 * scale), round(50 * scale))
    assert out.shape == (2, *size, 3) and size == (79, 132)
    assert torch.equal(out, F.interpolate(image.movedim(-1, 1), size=size, mode=method).movedim(1, -1))


def test_scale_to_total_pixels_lanczos_and_errors():
    (out,) = post.image_scale_to_total_pixels(_rand(1, 40, 40, 3), "lanczos", 0.001)
    assert out.shape == (1, 32, 32, 3)  # int(1048.576) = 1048 px: sqrt -> 32.4 -> 32
    with pytest.raises(NodeInputError, match="'upscale_method'"):
        post.image_scale_to_total_pixels(_rand(1, 4, 4, 3), "bislerp", 1.0)
    with pytest.raises(NodeInputError, match="'megapixels'"):
        post.image_scale_to_total_pixels(_rand(1, 4, 4, 3), "area", 0.0)

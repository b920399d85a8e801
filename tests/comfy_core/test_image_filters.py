"""comfy_core.image.filters, blend, color and dither against independent references: SciPy's
convolution with mirrored borders, NumPy formulas, and Bayer's index matrix by bit interleaving."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage
import torch

from comfy_core.image.blend import MODES, blend
from comfy_core.image.names import BLEND_MODES
from comfy_core.image.color import rgb_to_ycbcr, ycbcr_to_rgb
from comfy_core.image.dither import bayer_matrix, bayer_offsets
from comfy_core.image.filters import blur, gaussian_kernel, sharpen


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def _np_gaussian(size: int, sigma: float) -> np.ndarray:
    axis = np.linspace(-1, 1, size)
    d2 = axis[:, None] ** 2 + axis[None, :] ** 2
    g = np.exp(-d2 / (2 * sigma ** 2))
    return g / g.sum()


def _np_filter(image: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Per channel, SciPy's convolution with 'mirror' borders (d c b | a b c d | c b a), the
    same extension as torch's 'reflect' padding; the kernels here are symmetric."""
    return np.stack([np.stack([scipy.ndimage.convolve(img[..., c], kernel, mode="mirror")
                               for c in range(img.shape[-1])], axis=-1) for img in image])


@pytest.mark.parametrize("size, sigma", [(3, 1.0), (7, 0.5), (11, 3.0)])
def test_gaussian_kernel_spans_minus_one_to_one(size, sigma):
    kernel = gaussian_kernel(size, sigma)
    assert kernel.shape == (size, size) and kernel.dtype == torch.float32
    assert np.allclose(kernel.numpy(), _np_gaussian(size, sigma), atol=1e-7)


@pytest.mark.parametrize("radius, sigma", [(1, 1.0), (3, 0.4), (4, 5.0)])
def test_blur_is_a_mirrored_gaussian_convolution(radius, sigma):
    image = _rand(2, 9, 11, 3)
    expected = _np_filter(image.double().numpy(), _np_gaussian(2 * radius + 1, sigma))
    out = blur(image, radius, sigma)
    assert out.shape == image.shape and np.allclose(out.numpy(), expected, atol=1e-6)


def test_blur_keeps_a_flat_image():
    image = torch.full((1, 6, 6, 4), 0.25)
    assert torch.allclose(blur(image, 2, 1.0), image, atol=1e-7)


@pytest.mark.parametrize("radius, sigma, alpha", [(1, 1.0, 1.0), (2, 0.5, 0.3), (3, 2.0, 4.0)])
def test_sharpen_is_an_unsharp_mask_clamped(radius, sigma, alpha):
    image = _rand(1, 10, 8, 3, seed=1)
    kernel = _np_gaussian(2 * radius + 1, sigma) * -(alpha * 10)
    kernel[radius, radius] += 1 - kernel.sum()  # sums to 1
    expected = np.clip(_np_filter(image.double().numpy(), kernel), 0, 1)
    out = sharpen(image, radius, sigma, alpha)
    assert np.allclose(out.numpy(), expected, atol=1e-5)
    assert out.min() >= 0 and out.max() <= 1


def test_blend_modes_follow_their_formulas():
    b, s = _rand(2, 4, 5, 3, seed=2), _rand(2, 4, 5, 3, seed=3)
    bn, sn = b.double().numpy(), s.double().numpy()
    d = np.where(bn <= 0.25, ((16 * bn - 12) * bn + 4) * bn, np.sqrt(bn))
    formulas = {
        "normal": sn, "multiply": bn * sn, "screen": 1 - (1 - bn) * (1 - sn),
        "overlay": np.where(bn <= 0.5, 2 * bn * sn, 1 - 2 * (1 - bn) * (1 - sn)),
        "soft_light": np.where(sn <= 0.5, bn - (1 - 2 * sn) * bn * (1 - bn), bn + (2 * sn - 1) * (d - bn)),
        "difference": bn - sn,  # ComfyUI's signed difference
    }
    assert BLEND_MODES == list(MODES) == list(formulas)
    for mode, blended in formulas.items():
        for factor in (0.0, 0.35, 1.0):
            want = np.clip(bn * (1 - factor) + blended * factor, 0, 1)
            assert np.allclose(blend(b, s, factor, mode).numpy(), want, atol=1e-6), (mode, factor)


def test_ycbcr_matches_the_jfif_formulas_and_round_trips():
    rgb = _rand(2, 3, 4, 3, seed=4)
    r, g, b = (rgb[..., i].double().numpy() for i in range(3))
    y = 0.299 * r + 0.587 * g + 0.114 * b
    want = np.stack([y, (b - y) * 0.564 + 0.5, (r - y) * 0.713 + 0.5], axis=-1)
    ycc = rgb_to_ycbcr(rgb)
    assert np.allclose(ycc.numpy(), want, atol=1e-6)
    assert torch.allclose(ycbcr_to_rgb(ycc), rgb, atol=1e-5)
    # Y = 1, Cb = 0, Cr = 1: red would be 1 + 0.5 / 0.713; it is clamped to 1.
    r, g, b = ycbcr_to_rgb(torch.tensor([[1.0, 0.0, 1.0]]))[0].tolist()
    assert r == 1.0 and g == pytest.approx(1 - 0.7144 * 0.5 + 0.3443 * 0.5, abs=1e-4)
    assert b == pytest.approx(1 - 0.5 / 0.564, abs=1e-6)


def _bayer_index(order: int) -> np.ndarray:
    """Bayer's index matrix by bit interleaving: the bits of i ^ j and i, reversed."""
    n = int(np.log2(order))
    out = np.zeros((order, order), np.int64)
    for i in range(order):
        for j in range(order):
            x, value = i ^ j, 0
            for bit in range(n):
                value |= ((x >> bit) & 1) << (2 * (n - 1 - bit) + 1)
                value |= ((i >> bit) & 1) << (2 * (n - 1 - bit))
            out[i, j] = value
    return out


@pytest.mark.parametrize("order", [1, 2, 4, 8, 16])
def test_bayer_matrix_is_the_normalised_index_matrix(order):
    want = (_bayer_index(order) + 0.5) / order ** 2 - 0.5
    matrix = bayer_matrix(order)
    assert matrix.dtype == torch.float64 and np.allclose(matrix.numpy(), want, atol=1e-12)
    assert sorted(_bayer_index(order).flatten().tolist()) == list(range(order * order))


def test_bayer_offsets_tile_the_threshold_and_truncate():
    pixels = torch.full((5, 3, 3), 100, dtype=torch.uint8)
    out = bayer_offsets(pixels, 2, 4)  # spread 128
    threshold = 128 * bayer_matrix(2).numpy() + 0.5
    want = np.floor(np.clip(100 + np.tile(threshold, (3, 2))[:5, :3], 0, 255)).astype(np.uint8)
    assert out.dtype == torch.uint8 and np.array_equal(out.numpy(), np.repeat(want[..., None], 3, axis=-1))
    assert bayer_offsets(torch.full((2, 2, 3), 250, dtype=torch.uint8), 2, 2).max() == 255  # clamped

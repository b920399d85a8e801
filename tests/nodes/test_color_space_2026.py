"""ImageColorSpace (today's ComfyUI, comfy_extras/nodes_images.py): every conversion between sRGB,
linear Rec.709, HDR (Rec.2020 HLG) and HDR PQ against an independent float64 implementation of the
standards written here with numpy: IEC 61966-2-1 (sRGB), ITU-R BT.2100 HLG (inverse OETF, OOTF with
a 1000-nit display and gamma 1.2) and SMPTE ST 2084 (PQ), the Rec.709 / Rec.2020 matrices derived
from their chromaticities (numpy.linalg), BT.2408's 203-nit reference white, plus the narrowing
rules ComfyUI states (batch-wide extended Reinhard, gamut compression towards luminance)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from nodes.color_space import SPACES, image_color_space
from nodes.errors import NodeInputError
from tests.nodes.workflow_2026 import Runner, node

# -- the standards, in float64 numpy --------------------------------------------------------------

A = 0.17883277
B = 1 - 4 * A
C = 0.5 - A * math.log(4 * A)
M1, M2 = 0.1593017578125, 78.84375
C1, C2, C3 = 0.8359375, 18.8515625, 18.6875
WHITE = 203.0


def npm(xy):
    """RGB->XYZ of primaries xy with D65 white at Y = 1."""
    xyz = np.array([[x / y, 1.0, (1 - x - y) / y] for x, y in xy]).T
    w = np.array([0.3127 / 0.3290, 1.0, (1 - 0.3127 - 0.3290) / 0.3290])
    return xyz * np.linalg.solve(xyz, w)


P709 = npm([(0.64, 0.33), (0.30, 0.60), (0.15, 0.06)])
P2020 = npm([(0.708, 0.292), (0.170, 0.797), (0.131, 0.046)])
TO2020 = np.linalg.inv(P2020) @ P709
TO709 = np.linalg.inv(TO2020)
LUMA709 = P709[1]
LUMA2020 = np.array([0.2627, 0.6780, 0.0593])


def srgb_eotf(v):
    return np.where(v <= 0.04045, v / 12.92, ((np.maximum(v, 0) + 0.055) / 1.055) ** 2.4)


def srgb_oetf(l):
    return np.where(l <= 0.0031308, 12.92 * l, 1.055 * np.maximum(l, 0.0031308) ** (1 / 2.4) - 0.055)


def hlg_inv_oetf(v):
    return np.where(v <= 0.5, v ** 2 / 3, (np.exp((np.maximum(v, 0.5) - C) / A) + B) / 12)


def hlg_oetf(e):
    return np.where(e <= 1 / 12, np.sqrt(3 * np.maximum(e, 0)), A * np.log(np.maximum(12 * e - B, 1e-300)) + C)


def pq_eotf(v):
    p = np.maximum(v, 0) ** (1 / M2)
    return 10000 * (np.maximum(p - C1, 0) / (C2 - C3 * p)) ** (1 / M1)


def pq_inv_eotf(nits):
    y = (np.maximum(nits, 0) / 10000) ** M1
    return ((C1 + C2 * y) / (1 + C3 * y)) ** M2


def reinhard(rgb, luma):
    lum = np.maximum(rgb @ luma, 0)[..., None]
    peak = max(lum.max(), 1.0)
    return rgb if peak <= 1.0001 else rgb * (1 + lum / peak ** 2) / (1 + lum)


def fit_gamut(rgb, luma):
    lum = np.clip(rgb @ luma, 0, 1)[..., None]
    lo, hi = rgb.min(-1, keepdims=True), rgb.max(-1, keepdims=True)
    s = np.clip(np.minimum((1 - lum) / np.maximum(hi - lum, 1e-300), lum / np.maximum(lum - lo, 1e-300)), 0, 1)
    inside = (lo >= -1e-5) & (hi <= 1 + 1e-5)
    return np.clip(np.where(inside, rgb, lum + (rgb - lum) * s), 0, 1)


def reference(rgb: np.ndarray, src: str, dst: str) -> np.ndarray:
    if src == dst:
        return rgb
    if src == "sRGB":
        nits = srgb_eotf(rgb) @ TO2020.T * WHITE
    elif src == "linear":
        nits = rgb @ TO2020.T * WHITE
    elif src == "HDR":
        scene = hlg_inv_oetf(rgb)
        nits = scene * np.maximum(scene @ LUMA2020, 0)[..., None] ** 0.2 * 1000
    else:
        nits = pq_eotf(rgb)
    if dst == "linear":
        return nits / WHITE @ TO709.T
    if dst == "sRGB":
        lin = reinhard(nits / WHITE @ TO709.T, LUMA709)
        return srgb_oetf(fit_gamut(lin, LUMA709))
    if dst == "HDR":
        d = nits / 1000
        if src == "HDR PQ":
            d = reinhard(d, LUMA2020)
        yd = np.maximum(d @ LUMA2020, np.finfo(np.float64).tiny)[..., None]
        scene = d * yd ** (1 / 1.2 - 1)
        if src == "HDR PQ":
            scene = fit_gamut(scene, LUMA2020)
        return hlg_oetf(scene)
    return pq_inv_eotf(nits)


def run(image: torch.Tensor, src: str, dst: str) -> torch.Tensor:
    (out,) = image_color_space(image, src, dst)
    return out


def pixels(seed: int = 0, high: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand((2, 5, 7, 3), generator=g, dtype=torch.float64).mul(high).float()


@pytest.mark.parametrize("src,dst", list(itertools.product(SPACES, SPACES)))
def test_every_conversion_matches_the_standards(src, dst):
    image = pixels(1)
    got = run(image, src, dst)
    want = reference(image.double().numpy(), src, dst)
    assert got.dtype == torch.float32 and got.device.type == "cpu" and got.shape == image.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("src,dst", [("linear", "HDR"), ("linear", "HDR PQ"), ("linear", "sRGB"), ("HDR PQ", "HDR"),
                                     ("HDR PQ", "sRGB"), ("HDR PQ", "linear"), ("sRGB", "HDR PQ")])
def test_extended_and_out_of_gamut_values(src, dst):
    image = pixels(2, high=1.0) * 3.0 - 0.5  # -0.5 .. 2.5: over white and out of gamut
    got = run(image, src, dst)
    want = reference(image.double().numpy(), src, dst)
    np.testing.assert_allclose(got.numpy(), want, rtol=5e-5, atol=5e-6)


def test_reference_points_of_the_standards():
    white = torch.ones((1, 1, 1, 3))
    # BT.2408: 203-nit reference white is 75% HLG and 58% PQ.
    assert run(white, "sRGB", "HDR")[0, 0, 0].tolist() == pytest.approx([0.7498] * 3, abs=2e-4)
    assert run(white, "sRGB", "HDR PQ")[0, 0, 0].tolist() == pytest.approx([0.5807] * 3, abs=2e-4)
    # PQ 1.0 is 10000 cd/m²: in linear units of 203-nit white.
    assert run(white, "HDR PQ", "linear")[0, 0, 0].tolist() == pytest.approx([10000 / 203] * 3, rel=1e-5)
    # sRGB mid grey 0.5 is 0.21404 linear (IEC 61966-2-1).
    assert run(white * 0.5, "sRGB", "linear")[0, 0, 0].tolist() == pytest.approx([0.21404114] * 3, rel=1e-5)


def test_round_trips_within_the_sdr_gamut_return_the_pixels():
    image = pixels(3) * 0.9 + 0.05
    for space in ("HDR", "HDR PQ", "linear"):
        back = run(run(image, "sRGB", space), space, "sRGB")
        torch.testing.assert_close(back, image, rtol=0, atol=3e-5)


def test_tone_mapping_shares_one_white_point_across_the_batch():
    dim = torch.full((1, 2, 2, 3), 0.5)
    bright = torch.full((1, 2, 2, 3), 0.9)  # PQ 0.9 is about 3900 cd/m², far above SDR white
    alone = run(dim, "HDR PQ", "sRGB")
    together = run(torch.cat([dim, bright]), "HDR PQ", "sRGB")
    assert not torch.allclose(alone, together[:1])  # the bright frame sets the white point
    np.testing.assert_allclose(together.numpy(), reference(torch.cat([dim, bright]).double().numpy(), "HDR PQ", "sRGB"),
                               rtol=2e-5, atol=2e-6)
    assert float(together.max()) <= 1.0


def test_alpha_is_passed_on_and_same_space_is_unchanged():
    rgba = torch.cat([pixels(4), torch.rand((2, 5, 7, 1))], dim=-1)
    out = run(rgba, "sRGB", "HDR")
    assert out.shape[-1] == 4 and torch.equal(out[..., 3], rgba[..., 3])
    torch.testing.assert_close(out[..., :3], run(rgba[..., :3], "sRGB", "HDR"))
    half = rgba.half()
    same = run(half, "HDR PQ", "HDR PQ")
    assert same.dtype == torch.float32 and torch.equal(same, half.float())


def test_refuses_what_it_cannot_convert():
    with pytest.raises(NodeInputError, match="'image'"):
        run(torch.rand((1, 4, 4, 1)), "sRGB", "HDR")
    with pytest.raises(NodeInputError, match="'destination'"):
        run(pixels(), "sRGB", "Rec.2100")


async def test_in_a_workflow(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"img": node("EmptyImage", width=8, height=8, batch_size=1, color=0xFFFFFF),
              "cs": node("ImageColorSpace", image=["img", 0], source="sRGB", destination="HDR"),
              "out": node("PreviewImage", images=["cs", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert len(out.ui_outputs["out"]["images"]) == 1

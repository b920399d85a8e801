"""ColorTransfer (nodes/color_transfer.py, comfy_core/image/color_transfer.py) against per-pixel
equations written here in numpy: the CIE L*a*b* conversion (sRGB companding, the D65 matrices,
f(t)), Reinhard's mean / std matching per frame and pooled, the linear Monge-Kantorovitch map's
defining property, and histogram matching through cumulative bin shares; strength and the
source-statistics modes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from comfy_core.image.color_transfer import color_transfer, lab_to_rgb, mkl_matrix, rgb_to_lab
from nodes.color_transfer import color_transfer_node
from nodes.errors import NodeInputError

M = np.array([[0.412453, 0.357580, 0.180423], [0.212671, 0.715160, 0.072169], [0.019334, 0.119193, 0.950227]])
WHITE = np.array([0.95047, 1.0, 1.08883])


def np_lab(rgb: np.ndarray) -> np.ndarray:
    """[..., 3] sRGB -> [..., 3] L*a*b*, per pixel."""
    lin = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
    xyz = lin @ M.T / WHITE
    f = np.where(xyz > 0.008856, np.cbrt(np.maximum(xyz, 0.008856)), 7.787 * xyz + 4 / 29)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


def np_rgb(lab: np.ndarray) -> np.ndarray:
    fy = (lab[..., 0] + 16) / 116
    f = np.stack([lab[..., 1] / 500 + fy, fy, np.maximum(fy - lab[..., 2] / 200, 0)], -1)
    xyz = np.where(f > 0.2068966, f ** 3, (f - 4 / 29) / 7.787) * WHITE
    lin = xyz @ np.linalg.inv(M).T
    rgb = np.where(lin > 0.0031308, 1.055 * np.maximum(lin, 0.0031308) ** (1 / 2.4) - 0.055, 12.92 * lin)
    return np.clip(rgb, 0, 1)


def images(seed: int, b: int = 3, h: int = 6, w: int = 5, lo: float = 0.1, hi: float = 0.8) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return lo + (hi - lo) * torch.rand(b, h, w, 3, generator=g)


def test_lab_conversion_per_pixel_and_known_colours():
    x = images(1)
    got = rgb_to_lab(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(got, np_lab(x.numpy().astype(np.float64)), atol=2e-4)
    red = rgb_to_lab(torch.tensor([1.0, 0.0, 0.0]).view(3, 1, 1)).flatten().numpy()
    np.testing.assert_allclose(red, [53.24, 80.09, 67.20], atol=0.02)
    white = rgb_to_lab(torch.ones(3, 1, 1)).flatten().numpy()
    np.testing.assert_allclose(white, [100.0, 0.0, 0.0], atol=1e-2)
    back = lab_to_rgb(rgb_to_lab(x.permute(0, 3, 1, 2))).permute(0, 2, 3, 1)
    torch.testing.assert_close(back, x, atol=1e-4, rtol=0)


def np_reinhard(src: np.ndarray, mean_r, std_r, mean_s=None, std_s=None) -> np.ndarray:
    lab = np_lab(src)
    flat = lab.reshape(-1, 3)
    mean_s = flat.mean(0) if mean_s is None else mean_s
    std_s = np.maximum(flat.std(0), 1e-6) if std_s is None else std_s
    return np_rgb((lab - mean_s) * (std_r / std_s) + mean_r)


def test_reinhard_per_frame_single_and_batched_reference():
    target, ref = images(2).double(), images(3, b=1, h=4, w=7, lo=0.3, hi=0.95).double()
    got = color_transfer(target.float(), ref.float(), "reinhard_lab", "per_frame")
    ref_lab = np_lab(ref.numpy()).reshape(-1, 3)
    for i in range(3):
        want = np_reinhard(target[i].numpy(), ref_lab.mean(0), ref_lab.std(0))
        np.testing.assert_allclose(got[i].numpy(), want, atol=2e-4)
    refs = images(4, b=2, lo=0.2, hi=0.9).double()
    got = color_transfer(target.float(), refs.float(), "reinhard_lab", "per_frame")
    for i in range(3):
        r = np_lab(refs[min(i, 1)].numpy()).reshape(-1, 3)  # the last reference for the third frame
        np.testing.assert_allclose(got[i].numpy(), np_reinhard(target[i].numpy(), r.mean(0), r.std(0)), atol=2e-4)


def test_reinhard_uniform_and_target_frame_use_one_transform():
    target, ref = images(5).double(), images(6, b=2, lo=0.3, hi=0.9).double()

    def pooled(x):
        labs = [np_lab(f.numpy()).reshape(-1, 3) for f in x]
        mean = np.mean([l.mean(0) for l in labs], 0)
        return mean, np.sqrt(np.mean([((l - mean) ** 2).mean(0) for l in labs], 0))

    mean_r, std_r = pooled(ref)
    mean_s, std_s = pooled(target)
    got = color_transfer(target.float(), ref.float(), "reinhard_lab", "uniform")
    for i in range(3):
        np.testing.assert_allclose(got[i].numpy(), np_reinhard(target[i].numpy(), mean_r, std_r, mean_s, std_s),
                                   atol=2e-4)
    chosen = np_lab(target[1].numpy()).reshape(-1, 3)
    got = color_transfer(target.float(), ref.float(), "reinhard_lab", "target_frame", target_index=1)
    for i in range(3):
        np.testing.assert_allclose(got[i].numpy(), np_reinhard(target[i].numpy(), mean_r, std_r, chosen.mean(0),
                                                               chosen.std(0)), atol=2e-4)
    clamped = color_transfer(target.float(), ref.float(), "reinhard_lab", "target_frame", target_index=99)
    torch.testing.assert_close(clamped, color_transfer(target.float(), ref.float(), "reinhard_lab", "target_frame",
                                                       target_index=2))


def test_mkl_map_carries_source_covariance_to_the_reference():
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(3, 3, generator=g, dtype=torch.float64), torch.randn(3, 3, generator=g, dtype=torch.float64)
    cs, cr = a @ a.T + 0.1 * torch.eye(3, dtype=torch.float64), b @ b.T + 0.1 * torch.eye(3, dtype=torch.float64)
    t = mkl_matrix(cs, cr)
    torch.testing.assert_close(t @ cs @ t.T, cr, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(t, t.T, atol=1e-10, rtol=0)  # the symmetric (minimal-displacement) solution
    assert torch.linalg.eigvalsh(t).min() > 0
    # per frame: the Lab values map to x -> T (x - mean_s) + mean_r with T from the frame's covariance
    target, ref = images(8, b=1), images(9, b=1, lo=0.35, hi=0.7)
    got = color_transfer(target, ref, "mkl_lab", "per_frame")
    src = np_lab(target[0].numpy().astype(np.float64)).reshape(-1, 3)
    r = np_lab(ref[0].numpy().astype(np.float64)).reshape(-1, 3)
    cov = lambda x: (x - x.mean(0)).T @ (x - x.mean(0)) / len(x)  # noqa: E731
    tm = mkl_matrix(torch.from_numpy(cov(src)), torch.from_numpy(cov(r))).numpy()
    want = np_rgb(((src - src.mean(0)) @ tm.T + r.mean(0)).reshape(6, 5, 3))
    np.testing.assert_allclose(got[0].numpy(), want, atol=5e-4)


def np_hist_match(src: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """[N, C] and [M, C] in 0..1: each channel's source bin -> the first reference bin whose
    cumulative share reaches the source bin's, / 255."""
    out = np.empty_like(src)
    for c in range(src.shape[1]):
        sb = np.clip((src[:, c] * 255).astype(int), 0, 255)
        rb = np.clip((ref[:, c] * 255).astype(int), 0, 255)
        s_cdf = np.cumsum(np.bincount(sb, minlength=256)) / len(sb)
        r_cdf = np.cumsum(np.bincount(rb, minlength=256)) / len(rb)
        lut = np.minimum(np.searchsorted(r_cdf, s_cdf, side="left"), 255) / 255
        out[:, c] = lut[sb]
    return out


def test_histogram_per_frame_uniform_and_strength():
    target, ref = images(10, b=2, h=8, w=8, lo=0.0, hi=1.0), images(11, b=1, h=5, w=9, lo=0.2, hi=0.6)
    got = color_transfer(target, ref, "histogram", "per_frame")
    for i in range(2):
        want = np_hist_match(target[i].reshape(-1, 3).numpy(), ref[0].reshape(-1, 3).numpy())
        np.testing.assert_allclose(got[i].reshape(-1, 3).numpy(), want, atol=1e-6)
    uniform = color_transfer(target, ref, "histogram", "uniform")
    pooled = target.reshape(-1, 3).numpy()
    want = np_hist_match(pooled, ref.reshape(-1, 3).numpy()).reshape(2, 8, 8, 3)
    np.testing.assert_allclose(uniform.numpy(), want, atol=1e-6)
    half = color_transfer(target, ref, "histogram", "per_frame", strength=0.5)
    torch.testing.assert_close(half, (0.5 * (target + got)).clamp(0, 1), atol=1e-6, rtol=0)


def test_strength_in_lab_and_the_node():
    target, ref = images(12), images(13, b=1, lo=0.4, hi=0.9)
    full = color_transfer(target, ref, "reinhard_lab")
    assert color_transfer(target, ref, "reinhard_lab", strength=0.0) is target
    half = color_transfer(target, ref, "reinhard_lab", strength=0.5)
    src_lab = rgb_to_lab(target.permute(0, 3, 1, 2))
    full_lab = rgb_to_lab(full.permute(0, 3, 1, 2))  # no clipping in these ranges: Lab round-trips
    want = lab_to_rgb(0.5 * (src_lab + full_lab)).permute(0, 2, 3, 1)
    torch.testing.assert_close(half, want, atol=2e-4, rtol=0)
    (out,) = color_transfer_node(target, ref, "reinhard_lab", {"source_stats": "per_frame"}, 1.0)
    torch.testing.assert_close(out, full)
    (out,) = color_transfer_node(target, ref, "histogram", {"source_stats": "target_frame", "target_index": 1}, 1.0)
    assert out.shape == target.shape
    with pytest.raises(NodeInputError, match="method"):
        color_transfer_node(target, ref, "lut", {"source_stats": "per_frame"}, 1.0)
    with pytest.raises(NodeInputError):
        color_transfer_node(torch.rand(1, 4, 4, 4), ref, "mkl_lab", {"source_stats": "per_frame"}, 1.0)

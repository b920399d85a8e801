"""FreeU's backbone scaling and Fourier filter, and FreSca's frequency scaling, against numpy
formulas computed here."""
from __future__ import annotations

import numpy as np
import torch

from comfy_core.model_patches.freeu import FreeU, fourier_filter
from comfy_core.model_patches.fresca import FreSca, frequency_scale


def _np_filter(x: np.ndarray, rows: slice, cols: slice, inner: float, outer: float) -> np.ndarray:
    """Shifted 2-D spectrum scaled by `inner` on [rows, cols] and `outer` elsewhere."""
    freq = np.fft.fftshift(np.fft.fft2(x.astype(np.float64)), axes=(-2, -1))
    mask = np.full(freq.shape, outer)
    mask[..., rows, cols] = inner
    return np.fft.ifft2(np.fft.ifftshift(freq * mask, axes=(-2, -1))).real


def test_fourier_filter_scales_the_central_two_by_two_frequencies() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 6)
    out = fourier_filter(x, 1, 0.25)
    expected = _np_filter(x.numpy(), slice(3, 5), slice(2, 4), 0.25, 1.0)
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-5)
    assert out.dtype == x.dtype
    torch.testing.assert_close(fourier_filter(x, 1, 1.0), x, atol=1e-5, rtol=0)


def test_freeu_scales_half_the_backbone_and_filters_the_skip_at_matching_widths_only() -> None:
    torch.manual_seed(1)
    patch = FreeU.for_model(8, 1.1, 1.2, 0.9, 0.2)
    for channels, b, s in ((32, 1.1, 0.9), (16, 1.2, 0.2)):
        h, skip = torch.randn(2, channels, 6, 6), torch.randn(2, channels, 6, 6)
        h_in, skip_in = h.clone(), skip.clone()
        out_h, out_skip = patch(h, skip, {})
        assert torch.equal(h, h_in) and torch.equal(skip, skip_in)  # inputs untouched
        half = channels // 2
        assert torch.equal(out_h[:, :half], h[:, :half] * b) and torch.equal(out_h[:, half:], h[:, half:])
        np.testing.assert_allclose(out_skip.numpy(), _np_filter(skip.numpy(), slice(2, 4), slice(2, 4), s, 1.0), atol=1e-5)
    h, skip = torch.randn(1, 8, 4, 4), torch.randn(1, 8, 4, 4)
    out_h, out_skip = patch(h, skip, {})
    assert out_h is h and out_skip is skip  # base width: not a FreeU level


def test_freeu_v2_weights_the_backbone_scale_by_the_normalised_channel_mean() -> None:
    torch.manual_seed(2)
    h, skip = torch.randn(2, 16, 5, 4), torch.randn(2, 16, 5, 4)
    out_h, _ = FreeU.for_model(4, 1.3, 1.4, 0.9, 0.2, version=2)(h, skip, {})
    mean = h.double().mean(1, keepdim=True)
    lo = mean.amin(dim=(2, 3), keepdim=True)
    hi = mean.amax(dim=(2, 3), keepdim=True)
    factor = 1 + (1.3 - 1) * (mean - lo) / (hi - lo)
    np.testing.assert_allclose(out_h[:, :8].double().numpy(), (h[:, :8].double() * factor).numpy(), rtol=1e-5)
    assert torch.equal(out_h[:, 8:], h[:, 8:])


def test_fresca_scales_the_low_band_and_the_rest_apart() -> None:
    torch.manual_seed(3)
    x = torch.randn(1, 2, 12, 9)
    # cutoff 2: rows 6-2..6+2, cols 4-2..4+2 are low frequencies; cutoff beyond the size caps at side // 2.
    np.testing.assert_allclose(frequency_scale(x, 0.5, 1.5, 2).numpy(),
                               _np_filter(x.numpy(), slice(4, 8), slice(2, 6), 0.5, 1.5), atol=1e-5)
    np.testing.assert_allclose(frequency_scale(x, 0.5, 1.5, 100).numpy(),
                               _np_filter(x.numpy(), slice(0, 12), slice(0, 8), 0.5, 1.5), atol=1e-5)


def test_fresca_rewrites_the_positive_and_skips_without_a_negative() -> None:
    torch.manual_seed(4)
    cond, uncond, extra = torch.randn(1, 4, 8, 8), torch.randn(1, 4, 8, 8), torch.randn(1, 4, 8, 8)
    hook = FreSca(1.0, 1.25, 2)
    out = hook({"conds_out": [cond, uncond, extra], "conds": [[{}], [{}], [{}]]})
    torch.testing.assert_close(out[0], frequency_scale(cond - uncond, 1.0, 1.25, 2) + uncond)
    assert out[1] is uncond and out[2] is extra
    skipped = [cond, torch.zeros_like(cond)]
    assert hook({"conds_out": skipped, "conds": [[{}], None]}) is skipped

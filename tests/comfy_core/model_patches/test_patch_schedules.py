"""Deep Shrink's block/sigma window and Differential Diffusion's threshold schedule."""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F

from comfy_core.model_patches.differential_diffusion import DifferentialDiffusion, mask_threshold
from comfy_core.model_patches.downscale import DownscaleInput, UpscaleOutput
from comfy_core.models.model_sampling import ModelSampling


def test_downscale_acts_at_its_block_inside_its_sigma_window_only() -> None:
    patch = DownscaleInput(3, 2.0, sigma_start=10.0, sigma_end=1.0, method="bilinear")
    h = torch.randn(1, 4, 8, 6)
    inside = {"block": ("input", 3), "sigmas": torch.tensor([5.0])}
    torch.testing.assert_close(patch(h, inside), F.interpolate(h, size=(4, 3), mode="bilinear"))
    for options in ({"block": ("input", 2), "sigmas": torch.tensor([5.0])},
                    {"block": ("input", 3), "sigmas": torch.tensor([10.5])},
                    {"block": ("input", 3), "sigmas": torch.tensor([0.5])}):
        assert patch(h, options) is h
    # Factor 1.5: sides rounded (8 / 1.5 = 5.33 -> 5, 6 / 1.5 -> 4).
    assert DownscaleInput(3, 1.5, 10.0, 1.0, "nearest-exact")(h, inside).shape == (1, 4, 5, 4)


def test_upscale_output_restores_the_skip_size_only_when_they_differ() -> None:
    h, skip = torch.randn(1, 4, 4, 3), torch.randn(1, 4, 8, 6)
    out_h, out_skip = UpscaleOutput("nearest-exact")(h, skip, {})
    torch.testing.assert_close(out_h, F.interpolate(h, size=(8, 6), mode="nearest-exact"))
    assert out_skip is skip
    same = torch.randn(1, 4, 8, 6)
    assert UpscaleOutput("bicubic")(same, skip, {})[0] is same


def _extra(sigmas: torch.Tensor, ms: ModelSampling) -> dict:
    return {"model": SimpleNamespace(inner_model=SimpleNamespace(model_sampling=ms)), "sigmas": sigmas}


def test_differential_diffusion_threshold_falls_linearly_in_timestep() -> None:
    ms = ModelSampling("eps")
    sigmas = torch.tensor([float(ms.sigma(torch.tensor(900.0))), float(ms.sigma(torch.tensor(500.0))),
                           float(ms.sigma(torch.tensor(100.0))), 0.0])
    # sigma_to = sigma_min (the last sigma is 0): timestep 0; sigma_from: timestep 900.
    for i, t in enumerate((900.0, 500.0, 100.0)):
        threshold = mask_threshold(sigmas[i:i + 1], sigmas, ms)
        torch.testing.assert_close(torch.as_tensor(threshold).float(), torch.tensor(t / 900.0), atol=1e-3, rtol=0)
    mask = torch.tensor([[[[0.1, 0.5, 0.6, 1.0]]]])
    binary = DifferentialDiffusion(1.0)(sigmas[1:2], mask, _extra(sigmas, ms))  # threshold 5/9
    assert binary.tolist() == [[[[0.0, 0.0, 1.0, 1.0]]]]
    blended = DifferentialDiffusion(0.25)(sigmas[1:2], mask, _extra(sigmas, ms))
    torch.testing.assert_close(blended, 0.25 * binary + 0.75 * mask)
    # A run ending above sigma_min measures from its own last sigma: the last step is threshold 0.
    short = sigmas[:3]
    assert DifferentialDiffusion(1.0)(short[2:3], mask, _extra(short, ms)).tolist() == [[[[1.0, 1.0, 1.0, 1.0]]]]

"""ModelSampling: the SD sigma table, sigma <-> timestep, eps/v denoising, noise scaling."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.models.model_sampling import ModelSampling, ModelSamplingError


@pytest.fixture(scope="module")
def ms() -> ModelSampling:
    return ModelSampling()


def test_sigma_table_matches_comfyui_values(ms: ModelSampling) -> None:
    # Values from ComfyUI's ModelSamplingDiscrete (shared/reference/samplers.md section 2).
    assert ms.sigmas.dtype == torch.float32 and ms.sigmas.shape == (1000,)
    assert float(ms.sigma_min) == 0.029167158529162407
    assert float(ms.sigmas[1]) == 0.04131441190838814
    assert float(ms.sigmas[499]) == 1.6128861904144287
    assert float(ms.sigmas[500]) == 1.6182788610458374
    assert float(ms.sigma_max) == 14.614641189575195


def test_table_agrees_with_diffusers_scaled_linear_within_float32() -> None:
    betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=torch.float64) ** 2
    ac = torch.cumprod(1 - betas, 0)
    expected = ((1 - ac) / ac).sqrt()
    torch.testing.assert_close(ModelSampling().sigmas.double(), expected, rtol=1e-6, atol=0)


def test_timestep_is_nearest_log_sigma_index(ms: ModelSampling) -> None:
    t = ms.timestep(ms.sigmas[[0, 10, 500, 999]])
    assert t.tolist() == [0, 10, 500, 999] and t.dtype == torch.int64
    # Between two table entries the nearer one in log space wins (no interpolation).
    a, b = ms.sigmas[100].double(), ms.sigmas[101].double()
    just_above_a = torch.tensor(float((a.log() + 0.4 * (b.log() - a.log())).exp()))
    assert int(ms.timestep(just_above_a)) == 100
    assert int(ms.timestep(torch.tensor(1e6))) == 999


def test_sigma_interpolates_in_log_space_and_clamps(ms: ModelSampling) -> None:
    assert float(ms.sigma(torch.tensor(999.0))) == pytest.approx(14.614641189575195, rel=1e-6)
    mid = ms.sigma(torch.tensor(10.5))
    expected = math.exp(0.5 * (math.log(float(ms.sigmas[10])) + math.log(float(ms.sigmas[11]))))
    assert float(mid) == pytest.approx(expected, rel=1e-6)
    assert float(ms.sigma(torch.tensor(-5.0))) == pytest.approx(float(ms.sigma_min), rel=1e-6)
    assert float(ms.sigma(torch.tensor(5000.0))) == pytest.approx(float(ms.sigma_max), rel=1e-6)


def test_percent_to_sigma(ms: ModelSampling) -> None:
    assert ms.percent_to_sigma(0.0) == 999999999.9
    assert ms.percent_to_sigma(1.0) == 0.0
    assert ms.percent_to_sigma(0.5) == pytest.approx(float(ms.sigma(torch.tensor(499.5))), rel=1e-6)


def test_eps_denoised_and_input_scaling(ms: ModelSampling) -> None:
    x = torch.randn(2, 4, 3, 3, generator=torch.Generator().manual_seed(0))
    eps = torch.randn(2, 4, 3, 3, generator=torch.Generator().manual_seed(1))
    sigma = torch.tensor([2.0, 0.5])
    den = ms.calculate_denoised(sigma, eps, x)
    torch.testing.assert_close(den[0], x[0] - 2.0 * eps[0])
    torch.testing.assert_close(den[1], x[1] - 0.5 * eps[1])
    inp = ms.calculate_input(sigma, x)
    torch.testing.assert_close(inp[0], x[0] / math.sqrt(5.0))


def test_v_prediction_recovers_x0() -> None:
    # With x = x0 + sigma*n, the VP view is x/sqrt(1+s^2) = a x0 + b n (a = 1/sqrt(1+s^2), b = s a),
    # and v = a n - b x0 (Salimans & Ho 2022). The v denoiser must return x0 exactly.
    ms = ModelSampling(prediction="v")
    g = torch.Generator().manual_seed(0)
    x0, n = torch.randn(3, 4, 2, 2, generator=g), torch.randn(3, 4, 2, 2, generator=g)
    sigma = torch.tensor([0.3, 2.0, 14.0])
    s = sigma.view(-1, 1, 1, 1)
    a, b = 1 / (1 + s * s).sqrt(), s / (1 + s * s).sqrt()
    v = a * n - b * x0
    torch.testing.assert_close(ms.calculate_denoised(sigma, v, x0 + s * n), x0, rtol=1e-5, atol=1e-5)
    # ... and the eps parametrisation would not.
    assert not torch.allclose(ModelSampling().calculate_denoised(sigma, v, x0 + s * n), x0, atol=1e-2)


def test_noise_scaling_max_denoise(ms: ModelSampling) -> None:
    noise, latent = torch.ones(1, 4, 2, 2), torch.full((1, 4, 2, 2), 0.5)
    s = ms.sigma_max
    assert ms.is_max_denoise(s) and ms.is_max_denoise(torch.tensor(20.0)) and not ms.is_max_denoise(torch.tensor(3.0))
    start = ms.noise_scaling(s, noise, latent, max_denoise=True)
    torch.testing.assert_close(start, latent + math.sqrt(1 + float(s) ** 2))
    assert float(math.sqrt(1 + float(s) ** 2)) == pytest.approx(14.6488, abs=1e-4)
    torch.testing.assert_close(ms.noise_scaling(torch.tensor(3.0), noise, latent), latent + 3.0)
    assert ms.inverse_noise_scaling(s, latent) is latent


def test_bad_arguments_raise() -> None:
    with pytest.raises(ModelSamplingError, match="prediction"):
        ModelSampling(prediction="x0")  # type: ignore[arg-type]
    with pytest.raises(ModelSamplingError, match="linear_start"):
        ModelSampling(linear_start=0.1, linear_end=0.01)


def test_zero_terminal_snr_option() -> None:
    z = ModelSampling(zsnr=True)
    assert float(z.sigma_max) > 1000  # last alpha_bar forced to ~4.9e-8
    assert float(z.sigma_max) == pytest.approx(math.sqrt((1 - 4.8973451890853435e-08) / 4.8973451890853435e-08), rel=1e-4)

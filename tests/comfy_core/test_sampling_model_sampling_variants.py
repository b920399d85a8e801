"""The ModelSampling* variants: discrete x0 / img-to-img / LCM, rectified flow (SD3, AuraFlow,
Flux shifts), continuous EDM / V, Cosmos rectified flow, Stable Cascade; each table and map
checked against its formula computed here (float64 where the formula allows, then to float32)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from comfy_core.models.model_sampling import (
    ContinuousEDMModelSampling, ContinuousVModelSampling, CosmosRFlowModelSampling, DiscreteModelSampling,
    DistilledModelSampling, FlowModelSampling, FluxModelSampling, ModelSampling, ModelSamplingError,
    StableCascadeModelSampling, flux_resolution_shift,
)
from comfy_core.patching.signature import freeze

G = torch.Generator().manual_seed(0)
X = torch.randn(2, 4, 3, 3, generator=G)
OUT = torch.randn(2, 4, 3, 3, generator=G)
NOISE = torch.randn(2, 4, 3, 3, generator=G)


def ulps(a: torch.Tensor, b: np.ndarray) -> int:
    """Largest distance in float32 ulps between `a` and float64 reference values `b`."""
    a64 = a.double().numpy()
    return int(np.max(np.abs(a64 - b) / np.spacing(np.abs(b).astype(np.float32)).astype(np.float64)))


# -- discrete ----------------------------------------------------------------------------------

def test_discrete_variants_share_the_checkpoint_table_and_change_only_the_output_map() -> None:
    base = ModelSampling()
    sigma = torch.tensor([0.7, 3.0])
    for prediction in ("eps", "v", "x0", "img_to_img"):
        ms = DiscreteModelSampling(prediction)
        assert torch.equal(ms.sigmas, base.sigmas) and torch.equal(ms.log_sigmas, base.log_sigmas)
    x0 = DiscreteModelSampling("x0")
    assert x0.calculate_denoised(sigma, OUT, X) is OUT  # the network predicts x0 itself
    torch.testing.assert_close(x0.calculate_input(sigma, X)[1], X[1] / math.sqrt(10.0))
    i2i = DiscreteModelSampling("img_to_img")
    assert i2i.calculate_input(sigma, X) is X and i2i.calculate_denoised(sigma, OUT, X) is OUT
    # A plain checkpoint table still only takes what checkpoints declare.
    with pytest.raises(ModelSamplingError, match="prediction"):
        ModelSampling("x0")  # type: ignore[arg-type]


def test_zsnr_discrete_table_is_the_rescaled_one() -> None:
    z = DiscreteModelSampling("v", zsnr=True)
    assert torch.equal(z.sigmas, ModelSampling("v", zsnr=True).sigmas)
    assert float(z.sigma_max) > 1000


def test_lcm_table_takes_every_20th_sigma_from_the_last() -> None:
    full = ModelSampling().sigmas
    lcm = DistilledModelSampling()
    assert lcm.sigmas.shape == (50,)
    assert torch.equal(lcm.sigmas, full[torch.arange(19, 1000, 20)])
    # timestep: the original index of the nearest entry; sigma inverts it.
    assert lcm.timestep(full[[19, 519, 999]]).tolist() == [19, 519, 999]
    assert lcm.timestep(full[[0, 25]]).tolist() == [19, 19]
    torch.testing.assert_close(lcm.sigma(torch.tensor([19.0, 999.0])), full[[19, 999]])


def test_lcm_denoiser_is_the_consistency_boundary_condition() -> None:
    lcm = DistilledModelSampling()
    sigma = lcm.sigmas[[3, 40]]
    t = lcm.timestep(sigma).double().view(-1, 1, 1, 1) * 10.0
    s = sigma.double().view(-1, 1, 1, 1)
    c_skip, c_out = 0.25 / (t * t + 0.25), t / (t * t + 0.25).sqrt()
    expected = c_out * (X.double() - OUT.double() * s) + c_skip * X.double()
    torch.testing.assert_close(lcm.calculate_denoised(sigma, OUT, X).double(), expected, rtol=1e-6, atol=1e-6)


# -- rectified flow ----------------------------------------------------------------------------

@pytest.mark.parametrize("shift,multiplier", [(3.0, 1000), (1.73, 1.0), (1.0, 1000)])
def test_sd3_and_auraflow_sigmas_are_the_time_shift_to_one_ulp(shift: float, multiplier: float) -> None:
    ms = FlowModelSampling(shift, multiplier)
    t = np.arange(1, 1001) / 1000.0
    expected = shift * t / (1 + (shift - 1) * t)
    assert ms.sigmas.dtype == torch.float32 and ms.sigmas.shape == (1000,)
    assert ulps(ms.sigmas, expected) <= 3  # float32 arithmetic against the exact values
    # The same formula evaluated in float32 in ComfyUI's order (t = (i / T) * m / m) matches to 1 ulp.
    f = np.float32
    t32 = (np.arange(1, 1001, dtype=f) / f(1000)) * f(multiplier) / f(multiplier)
    expected32 = t32 if shift == 1.0 else f(shift) * t32 / (f(1) + f(shift - 1) * t32)
    assert ulps(ms.sigmas, expected32.astype(np.float64)) <= 1
    sigma = torch.tensor([0.25, 0.8])
    torch.testing.assert_close(ms.timestep(sigma), sigma * multiplier)
    assert ms.percent_to_sigma(0.0) == 1.0 and ms.percent_to_sigma(1.0) == 0.0
    assert ms.percent_to_sigma(0.4) == pytest.approx(shift * 0.6 / (1 + (shift - 1) * 0.6), rel=1e-12)


def test_flow_prediction_maths() -> None:
    ms = FlowModelSampling(3.0)
    sigma = torch.tensor([0.25, 0.8])
    s = sigma.view(-1, 1, 1, 1)
    assert ms.calculate_input(sigma, X) is X
    torch.testing.assert_close(ms.calculate_denoised(sigma, OUT, X), X - OUT * s)  # velocity n - x0
    # The noisy point interpolates data and noise; the end undoes the (1 - sigma) factor.
    torch.testing.assert_close(ms.noise_scaling(sigma, NOISE, X), s * NOISE + (1 - s) * X)
    torch.testing.assert_close(ms.noise_scaling(sigma, NOISE, X, max_denoise=True), s * NOISE + (1 - s) * X)
    torch.testing.assert_close(ms.inverse_noise_scaling(torch.tensor(0.5), X), X * 2)
    assert ms.is_max_denoise(ms.sigma_max) and float(ms.sigma_max) == 1.0


@pytest.mark.parametrize("width,height,base,top", [(1024, 1024, 0.5, 1.15), (512, 768, 0.3, 2.0), (2048, 1024, 0.5, 1.15)])
def test_flux_shift_from_resolution(width: int, height: int, base: float, top: float) -> None:
    patches = (width // 16) * (height // 16)  # 8x VAE, 2x2 patches
    mu = base + (top - base) * (patches - 256) / (4096 - 256)
    assert flux_resolution_shift(width, height, base, top) == pytest.approx(mu, rel=1e-12, abs=1e-12)
    ms = FluxModelSampling(mu)
    t = np.arange(1, 10001) / 10000.0
    expected = math.exp(mu) / (math.exp(mu) + (1 / t - 1))
    assert ms.sigmas.shape == (10000,) and ulps(ms.sigmas, expected) <= 2
    sigma = torch.tensor([0.3, 0.9])
    torch.testing.assert_close(ms.timestep(sigma), sigma)
    assert ms.percent_to_sigma(0.25) == pytest.approx(math.exp(mu) / (math.exp(mu) + (1 / 0.75 - 1)), rel=1e-12)


# -- continuous --------------------------------------------------------------------------------

def test_continuous_edm_table_and_maps() -> None:
    ms = ContinuousEDMModelSampling("edm", 0.002, 120.0, 0.5)
    expected = np.exp(np.linspace(math.log(0.002), math.log(120.0), 1000))
    assert ms.sigmas.shape == (1000,) and ulps(ms.sigmas, expected) <= 8
    sigma = torch.tensor([0.1, 7.0])
    torch.testing.assert_close(ms.timestep(sigma), 0.25 * sigma.log())
    torch.testing.assert_close(ms.sigma(ms.timestep(sigma)), sigma)
    s = sigma.view(-1, 1, 1, 1)
    # EDM's preconditioning (Karras et al. 2022, table 1) with sigma_data 0.5: c_skip x + c_out F.
    c_skip, c_out = 0.25 / (s * s + 0.25), s * 0.5 / (s * s + 0.25).sqrt()
    torch.testing.assert_close(ms.calculate_denoised(sigma, OUT, X), c_skip * X + c_out * OUT)
    torch.testing.assert_close(ms.calculate_input(sigma, X), X / (s * s + 0.25).sqrt())
    p = 0.3
    assert ms.percent_to_sigma(p) == pytest.approx(
        math.exp(math.log(float(ms.sigma_min)) + (1 - p) * (math.log(float(ms.sigma_max)) - math.log(float(ms.sigma_min)))))
    v = ContinuousEDMModelSampling("v", 0.002, 120.0, 1.0)
    torch.testing.assert_close(v.calculate_denoised(sigma, OUT, X),
                               X / (s * s + 1) - OUT * s / (s * s + 1).sqrt())
    with pytest.raises(ModelSamplingError, match="sigma_min"):
        ContinuousEDMModelSampling("edm", 0.0, 120.0)


def test_continuous_v_timestep_is_the_angle() -> None:
    ms = ContinuousVModelSampling("v", 0.03, 500.0, 1.0)
    sigma = torch.tensor([0.5, 20.0])
    torch.testing.assert_close(ms.timestep(sigma), torch.atan(sigma) * 2 / math.pi)
    torch.testing.assert_close(ms.sigma(ms.timestep(sigma)), sigma, rtol=1e-5, atol=0)
    assert float(ms.sigma_max) == pytest.approx(500.0, rel=1e-5)


def test_cosmos_rflow_maps() -> None:
    ms = CosmosRFlowModelSampling("cosmos_rflow", 0.002, 80.0, 1.0)
    sigma = torch.tensor([0.5, 3.0])
    t = (sigma / (sigma + 1)).view(-1, 1, 1, 1)
    torch.testing.assert_close(ms.calculate_input(sigma, X), X * (1 - t))
    torch.testing.assert_close(ms.calculate_denoised(sigma, OUT, X), X * (1 - t) - OUT * t)
    torch.testing.assert_close(ms.sigma(torch.tensor(0.4)), torch.tensor(0.4 / 0.6))
    assert float(ms.sigma(torch.tensor(0.9999))) == float(ms.sigma_max)


def test_stable_cascade_cosine_schedule() -> None:
    for shift in (1.0, 2.0):
        ms = StableCascadeModelSampling(shift)
        t = np.arange(1, 10001) / 10000.0
        s = 0.008
        ab = np.cos((t + s) / (1 + s) * np.pi / 2) ** 2 / np.cos(s / (1 + s) * np.pi / 2) ** 2
        if shift != 1.0:
            ab = 1 / (1 + np.exp(-(np.log(ab / (1 - ab)) - 2 * np.log(shift))))
        ab = np.clip(ab, float(np.float32(1e-4)), float(np.float32(0.9999)))  # clamped in float32
        assert ms.sigmas.shape == (10000,)
        # Compared as alpha_bar = 1 / (1 + sigma^2): near alpha_bar = 1, sigma = sqrt((1 - ab) / ab)
        # loses digits to cancellation in float32 (in ComfyUI too), alpha_bar does not.
        sig = ms.sigmas.double().numpy()
        np.testing.assert_allclose(1 / (1 + sig * sig), ab, rtol=0, atol=2e-6)
        np.testing.assert_allclose(sig[ab < 0.99], np.sqrt((1 - ab) / ab)[ab < 0.99], rtol=1e-4)
    # timestep inverts the unshifted schedule (ComfyUI's ignores the shift) away from the clamps.
    ms = StableCascadeModelSampling(1.0)
    torch.testing.assert_close(ms.timestep(ms.sigma(torch.tensor([0.3, 0.6]))), torch.tensor([0.3, 0.6]),
                               rtol=1e-4, atol=1e-4)


def test_equal_settings_give_equal_cache_signatures() -> None:
    assert freeze(FlowModelSampling(3.0)) == freeze(FlowModelSampling(3.0)) != freeze(FlowModelSampling(2.0))
    assert freeze(DiscreteModelSampling("x0")) != freeze(DiscreteModelSampling("eps"))
    assert freeze(ContinuousEDMModelSampling("edm", 0.002, 120.0, 0.5)) != freeze(ContinuousVModelSampling("v", 0.002, 120.0))


def test_every_table_rebuilds_itself_in_place_with_comfyuis_set_parameters():
    """ComfyUI's `set_parameters` on the live sampling object (packs call it on
    `model.get_model_object("model_sampling")`, e.g. WanMoeKSampler on a Wan model): our own
    tables have it, not only compat's subclasses; checked against the schedules' formulas."""
    from comfy_core.models.model_sampling import (ContinuousEDMModelSampling, FlowModelSampling,
                                                  FluxModelSampling, StableCascadeModelSampling)

    flow = FlowModelSampling(shift=1.0)
    flow.set_parameters(shift=5.0, multiplier=1000)
    t = torch.arange(1, 1001, dtype=torch.float32) / 1000
    torch.testing.assert_close(flow.sigmas, 5.0 * t / (1 + 4.0 * t))
    assert flow.shift == 5.0 and flow.multiplier == 1000 and float(flow.timestep(torch.tensor(0.5))) == 500.0
    flow.set_parameters(shift=1.0, timesteps=100, multiplier=1)
    assert flow.sigmas.shape == (100,) and float(flow.timestep(torch.tensor(0.5))) == 0.5

    flux = FluxModelSampling()
    flux.set_parameters(shift=2.0, timesteps=50)
    u = torch.arange(1, 51, dtype=torch.float32) / 50
    torch.testing.assert_close(flux.sigmas, math.exp(2.0) / (math.exp(2.0) + (1 / u - 1)))

    edm = ContinuousEDMModelSampling("v")
    edm.set_parameters(sigma_min=0.01, sigma_max=50.0, sigma_data=0.5)
    assert edm.prediction == "v" and edm.sigma_data == 0.5
    assert float(edm.sigmas[0]) == pytest.approx(0.01) and float(edm.sigmas[-1]) == pytest.approx(50.0)

    cascade = StableCascadeModelSampling()
    before = cascade.sigmas.clone()
    cascade.set_parameters(shift=2.0)
    assert cascade.shift == 2.0 and not torch.equal(cascade.sigmas, before)
    torch.testing.assert_close(cascade.sigmas, StableCascadeModelSampling(shift=2.0).sigmas)

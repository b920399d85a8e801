"""Named DDPM beta schedules (comfy_core/models/beta_schedules.py) and the sigma tables
ModelSampling builds from them or from given betas."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.models.beta_schedules import BetaScheduleError, make_beta_schedule
from comfy_core.models.model_sampling import ModelSampling, ModelSamplingError


def test_named_schedules_match_their_formulas() -> None:
    lin = torch.linspace(0.00085, 0.012, 1000, dtype=torch.float64)
    assert torch.equal(make_beta_schedule("sqrt_linear", 1000, 0.00085, 0.012), lin)
    assert torch.equal(make_beta_schedule("sqrt", 1000, 0.00085, 0.012), lin ** 0.5)
    assert torch.equal(make_beta_schedule("linear", 1000, 0.00085, 0.012),
                       torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=torch.float64) ** 2)
    cos = make_beta_schedule("cosine", 10)
    f = [math.cos((t / 10 + 8e-3) / (1 + 8e-3) * math.pi / 2) ** 2 for t in range(11)]
    assert torch.allclose(cos, torch.tensor([min(1 - f[i + 1] / f[i], 0.999) for i in range(10)], dtype=torch.float64))
    cap = make_beta_schedule("squaredcos_cap_v2", 10)
    g = [math.cos((t / 10 + 0.008) / 1.008 * math.pi / 2) ** 2 for t in range(11)]
    assert torch.allclose(cap, torch.tensor([min(1 - g[i + 1] / g[i], 0.999) for i in range(10)], dtype=torch.float64))
    with pytest.raises(BetaScheduleError, match="unknown schedule 'bogus'"):
        make_beta_schedule("bogus", 10)


def test_model_sampling_from_a_schedule_or_given_betas() -> None:
    betas = torch.linspace(0.00085, 0.012, 1000, dtype=torch.float64)
    ac = torch.cumprod(1 - betas, 0)
    expected = (((1 - ac) / ac) ** 0.5).float()
    named = ModelSampling("eps", beta_schedule="sqrt_linear")
    given = ModelSampling("eps", given_betas=betas[:500])
    assert torch.equal(named.sigmas, expected)
    assert given.num_timesteps == 500 and torch.equal(given.sigmas, expected[:500])
    default = ModelSampling("eps")
    assert len({default.cache_signature(), named.cache_signature(), given.cache_signature()}) == 3
    before = default.cache_signature()
    default.set_sigmas(default.sigmas.double() * 1.01)  # a pack replacing the table changes the key
    assert default.cache_signature() != before
    with pytest.raises(ModelSamplingError, match="unknown schedule"):
        ModelSampling("eps", beta_schedule="bogus")

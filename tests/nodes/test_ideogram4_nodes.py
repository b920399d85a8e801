"""Ideogram4Scheduler (nodes/ideogram4_nodes.py, comfy_core/families/ideogram4/schedule.py): the
logit-normal sigmas against the schedule's equations written here (`statistics.NormalDist`'s probit)
and against diffusers' `_logit_normal_sigmas`, the template's presets, and typed input errors."""
from __future__ import annotations

import math
from statistics import NormalDist

import pytest
import torch

from nodes.errors import NodeInputError
from nodes.ideogram4_nodes import ideogram4_scheduler


def _expected(steps: int, width: int, height: int, mu: float, std: float) -> list[float]:
    """sigma_i = 1 - clamp(1 - logistic(m + std * probit(1 - i / steps))), i = 0..steps, the last 0;
    m = mu + ln(width * height / 512^2) / 2; the clamp is logSNR in [-15, 18]."""
    m = mu + 0.5 * math.log(width * height / 512 ** 2)
    t_min, t_max = 1 / (1 + math.exp(9.0)), 1 / (1 + math.exp(-7.5))
    out = []
    for i in range(steps + 1):
        u = 1.0 - i / steps
        if u >= 1.0:
            t = 0.0
        elif u <= 0.0:
            t = 1.0
        else:
            t = 1.0 - 1.0 / (1.0 + math.exp(-(m + std * NormalDist().inv_cdf(u))))
        out.append(1.0 - min(max(t, t_min), t_max))
    out[-1] = 0.0
    return out


@pytest.mark.parametrize("steps, width, height, mu, std", [(20, 1024, 1024, 0.0, 1.75), (48, 1024, 1024, 0.0, 1.5),
                                                            (12, 768, 1360, 0.5, 1.75), (1, 256, 256, -2.0, 0.1)])
def test_sigmas_are_the_logit_normal_quantiles(steps, width, height, mu, std):
    (sigmas,) = ideogram4_scheduler(steps, width, height, mu, std)
    assert sigmas.dtype == torch.float32 and sigmas.shape == (steps + 1,)
    expected = torch.tensor(_expected(steps, width, height, mu, std), dtype=torch.float32)
    assert torch.allclose(sigmas, expected, atol=1e-6, rtol=0), (sigmas - expected).abs().max()
    assert sigmas[-1] == 0 and bool((sigmas[:-1] > sigmas[1:]).all())
    assert sigmas[0] == pytest.approx(1 - 1 / (1 + math.exp(9.0)), abs=1e-6)  # the clamp's top, not 1


def test_sigmas_are_diffusers_pipeline_schedule():
    from diffusers.pipelines.ideogram4.pipeline_ideogram4 import _logit_normal_sigmas, _resolution_aware_mu

    (sigmas,) = ideogram4_scheduler(20, 1024, 768, 0.25, 1.8375)
    reference = _logit_normal_sigmas(20, _resolution_aware_mu(768, 1024, 0.25), std=1.8375)
    assert torch.equal(sigmas[:-1], reference)  # diffusers' scheduler appends the final 0


def test_bad_inputs_are_typed_errors():
    with pytest.raises(NodeInputError, match="steps"):
        ideogram4_scheduler(0, 1024, 1024, 0.0, 1.75)
    with pytest.raises(NodeInputError, match="width"):
        ideogram4_scheduler(20, 128, 1024, 0.0, 1.75)
    with pytest.raises(NodeInputError, match="std"):
        ideogram4_scheduler(20, 1024, 1024, 0.0, 0.0)

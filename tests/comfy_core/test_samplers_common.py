"""The shared sampler vocabulary: half-log-SNR, seeded default noise, StepDenoiser, multistep loop."""
from __future__ import annotations

import torch

from comfy_core.sampling.noise import default_noise_sampler
from comfy_core.sampling.samplers.common import (StepDenoiser, derivative_multistep, half_log_snr,
                                                 seeded_noise_sampler, sigma_of_half_log_snr)


def test_half_log_snr_is_minus_log_sigma_and_inverts() -> None:
    sigma = torch.tensor([0.03, 1.0, 14.6])
    torch.testing.assert_close(half_log_snr(sigma), -torch.log(sigma))
    torch.testing.assert_close(sigma_of_half_log_snr(half_log_snr(sigma)), sigma)


def test_seeded_noise_sampler_prefers_the_given_one_else_seeds_from_extra_args() -> None:
    x = torch.zeros(2, 3, 4, 4)

    def given(sigma: torch.Tensor, sigma_next: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(x)

    assert seeded_noise_sampler(x, {"seed": 5}, given) is given
    drawn = seeded_noise_sampler(x, {"seed": 5}, None)(None, None)
    assert torch.equal(drawn, default_noise_sampler(x, seed=5)(None, None))
    assert not torch.equal(drawn, default_noise_sampler(x, seed=6)(None, None))


def test_step_denoiser_passes_batch_sigmas_and_extra_args_and_reports_steps() -> None:
    seen: list[tuple[torch.Tensor, dict]] = []

    def model(x: torch.Tensor, sigma: torch.Tensor, **kwargs: object) -> torch.Tensor:
        seen.append((sigma, kwargs))
        return x * 0.5

    reports: list[dict] = []
    x = torch.ones(3, 2, 2, 2)
    sigmas = torch.tensor([2.0, 1.0, 0.0])
    run = StepDenoiser(model, x, {"seed": 1, "cond": "c"}, reports.append)
    out = run.step(x, sigmas, 1)
    assert torch.equal(out, x * 0.5)
    assert torch.equal(seen[0][0], torch.tensor([1.0, 1.0, 1.0])) and seen[0][1] == {"seed": 1, "cond": "c"}
    assert [r["i"] for r in reports] == [1] and reports[0]["sigma_hat"] == sigmas[1]
    run.step(x, sigmas, 0, sigma_hat=torch.tensor(2.5))  # churned: evaluated at sigma_hat, reports both
    assert torch.equal(seen[1][0], torch.full((3,), 2.5))
    assert reports[1]["sigma"] == sigmas[0] and reports[1]["sigma_hat"] == 2.5
    run(x, torch.tensor(0.7))  # an intermediate evaluation is not a step
    assert len(reports) == 2 and StepDenoiser(model, x, None, None).extra_args == {}


def test_derivative_multistep_passes_order_and_bounded_history() -> None:
    calls: list[tuple[int, int, int]] = []

    def advance(x, d, denoised, i, order, history):  # noqa: ANN001, ANN202
        calls.append((i, order, len(history)))
        return x - 0.1 * d

    x = torch.ones(1, 1, 2, 2)
    run = StepDenoiser(lambda x, sigma, **_: torch.zeros_like(x), x, None, None)
    derivative_multistep(run, x, torch.linspace(5.0, 1.0, 7), 3, advance)
    assert calls == [(0, 1, 0), (1, 2, 1), (2, 3, 2), (3, 3, 2), (4, 3, 2), (5, 3, 2)]


def test_sampler_names_import_without_torch() -> None:
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from comfy_core.sampling.samplers.registry import SAMPLER_NAMES; "
            "assert len(SAMPLER_NAMES) == 42; assert 'torch' not in sys.modules, 'torch was imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr

"""Guidance patches that run the model once more (PAG, and SAG / Perp-Neg / skip-layer guidance
through the same helper) call `calc_cond_batch` as ComfyUI's do, `comfy.samplers.calc_cond_batch`:
a host's replacement from the extension points in force, else ours."""
from __future__ import annotations

import torch

from comfy_core import extension_points
from comfy_core.extension_points import ExtensionPoints
from comfy_core.model_patches.pag import PerturbedAttentionGuidance
from comfy_core.sampling import cond_batch


class _Model:
    def apply_model(self, *args, **kwargs):  # never reached: the replacement answers
        raise AssertionError("the built-in batching ran")


def _args() -> dict:
    return {"denoised": torch.zeros(1, 4, 2, 2), "cond_denoised": torch.ones(1, 4, 2, 2),
            "model": _Model(), "model_options": {}, "cond": [{"cross_attn": torch.zeros(1, 1, 8)}],
            "input": torch.zeros(1, 4, 2, 2), "sigma": torch.ones(1)}


def test_the_replacement_in_force_runs_the_perturbed_pass() -> None:
    calls = []

    def replacement(apply_model, conds, x, sigma, options):
        calls.append(options)
        return [torch.full_like(x, 0.25)]

    with extension_points.use(ExtensionPoints(calc_cond_batch=replacement)):
        assert cond_batch.calc_cond_batch_in_force() is replacement
        out = PerturbedAttentionGuidance(2.0)(_args())
    assert len(calls) == 1 and "transformer_options" in calls[0]  # PAG's identity attention went along
    assert torch.equal(out, torch.full((1, 4, 2, 2), 1.5))  # 0 + (1 - 0.25) * 2


def test_without_a_replacement_the_built_in_is_in_force() -> None:
    assert cond_batch.calc_cond_batch_in_force() is cond_batch.calc_cond_batch

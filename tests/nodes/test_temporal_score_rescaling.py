"""TemporalScoreRescaling node (today's ComfyUI, nodes_eps.py) on the tiny SD1 model."""
from __future__ import annotations

import pytest
import torch

from nodes.errors import NodeInputError
from nodes.temporal_score_rescaling import temporal_score_rescaling
from tests.nodes.model_patch_helpers import sample, snapshot


def test_tsr_is_a_post_cfg_hook_on_a_clone_that_changes_sampling(sd1_with_prompts):
    from comfy_core.model_patches.temporal_score_rescaling import TemporalScoreRescaling

    model = sd1_with_prompts.model
    before = snapshot(model)
    patched = temporal_score_rescaling(model, 0.5, 1.0)[0]
    assert snapshot(model) == before and patched is not model
    assert patched.model_options["sampler_post_cfg_function"][-1] == TemporalScoreRescaling(0.5, 1.0)
    plain = sample(model, sd1_with_prompts, steps=2, size=8)
    rescaled = sample(patched, sd1_with_prompts, steps=2, size=8)
    assert torch.isfinite(rescaled).all() and not torch.allclose(rescaled, plain)
    # k = 1 is the identity: bit for bit the plain run
    assert torch.equal(sample(temporal_score_rescaling(model, 1.0, 1.0)[0], sd1_with_prompts, steps=2, size=8), plain)


def test_tsr_refuses_bad_settings(sd1_with_prompts):
    with pytest.raises(NodeInputError, match="tsr_k"):
        temporal_score_rescaling(sd1_with_prompts.model, 0.0, 1.0)
    with pytest.raises(NodeInputError, match="tsr_sigma"):
        temporal_score_rescaling(sd1_with_prompts.model, 0.9, float("nan"))

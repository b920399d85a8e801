"""LoraSave (nodes/lora_extract.py): a LoRA extracted from ModelMergeSubtract / CLIPMergeSubtract
outputs, saved under ComfyUI's generic keys, which our LoRA loader maps back to every weight:
applied to the base it reproduces the fine-tune (full_diff, to fp16) or approximates it (standard)."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from comfy_core.loading import load_checkpoint
from comfy_core.lora import load_lora_for_models
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.lora_extract import lora_save
from nodes.model_merging import clip_merge_subtract, model_merge_subtract
from tests.fixtures.checkpoints import write_tiny_checkpoint

KEY = "diffusion_model.input_blocks.1.0.in_layers.2.weight"  # a 3x3 convolution
CLIP_KEY = "clip_l.transformer.text_model.encoder.layers.0.mlp.fc1.weight"


@pytest.fixture(scope="module")
def pair(tiny_sd1_ckpt, tmp_path_factory):
    tuned = write_tiny_checkpoint(tmp_path_factory.mktemp("tuned") / "tuned.safetensors", "sd1", seed=3)
    base = load_checkpoint(tiny_sd1_ckpt, output_vae=False)[:2]
    other = load_checkpoint(tuned, output_vae=False)[:2]
    (model_diff,) = model_merge_subtract(other[0], base[0], 1.0)
    (clip_diff,) = clip_merge_subtract(other[1], base[1], 1.0)
    return base, other, model_diff, clip_diff


def _extract(env, in_node, rank, lora_type, model_diff, clip_diff, name):
    with in_node("LoraSave", "7", env=env):
        assert lora_save(f"loras/{name}", rank, lora_type, True, model_diff, clip_diff) == {}
    path = env.output_dir / "loras" / f"{name}_00001_.safetensors"
    return load_file(path)


def _weights(patcher):
    with patcher.applied() as module:
        return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_full_diff_on_the_base_reproduces_the_tuned_model(pair, tmp_path, in_node):
    (m0, c0), (m1, c1), model_diff, clip_diff = pair
    env = Environment.rooted_at(tmp_path)
    tensors = _extract(env, in_node, 8, "full_diff", model_diff, clip_diff, "full")
    assert all(t.dtype == torch.float16 for t in tensors.values())
    assert f"{KEY[:-len('.weight')]}.diff" in tensors and f"text_encoders.{CLIP_KEY[:-len('.weight')]}.diff" in tensors
    model, clip, report = load_lora_for_models(m0, c0, tensors, 1.0, 1.0, "full")
    assert report.unmatched == []  # every key maps back: UNet, text encoders, biases
    got, want = _weights(model), m1.model_state_dict()
    diff = want[KEY] - m0.model_state_dict()[KEY]
    torch.testing.assert_close(got[KEY], m0.model_state_dict()[KEY] + diff.half().float())
    torch.testing.assert_close(_weights(clip.patcher)[CLIP_KEY], c1.patcher.model_state_dict()[CLIP_KEY],
                               atol=2e-3, rtol=2e-3)


def test_standard_lora_is_the_low_rank_factors_of_the_difference(pair, tmp_path, in_node):
    (m0, c0), (m1, _), model_diff, _ = pair
    env = Environment.rooted_at(tmp_path)
    tensors = _extract(env, in_node, 4, "standard", model_diff, None, "low")
    module = KEY[:-len(".weight")]
    up, down = tensors[f"{module}.lora_up.weight"], tensors[f"{module}.lora_down.weight"]
    out_ch, in_ch = m0.model_state_dict()[KEY].shape[:2]
    assert up.shape == (out_ch, 4, 1, 1) and down.shape == (4, in_ch, 3, 3)
    assert f"{module}.diff_b" in tensors  # bias_diff
    model, _, report = load_lora_for_models(m0, None, tensors, 1.0, 0.0, "low")
    assert report.unmatched == []
    delta = (up.float().flatten(1) @ down.float().flatten(1)).reshape(m0.model_state_dict()[KEY].shape)
    torch.testing.assert_close(_weights(model)[KEY], m0.model_state_dict()[KEY] + delta)
    # A better approximation of the real difference than nothing, and better with more rank.
    target = m1.model_state_dict()[KEY] - m0.model_state_dict()[KEY]
    full = _extract(env, in_node, 4096, "standard", model_diff, None, "high")
    full_delta = (full[f"{module}.lora_up.weight"].float().flatten(1)
                  @ full[f"{module}.lora_down.weight"].float().flatten(1)).reshape(target.shape)
    assert (full_delta - target).norm() < (delta - target).norm() < target.norm()


def test_nothing_connected_writes_nothing_and_bad_inputs_are_typed(pair, tmp_path, in_node):
    env = Environment.rooted_at(tmp_path)
    with in_node("LoraSave", "7", env=env):
        assert lora_save("loras/none", 8, "standard", True) == {}
        with pytest.raises(NodeInputError, match="lora_type"):
            lora_save("loras/x", 8, "lokr", True, pair[2])
        with pytest.raises(NodeInputError, match="rank"):
            lora_save("loras/x", 0, "standard", True, pair[2])
    assert not (env.output_dir / "loras").exists()

"""LoraLoader with a LoRA that matches the model only in part, as ComfyUI runs it: the node returns
the model and CLIP with the matching part applied, and the keys it skipped are warnings in the
log the editor's Logs tab shows (web/routes_logs.py LogBuffer on the root logger)."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from comfy_core.patching import ClipPatcher, ModelPatcher
from graph.context import NodeContext, reset_current, set_current
from nodes.environment import Environment
from nodes.patching import lora_loader
from web.routes_logs import LogBuffer

UNET_Q = "diffusion_model.input_blocks.1.1.to_q.weight"
UNET_K = "diffusion_model.input_blocks.1.1.to_k.weight"
CLIP_Q = "clip_l.transformer.q_proj.weight"


def tiny_model() -> ModelPatcher:
    root = nn.Module()
    root.diffusion_model = nn.Module()
    blocks = []
    for _ in range(2):
        attn = nn.Module()
        attn.to_q, attn.to_k = nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False)
        blocks.append(nn.ModuleList([nn.Identity(), attn]))
    root.diffusion_model.input_blocks = nn.ModuleList(blocks)
    return ModelPatcher(root)


def tiny_clip() -> ClipPatcher:
    encoders = nn.Module()
    encoders.clip_l = nn.Module()
    encoders.clip_l.transformer = nn.Module()
    encoders.clip_l.transformer.q_proj = nn.Linear(8, 8, bias=False)
    return ClipPatcher(encoders)


G = torch.Generator().manual_seed(0)
MATCHING = {
    "lora_unet_input_blocks_1_1_to_q.lora_up.weight": torch.randn(8, 2, generator=G),
    "lora_unet_input_blocks_1_1_to_q.lora_down.weight": torch.randn(2, 8, generator=G),
    "lora_te_q_proj.lora_up.weight": torch.randn(8, 2, generator=G),
    "lora_te_q_proj.lora_down.weight": torch.randn(2, 8, generator=G),
}
NOT_MATCHING = {
    # a layer of a wider model: 12 inputs, not 8
    "lora_unet_input_blocks_1_1_to_k.lora_up.weight": torch.randn(8, 2, generator=G),
    "lora_unet_input_blocks_1_1_to_k.lora_down.weight": torch.randn(2, 12, generator=G),
    # layers this model does not have
    "lora_unet_middle_block_1_proj_in.lora_up.weight": torch.randn(8, 2, generator=G),
    "lora_unet_middle_block_1_proj_in.lora_down.weight": torch.randn(2, 8, generator=G),
}


@pytest.fixture
def env(tmp_path):
    environment = Environment.rooted_at(tmp_path)
    loras = tmp_path / "models" / "loras"
    loras.mkdir(parents=True, exist_ok=True)
    save_file({**MATCHING, **NOT_MATCHING}, str(loras / "partial.safetensors"))
    save_file(MATCHING, str(loras / "matching.safetensors"))
    save_file(NOT_MATCHING, str(loras / "other_model.safetensors"))
    token = set_current(NodeContext("p1", "5", "5", None, environment))
    yield environment
    reset_current(token)


@pytest.fixture
def logs_tab():
    buffer = LogBuffer(SimpleNamespace(loop=None))
    root = logging.getLogger()
    root.addHandler(buffer)
    try:
        yield buffer
    finally:
        root.removeHandler(buffer)


def weight(patcher, key):
    with patcher.applied() as module:
        return dict(module.named_parameters())[key].detach().clone()


def test_a_partly_matching_lora_runs_with_its_matching_part_and_warns(env, logs_tab):
    model, clip = tiny_model(), tiny_clip()
    got_model, got_clip = lora_loader(model, clip, "partial.safetensors", 0.8, 0.5)
    want_model, want_clip = lora_loader(model, clip, "matching.safetensors", 0.8, 0.5)
    for key in (UNET_Q, UNET_K):
        assert torch.equal(weight(got_model, key), weight(want_model, key))
    assert torch.equal(weight(got_clip, CLIP_Q), weight(want_clip, CLIP_Q))
    assert not torch.equal(weight(got_model, UNET_Q), weight(model, UNET_Q))
    assert torch.equal(weight(got_model, UNET_K), weight(model, UNET_K))
    lines = [entry["m"] for entry in logs_tab.entries]
    for key in NOT_MATCHING:
        if "middle_block" in key:
            assert f"lora key not loaded: {key}\n" in lines
    assert any(UNET_K in line and "partial.safetensors" in line for line in lines)


def test_a_lora_of_another_model_runs_and_changes_nothing(env, logs_tab):
    model, clip = tiny_model(), tiny_clip()
    got_model, got_clip = lora_loader(model, clip, "other_model.safetensors", 1.0, 1.0)
    assert got_model.patches == {} and got_clip.patches == {}
    assert torch.equal(weight(got_model, UNET_K), weight(model, UNET_K))
    assert any("other_model.safetensors" in entry["m"] and "none of its 4 keys" in entry["m"]
               for entry in logs_tab.entries)

"""LoraLoader, LoraLoaderModelOnly and SetAttentionBackend as nodes: ComfyUI names and inputs,
clones returned (inputs never mutated), validation-time errors for unavailable backends."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from comfy_core.patching import ClipPatcher, ModelPatcher
from graph.context import NodeContext, reset_current, set_current
from graph.native import Input, Output, node, spec_of
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.patching import (
    lora_loader,
    lora_loader_model_only,
    set_attention_backend,
    set_vae_attention_backend,
)
from comfy_core.patching import VaePatcher


class Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.to_q = nn.Linear(8, 8, bias=False)


def tiny_model() -> ModelPatcher:
    root = nn.Module()
    root.diffusion_model = nn.Module()
    root.diffusion_model.input_blocks = nn.ModuleList([nn.ModuleList([nn.Identity(), Attn()]) for _ in range(2)])
    return ModelPatcher(root)


def tiny_clip() -> ClipPatcher:
    encoders = nn.Module()
    encoders.clip_l = nn.Module()
    encoders.clip_l.transformer = nn.Module()
    encoders.clip_l.transformer.q_proj = nn.Linear(8, 8, bias=False)
    return ClipPatcher(encoders)


@pytest.fixture
def env(tmp_path):
    environment = Environment.rooted_at(tmp_path)
    loras = tmp_path / "models" / "loras"
    loras.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    save_file({
        "lora_unet_input_blocks_1_1_to_q.lora_up.weight": torch.randn(8, 2, generator=g),
        "lora_unet_input_blocks_1_1_to_q.lora_down.weight": torch.randn(2, 8, generator=g),
        "lora_te_q_proj.lora_up.weight": torch.randn(8, 2, generator=g),
        "lora_te_q_proj.lora_down.weight": torch.randn(2, 8, generator=g),
    }, str(loras / "style.safetensors"))
    (loras / "broken.safetensors").write_bytes(b"not a safetensors file")
    token = set_current(NodeContext("p1", "5", "5", None, environment))
    yield environment
    reset_current(token)


def weight(patcher, key):
    with patcher.applied() as module:
        return dict(module.named_parameters())[key].detach().clone()


UNET_Q = "diffusion_model.input_blocks.1.1.to_q.weight"
CLIP_Q = "clip_l.transformer.q_proj.weight"


def test_lora_loader_returns_patched_clones(env):
    model, clip = tiny_model(), tiny_clip()
    before_m, before_c = weight(model, UNET_Q), weight(clip, CLIP_Q)
    new_model, new_clip = lora_loader(model, clip, "style.safetensors", 1.0, 0.5)
    assert new_model is not model and new_clip is not clip
    assert new_model.is_clone(model) and model.patches == {} and clip.patches == {}
    assert not torch.equal(weight(new_model, UNET_Q), before_m)
    assert not torch.equal(weight(new_clip, CLIP_Q), before_c)
    assert torch.equal(weight(model, UNET_Q), before_m)


def test_lora_loader_model_only_and_zero_strengths(env):
    model, clip = tiny_model(), tiny_clip()
    (only,) = lora_loader_model_only(model, "style.safetensors", 0.8)
    assert list(only.patches) == [UNET_Q]
    assert lora_loader(model, clip, "style.safetensors", 0.0, 0.0) == (model, clip)


def test_lora_loader_lists_files_and_reports_bad_ones(env):
    spec = spec_of(lora_loader)
    assert spec.input("lora_name").combo_values(env) == ["broken.safetensors", "style.safetensors"]
    assert [o.type for o in spec.outputs] == ["MODEL", "CLIP"]
    with pytest.raises(NodeInputError, match="input 'lora_name' expected a file in the loras folders"):
        lora_loader(tiny_model(), tiny_clip(), "missing.safetensors", 1.0, 1.0)
    with pytest.raises(NodeInputError, match="input 'lora_name' expected a readable LoRA file .*received 'broken.safetensors'"):
        lora_loader(tiny_model(), tiny_clip(), "broken.safetensors", 1.0, 1.0)
    with pytest.raises(NodeInputError, match="input 'model' expected a MODEL object"):
        lora_loader("not a model", tiny_clip(), "style.safetensors", 1.0, 1.0)


def test_set_attention_backend_returns_a_clone():
    model = tiny_model()
    (clone,) = set_attention_backend(model, "sub_quadratic")
    assert clone is not model and clone.attention_choice().name == "sub_quadratic"
    assert model.attention_choice().name == "sdpa"
    vae = VaePatcher(nn.Linear(2, 2))
    (vae_clone,) = set_vae_attention_backend(vae, "split")
    assert vae_clone.attention_choice().name == "split" and vae.attention_choice().name == "sdpa"
    with pytest.raises(NodeInputError, match="input 'vae' expected a VAE"):
        set_vae_attention_backend(model.model, "split")


@node("TestModelSource", outputs=[Output("MODEL")])
def _source() -> tuple:
    return (tiny_model(),)


@node("TestModelSink", inputs=[Input("model", "MODEL")], output_node=True)
def _sink(model) -> tuple:
    return ()


def _registry() -> Registry:
    registry = Registry()
    for fn in (_source, _sink, set_attention_backend):
        registry.add_native(fn)
    return registry


def _prompt(backend: str) -> dict:
    return {"1": {"class_type": "TestModelSource", "inputs": {}},
            "2": {"class_type": "SetAttentionBackend", "inputs": {"model": ["1", 0], "backend": backend}},
            "3": {"class_type": "TestModelSink", "inputs": {"model": ["2", 0]}}}


async def test_unavailable_backend_fails_validation_naming_what_is_missing():
    try:
        import xformers.ops  # noqa: F401
        pytest.skip("xformers is importable here")
    except Exception:
        pass
    registry = _registry()
    ok = await validate_prompt(_prompt("naive"), registry)
    assert ok.ok, ok.node_errors
    bad = await validate_prompt(_prompt("xformers"), registry)
    assert not bad.ok
    details = " ".join(e["details"] for e in bad.node_errors["2"]["errors"])
    assert "xformers" in details and "install" in details
    unknown = await validate_prompt(_prompt("flash9"), registry)
    assert not unknown.ok and "unknown attention backend" in str(unknown.node_errors["2"])


def test_backend_combo_lists_only_what_runs_here():
    info = _registry().object_info()["SetAttentionBackend"]
    options = info["input"]["required"]["backend"][0]
    assert "sdpa" in options and "sub_quadratic" in options and "naive" in options
    try:
        import xformers.ops  # noqa: F401
    except Exception:
        assert "xformers" not in options

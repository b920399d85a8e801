"""LoraLoaderBypass / LoraLoaderBypassModelOnly (today's ComfyUI's comfy_extras/nodes_lora_debug.py):
the LoRA computed beside each layer at forward time. Its output equals LoraLoader's merged weights
numerically; the base weights are never written; the bypass is data on the clone only."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from comfy_core.patching import ClipPatcher, ModelPatcher
from graph.context import NodeContext, reset_current, set_current
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.lora_bypass import lora_loader_bypass, lora_loader_bypass_model_only
from nodes.patching import lora_loader, lora_loader_model_only


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.to_q = nn.Linear(8, 8, bias=True)
        self.proj_in = nn.Conv2d(4, 6, 3, padding=1)
        self.proj_out = nn.Conv2d(6, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, 4, H, W]
        h = self.proj_in(x)  # [B, 6, H, W]
        h = self.proj_out(h)  # [B, 4, H, W]
        return self.to_q(h.flatten(2).transpose(1, 2).repeat(1, 1, 2))  # [B, HW, 8]


def tiny_model() -> ModelPatcher:
    torch.manual_seed(0)
    root = nn.Module()
    root.diffusion_model = nn.Module()
    root.diffusion_model.input_blocks = nn.ModuleList([nn.ModuleList([nn.Identity(), Block()]) for _ in range(2)])
    return ModelPatcher(root)


def tiny_clip() -> ClipPatcher:
    torch.manual_seed(1)
    encoders = nn.Module()
    encoders.clip_l = nn.Module()
    encoders.clip_l.transformer = nn.Module()
    encoders.clip_l.transformer.q_proj = nn.Linear(8, 8, bias=False)
    return ClipPatcher(encoders)


LAYER = "lora_unet_input_blocks_1_1"


@pytest.fixture
def env(tmp_path):
    environment = Environment.rooted_at(tmp_path)
    loras = tmp_path / "models" / "loras"
    loras.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.3  # noqa: E731
    save_file({
        # plain LoRA with alpha on a linear
        f"{LAYER}_to_q.lora_up.weight": r(8, 2), f"{LAYER}_to_q.lora_down.weight": r(2, 8),
        f"{LAYER}_to_q.alpha": torch.tensor(1.0),
        # LoCon on a 3x3 conv (the kernel in `down`), and one with a Tucker `mid`
        f"{LAYER}_proj_in.lora_up.weight": r(6, 2, 1, 1), f"{LAYER}_proj_in.lora_down.weight": r(2, 4, 3, 3),
        # 1x1 conv
        f"{LAYER}_proj_out.lora_up.weight": r(4, 3, 1, 1), f"{LAYER}_proj_out.lora_down.weight": r(3, 6, 1, 1),
        f"{LAYER}_proj_out.alpha": torch.tensor(6.0),
        "lora_te_q_proj.lora_up.weight": r(8, 2), "lora_te_q_proj.lora_down.weight": r(2, 8),
    }, str(loras / "style.safetensors"))
    save_file({
        f"{LAYER}_proj_in.lora_up.weight": r(6, 2, 1, 1), f"{LAYER}_proj_in.lora_down.weight": r(2, 4, 1, 1),
        f"{LAYER}_proj_in.lora_mid.weight": r(2, 2, 3, 3),
        f"{LAYER}_to_q.hada_w1_a": r(8, 2), f"{LAYER}_to_q.hada_w1_b": r(2, 8),
        f"{LAYER}_to_q.hada_w2_a": r(8, 2), f"{LAYER}_to_q.hada_w2_b": r(2, 8),
    }, str(loras / "tucker_loha.safetensors"))
    token = set_current(NodeContext("p1", "5", "5", None, environment))
    yield environment
    reset_current(token)


def run(patcher: ModelPatcher, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), patcher.applied() as module:
        return module.diffusion_model.input_blocks[1][1](x)


def weights(patcher) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in patcher.model.state_dict().items()}


X = torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("lora", ["style.safetensors", "tucker_loha.safetensors"])
@pytest.mark.parametrize("strength", [1.0, -0.7])
def test_bypass_equals_the_merged_lora_and_leaves_the_weights(env, lora, strength):
    model = tiny_model()
    before = weights(model)
    base = run(model, X)
    (merged,) = lora_loader_model_only(model, lora, strength)
    (bypass,) = lora_loader_bypass_model_only(model, lora, strength)
    want, got = run(merged, X), run(bypass, X)
    assert not torch.allclose(want, base, atol=1e-3)  # the LoRA changes the output ...
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)  # ... and bypass gives the merged result
    assert bypass.patches == {} and bypass.injections and not model.injections
    with bypass.applied() as module:  # while the bypass runs, the base weights are the file's own
        assert all(torch.equal(v, before[k]) for k, v in module.state_dict().items())
    assert all(torch.equal(v, before[k]) for k, v in model.model.state_dict().items())
    assert torch.equal(run(model, X), base)  # hooks gone after the run: the input model unchanged


def test_bypass_chains_and_clip_side(env):
    model, clip = tiny_model(), tiny_clip()
    m1, c1 = lora_loader_bypass(model, clip, "style.safetensors", 0.5, 0.8)
    (m2,) = lora_loader_bypass_model_only(m1, "tucker_loha.safetensors", 1.0)
    mm1, cm1 = lora_loader(model, clip, "style.safetensors", 0.5, 0.8)
    (mm2,) = lora_loader_model_only(mm1, "tucker_loha.safetensors", 1.0)
    assert torch.allclose(run(m2, X), run(mm2, X), atol=1e-5, rtol=1e-5)
    t = torch.randn(3, 8, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        with cm1.applied() as enc:
            want = enc.clip_l.transformer.q_proj(t)
        with c1.applied() as enc:
            got = enc.clip_l.transformer.q_proj(t)
            assert torch.equal(enc.clip_l.transformer.q_proj.weight, clip.model.clip_l.transformer.q_proj.weight)
    assert not torch.allclose(got, t @ clip.model.clip_l.transformer.q_proj.weight.T, atol=1e-3)
    assert torch.allclose(got, want, atol=1e-5)


def test_zero_strengths_return_the_inputs_and_signatures_differ(env):
    model, clip = tiny_model(), tiny_clip()
    assert lora_loader_bypass(model, clip, "style.safetensors", 0.0, 0.0) == (model, clip)
    (a,) = lora_loader_bypass_model_only(model, "style.safetensors", 1.0)
    (b,) = lora_loader_bypass_model_only(model, "style.safetensors", 1.0)
    (c,) = lora_loader_bypass_model_only(model, "style.safetensors", 0.5)
    assert a.cache_signature() is not None and a.cache_signature() == b.cache_signature()
    assert a.cache_signature() != c.cache_signature() != model.cache_signature()


def test_bad_inputs_are_input_errors(env):
    with pytest.raises(NodeInputError, match="lora_name"):
        lora_loader_bypass_model_only(tiny_model(), "missing.safetensors", 1.0)
    with pytest.raises(NodeInputError, match="model"):
        lora_loader_bypass_model_only("not a model", "style.safetensors", 1.0)

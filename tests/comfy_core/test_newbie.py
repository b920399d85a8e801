"""NewBie-Image through the family registry: detection from headers (told apart from Lumina 2 and
Z-Image by the pooled-text projection), the pooled-text modulation against its equations (ComfyUI's
`comfy/ldm/lumina/model.py` with `clip_text_dim`) on weights loaded from a ComfyUI-named split file,
the conditioning (`pooled_output` -> `clip_text_pooled`), the family's sampling (ComfyUI's
`supported_models.Lumina2`) and a 2-step sample."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.zimage.nextdit import NextDiT
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.lumina2_files import CAP_WIDTH, tiny_lumina2_state_dict
from tests.fixtures.template_models_newbie import POOLED_WIDTH, tiny_newbie_state_dict

UNET = "model.diffusion_model."


def _header(state: dict) -> dict:
    return {k: SimpleNamespace(shape=tuple(v.shape), dtype="F32") for k, v in state.items()}


def test_detected_as_newbie_never_as_lumina2():
    registry = default_registry()
    state = tiny_newbie_state_dict(prefix=UNET)
    detection = registry.detect(_header(state), "newbie.safetensors")
    assert detection.family.name == "newbie"
    config = detection.config
    assert (config.dim, config.n_heads, config.n_kv_heads, config.axes_dims) == (48, 4, 2, (4, 4, 4))
    assert (config.clip_text_dim, config.adaln_dim, config.time_scale, config.rope_theta) == (POOLED_WIDTH, 48, 1.0,
                                                                                              10000.0)
    assert config.comfy_unet_config()["clip_text_dim"] == POOLED_WIDTH
    assert registry.detect_diffusion_model(_header(state)).family.name == "newbie"
    bare = {k[len(UNET):]: v for k, v in state.items()}
    assert registry.detect_diffusion_model(_header({UNET + k: v for k, v in bare.items()})).family.name == "newbie"
    lumina = tiny_lumina2_state_dict(prefix=UNET)
    assert registry.detect_diffusion_model(_header(lumina)).family.name == "lumina2"


def test_inconsistent_time_text_embed_is_refused():
    from comfy_core.families.newbie.dit import NewBieConfig
    from comfy_core.families.lumina2 import lumina2_axes
    from comfy_core.families.zimage.nextdit import NextDiTConfigError

    state = tiny_newbie_state_dict()
    state["time_text_embed.1.weight"] = torch.zeros(48, 48)
    with pytest.raises(NextDiTConfigError, match="time_text_embed"):
        NewBieConfig.detect_newbie(_header(state), "", axes_split=lumina2_axes, axes_lens=(300, 512, 512),
                                   rope_theta=1e4, time_scale=1.0, pad_multiple=32)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    state = tiny_newbie_state_dict(seed=1)
    path = save(state, tmp_path_factory.mktemp("newbie") / "newbie_tiny.safetensors")
    return load_diffusion_model(path), state


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _timestep_embedding(t: torch.Tensor, dim: int = 256) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-torch.log(torch.tensor(10000.0)) * torch.arange(half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class _GivenVector(NextDiT):
    """The plain NextDiT with a modulation vector set from outside (the reference for the rest)."""

    vec: torch.Tensor

    def modulation_input(self, timesteps, x, kwargs):
        return self.vec


def _expected_vector(state: dict, sigma: torch.Tensor, pooled: torch.Tensor | None) -> torch.Tensor:
    """ComfyUI's equations: t_emb = mlp(sinusoid((1 - sigma) * 1)); proj = linear(rms(pooled)) or
    zeros; vec = linear(silu([t_emb ; proj]))."""
    emb = _timestep_embedding(1.0 - sigma)
    t_emb = F.linear(F.silu(F.linear(emb, state["t_embedder.mlp.0.weight"], state["t_embedder.mlp.0.bias"])),
                     state["t_embedder.mlp.2.weight"], state["t_embedder.mlp.2.bias"])
    if pooled is None:
        proj = torch.zeros(sigma.shape[0], POOLED_WIDTH)
    else:
        proj = F.linear(_rms(pooled, state["clip_text_pooled_proj.0.weight"]), state["clip_text_pooled_proj.1.weight"],
                        state["clip_text_pooled_proj.1.bias"])
    return F.linear(F.silu(torch.cat([t_emb, proj], dim=-1)), state["time_text_embed.1.weight"],
                    state["time_text_embed.1.bias"])


@pytest.mark.parametrize("with_pooled", [True, False])
def test_pooled_text_modulation_matches_the_equations(loaded, with_pooled):
    model, state = loaded
    network = model.model.diffusion_model
    from comfy_core.families.newbie.dit import NewBieNextDiT

    # ComfyUI's class is its Lumina NextDiT (`comfyui_name`)
    assert isinstance(network, NewBieNextDiT) and type(network).__name__ == "NextDiT"
    assert network.clip_text_dim == POOLED_WIDTH
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 16, 6, 10, generator=gen)
    context = torch.randn(2, 7, CAP_WIDTH, generator=gen)
    pooled = torch.randn(2, POOLED_WIDTH, generator=gen) if with_pooled else None
    sigma = torch.tensor([0.7, 0.2])
    vec = _expected_vector(state, sigma, pooled)
    with torch.no_grad():
        assert (network.modulation_input(sigma, x, {"clip_text_pooled": pooled}) - vec).abs().max() < 1e-5
        reference = _GivenVector(network.config)
        reference.load_state_dict({k: v for k, v in network.state_dict().items()
                                   if not k.startswith(("clip_text_pooled_proj.", "time_text_embed."))})
        reference.vec = vec
        kwargs = {"clip_text_pooled": pooled} if with_pooled else {}
        ours = network(x, sigma, context, **kwargs)
        theirs = reference(x, sigma, context)
    assert ours.shape == x.shape
    assert (ours - theirs).abs().max() < 1e-5


def test_pooled_text_changes_the_prediction(loaded):
    network = loaded[0].model.diffusion_model
    gen = torch.Generator().manual_seed(4)
    x, context = torch.randn(1, 16, 8, 8, generator=gen), torch.randn(1, 5, CAP_WIDTH, generator=gen)
    with torch.no_grad():
        a = network(x, torch.tensor([0.5]), context, clip_text_pooled=torch.randn(1, POOLED_WIDTH, generator=gen))
        b = network(x, torch.tensor([0.5]), context, clip_text_pooled=torch.randn(1, POOLED_WIDTH, generator=gen))
    assert (a - b).abs().max() > 1e-4


def test_conditions_pass_the_pooled_output():
    family = default_registry().get("newbie")
    pooled, mask = torch.randn(1, POOLED_WIDTH), torch.tensor([[1, 1, 1, 0]])
    out = family.conditioning.extra_conds(None, pooled_output=pooled, attention_mask=mask,
                                          cross_attn=torch.zeros(1, 4, CAP_WIDTH))
    assert out["clip_text_pooled"] is pooled and out["num_tokens"] == 3 and out["attention_mask"] is mask
    assert "clip_text_pooled" not in family.conditioning.extra_conds(None, cross_attn=torch.zeros(1, 4, CAP_WIDTH))


def test_family_policy_and_two_step_sample(loaded):
    from comfy_core.models.model_sampling import FlowModelSampling
    from comfy_core.sampling.ksampler import sample
    from nodes.model_sampling_nodes import model_sampling_aura_flow

    patcher = loaded[0]
    model = patcher.model
    assert type(model.model_sampling) is FlowModelSampling and model.model_sampling.shift == 6.0
    assert model.model_sampling.multiplier == 1.0 and model.latent_format.channels == 16
    assert type(model.model_config).__name__ == "Lumina2"
    assert model.model_config.unet_config["clip_text_dim"] == POOLED_WIDTH
    gen = torch.Generator().manual_seed(7)
    positive = [[torch.randn(1, 6, CAP_WIDTH, generator=gen), {"pooled_output": torch.randn(1, POOLED_WIDTH,
                                                                                            generator=gen)}]]
    negative = [[torch.randn(1, 3, CAP_WIDTH, generator=gen), {"pooled_output": torch.randn(1, POOLED_WIDTH,
                                                                                            generator=gen)}]]
    noise = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    (shifted,) = model_sampling_aura_flow(patcher, 6.0)
    out = [sample(m, noise, 2, 4.0, "res_multistep", "simple", positive, negative, torch.zeros(1, 16, 8, 8))
           for m in (patcher, shifted)]
    assert out[0].shape == (1, 16, 8, 8) and torch.isfinite(out[0]).all()
    assert (out[0] - out[1]).abs().max() < 1e-6


def test_dual_clip_loader_type_newbie_builds_gemma3_and_jina(tmp_path):
    """DualCLIPLoader type "newbie" (either file order): Gemma 3's next-to-last block states as the
    conditioning, Jina's mean-pooled text as `pooled_output` (ComfyUI's NewBieClipModel)."""
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.template_models_newbie import JINA_WIDTH, write_gemma3_4b_file, write_jina_file

    gemma = write_gemma3_4b_file(tmp_path / "gemma_3_4b_it_bf16.safetensors")
    jina = write_jina_file(tmp_path / "jina_clip_v2_bf16.safetensors")
    clip = load_text_encoders([jina, gemma], "newbie")
    module = clip.cond_stage_model
    assert type(module).__name__ == "NewBieClipModel" and set(module.slots) == {"gemma3_4b", "jina_clip_2"}
    tokens = clip.tokenize("a girl with long silver hair")
    assert set(tokens) == {"gemma", "jina"}
    assert tokens["jina"][0][0] == (0, 1.0) and tokens["jina"][0][-1] == (2, 1.0)  # <s> ... </s>
    assert tokens["gemma"][0][0][0] == 2  # Gemma's <bos>
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    assert cond.shape == (1, len(tokens["gemma"][0]), CAP_WIDTH) and pooled.shape == (1, JINA_WIDTH)
    with torch.no_grad():
        gemma_tower, jina_tower = module.encoder("gemma3_4b"), module.encoder("jina_clip_2")
        ids = torch.tensor([[t for t, _ in tokens["gemma"][0]]])
        expected = gemma_tower.encode_ids(ids, layer_idx=-2, layer_norm_hidden=False)
        _, jina_pooled, _ = jina_tower([[t for t, _ in tokens["jina"][0]]])
    assert (cond.float() - expected).abs().max() < 1e-4
    assert (pooled.float() - jina_pooled).abs().max() < 1e-4
    weighted = clip.tokenize("a girl, (silver hair:1.3)")  # Gemma 3's tokenizer ignores weights (ComfyUI's)
    assert all(w == 1.0 for _, w in weighted["gemma"][0])
    assert any(w == pytest.approx(1.3) for _, w in weighted["jina"][0])
    # the same set from the other file order
    again = load_text_encoders([gemma, jina], "newbie").encode_from_tokens(tokens, return_pooled=True)
    assert torch.equal(again[0], cond) and torch.equal(again[1], pooled)

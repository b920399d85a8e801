"""The Anima family (comfy_core/families/anima): detection from names and shapes, the Cosmos-Predict2
DiT against diffusers' `CosmosTransformer3DModel` (weights renamed by diffusers' own single-file
converter) on tiny random weights loaded from a file with ComfyUI's names, the LLM adapter against
its equations written here, the text-encoder set (Qwen3-0.6B states + the T5 ids and weights), the
conditioning (`model_base.Anima.extra_conds`), the family's policy, LoRA spellings and a sample."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.anima import AnimaConditions
from comfy_core.families.anima.dit import AnimaConfig, AnimaConfigError, AnimaInputError, rope_ratios
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.template_models_anima import (ADAPTER_WIDTH, TEXT_WIDTH, TINY_WIDTH, tiny_anima_config,
                                                  tiny_anima_state_dict, tiny_text_state_dict,
                                                  turbo_lora_state_dict, write_anima_unet)

UNET = "model.diffusion_model."


class _Shape:
    def __init__(self, shape):
        self.shape = tuple(shape)


def _header(state: dict) -> dict:
    return {k: _Shape(v.shape) for k, v in state.items()}


@pytest.fixture(scope="module")
def state():
    return tiny_anima_state_dict(seed=1)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, state):
    from comfy_core.split.diffusion_model import load_diffusion_model

    return load_diffusion_model(save(state, tmp_path_factory.mktemp("anima") / "anima-tiny.safetensors"))


# --- detection ---------------------------------------------------------------------------------------------

def test_config_is_read_from_names_and_shapes(state):
    config = AnimaConfig.detect_from_weights(_header(state))
    assert config == tiny_anima_config()
    assert (config.model_channels, config.num_heads, config.head_dim, config.num_blocks) == (TINY_WIDTH, 16, 12, 2)
    assert (config.in_channels, config.out_channels, config.crossattn_emb_channels) == (16, 16, ADAPTER_WIDTH)
    assert (config.adapter.source_dim, config.adapter.vocab_size, config.adapter.num_layers) == (TEXT_WIDTH, 32128, 2)
    unet = config.comfy_unet_config()
    assert unet["image_model"] == "anima" and unet["rope_h_extrapolation_ratio"] == 4.0
    assert unet["rope_t_extrapolation_ratio"] == 1.0 and unet["use_adaln_lora"] and not unet["extra_per_block_abs_pos_emb"]
    # ComfyUI's rule for the heads and the RoPE ratios (names and shapes cannot show them)
    assert rope_ratios(17, 2048) == (3.0, 3.0, 1.0) and rope_ratios(17, 5120)[2] == pytest.approx(5 / 6)


def test_inconsistent_weights_are_typed_errors(state):
    header = _header(state)
    missing = {k: v for k, v in header.items() if k != "blocks.0.cross_attn.k_proj.weight"}
    with pytest.raises(AnimaConfigError, match="blocks.0.cross_attn.k_proj.weight"):
        AnimaConfig.detect_from_weights(missing)
    narrow = dict(header)
    narrow["llm_adapter.embed.weight"] = _Shape((32128, 48))
    with pytest.raises(AnimaConfigError, match="48-wide"):
        AnimaConfig.detect_from_weights(narrow)


def test_split_and_single_files_are_detected_as_anima(state):
    registry = default_registry()
    detection = registry.detect({UNET + k: v for k, v in _header(state).items()})
    assert detection.family.name == "anima"
    split = registry.detect_diffusion_model({UNET + k: v for k, v in _header(state).items()})
    assert split.family.name == "anima"


# --- the DiT against diffusers --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def diffusers_reference(state):
    from diffusers import CosmosTransformer3DModel
    from diffusers.loaders.single_file_utils import convert_cosmos_transformer_checkpoint_to_diffusers

    config = tiny_anima_config()
    dit = {"net." + k: v.clone() for k, v in state.items() if not k.startswith("llm_adapter.")}
    converted = convert_cosmos_transformer_checkpoint_to_diffusers(dit)
    with torch.device("meta"):
        model = CosmosTransformer3DModel(
            in_channels=16, out_channels=16, num_attention_heads=16, attention_head_dim=config.head_dim,
            num_layers=config.num_blocks, mlp_ratio=4.0, text_embed_dim=ADAPTER_WIDTH,
            adaln_lora_dim=config.adaln_lora_dim, max_size=(128, 240, 240), patch_size=(1, 2, 2),
            rope_scale=(1.0, 4.0, 4.0), concat_padding_mask=True, extra_pos_embed_type=None)
    model.load_state_dict(converted, strict=True, assign=True)
    return model.eval()


@pytest.mark.parametrize("size", [(1, 8, 8), (1, 6, 10), (3, 4, 6)])
def test_dit_matches_diffusers_cosmos_predict2(loaded, diffusers_reference, size):
    network = loaded.model.diffusion_model
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 16, *size, generator=gen)
    context = torch.randn(2, 12, ADAPTER_WIDTH, generator=gen)
    sigma = torch.tensor([0.8, 0.3])
    with torch.no_grad():
        ours = network(x, sigma, context)
        theirs = diffusers_reference(x, sigma, context, padding_mask=torch.zeros(1, 1, *size[1:]),
                                     return_dict=False)[0]
    assert ours.shape == x.shape
    assert (ours - theirs).abs().max() < 1e-4
    with torch.no_grad():  # a 4-D latent is one frame
        flat = network(x[:, :, 0], sigma, context)
    assert (flat - ours[:, :, 0]).abs().max() < 1e-6 if size[0] == 1 else flat.shape == x[:, :, 0].shape


def test_odd_sizes_are_padded_and_cropped(loaded):
    network = loaded.model.diffusion_model
    x = torch.randn(1, 16, 1, 7, 9)
    with torch.no_grad():
        out = network(x, torch.tensor([0.5]), torch.randn(1, 4, ADAPTER_WIDTH))
    assert out.shape == x.shape and torch.isfinite(out).all()
    with pytest.raises(AnimaInputError, match="context"):
        network(x, torch.tensor([0.5]), torch.randn(1, 4, 24))


# --- the LLM adapter against its equations ---------------------------------------------------------------------

def _rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _rope(x, positions):
    """Rotate-half RoPE base 10000 over the head `[B, H, S, d]`, written out per pair."""
    d = x.shape[-1]
    out = torch.empty_like(x)
    for i in range(d // 2):
        freq = 10000.0 ** (-2 * i / d)
        angle = positions[:, None] * freq  # [S, 1]
        a, b = x[..., i], x[..., i + d // 2]
        out[..., i] = a * torch.cos(angle[:, 0]) - b * torch.sin(angle[:, 0])
        out[..., i + d // 2] = b * torch.cos(angle[:, 0]) + a * torch.sin(angle[:, 0])
    return out


def _attention(sd, p, x, context, heads=16):
    b, s, _ = x.shape
    n = context.shape[1]
    d = sd[p + "q_proj.weight"].shape[0] // heads
    q = (x @ sd[p + "q_proj.weight"].T).view(b, s, heads, d)
    k = (context @ sd[p + "k_proj.weight"].T).view(b, n, heads, d)
    v = (context @ sd[p + "v_proj.weight"].T).view(b, n, heads, d).transpose(1, 2)
    q = _rope(_rms(q, sd[p + "q_norm.weight"]).transpose(1, 2), torch.arange(s, dtype=torch.float32))
    k = _rope(_rms(k, sd[p + "k_norm.weight"]).transpose(1, 2), torch.arange(n, dtype=torch.float32))
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)
    return (weights @ v).transpose(1, 2).reshape(b, s, heads * d) @ sd[p + "o_proj.weight"].T


def _adapter_reference(sd, source, ids):
    a = "llm_adapter."
    x = sd[a + "embed.weight"][ids]
    layer = 0
    while f"{a}blocks.{layer}.cross_attn.q_proj.weight" in sd:
        p = f"{a}blocks.{layer}."
        normed = _rms(x, sd[p + "norm_self_attn.weight"])
        x = x + _attention(sd, p + "self_attn.", normed, normed)
        x = x + _attention(sd, p + "cross_attn.", _rms(x, sd[p + "norm_cross_attn.weight"]), source)
        h = _rms(x, sd[p + "norm_mlp.weight"]) @ sd[p + "mlp.0.weight"].T + sd[p + "mlp.0.bias"]
        x = x + F.gelu(h) @ sd[p + "mlp.2.weight"].T + sd[p + "mlp.2.bias"]
        layer += 1
    return _rms(x @ sd[a + "out_proj.weight"].T + sd[a + "out_proj.bias"], sd[a + "norm.weight"])


def test_adapter_matches_its_equations_and_context_is_padded_to_512(loaded, state):
    network = loaded.model.diffusion_model
    gen = torch.Generator().manual_seed(2)
    source = torch.randn(1, 9, TEXT_WIDTH, generator=gen)
    ids = torch.tensor([[71, 1712, 3, 9, 1]])
    weights = torch.tensor([[1.0, 1.5, 1.0, 0.5, 1.0]])[..., None]
    with torch.no_grad():
        out = network.preprocess_text_embeds(source, ids, t5xxl_weights=weights)
    expected = _adapter_reference(state, source, ids) * weights
    assert out.shape == (1, 512, ADAPTER_WIDTH)
    assert (out[:, :5] - expected).abs().max() < 1e-4
    assert out[:, 5:].abs().max() == 0
    assert network.preprocess_text_embeds(source, None) is source  # no T5 ids: the states as they are


# --- text encoders and conditioning ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.qwen3_files import write_qwen3_file

    path = write_qwen3_file(tmp_path_factory.mktemp("anima_te") / "qwen_3_06b_base.safetensors",
                            tiny_text_state_dict(), dtype=torch.float32)
    return load_text_encoders([path], "stable_diffusion")


def test_cliploader_stable_diffusion_builds_the_anima_set(clip):
    from comfy_core.text_encoders.t5_tokenizer import T5XXLTokenizer

    assert type(clip.cond_stage_model).__name__ == "AnimaTEModel"
    assert type(clip.tokenizer).__name__ == "AnimaTokenizer"
    tokens = clip.tokenize("a (red:1.5) cat")
    assert set(tokens) == {"qwen3_06b", "t5xxl"}
    assert all(w == 1.0 for _, w in tokens["qwen3_06b"][0])  # Qwen weights all 1, the parentheses parsed
    t5 = T5XXLTokenizer(min_length=1)
    expected = t5.tokenize_with_weights("a (red:1.5) cat")[0]
    assert tokens["t5xxl"][0] == expected and expected[-1] == (1, 1.0)
    assert {w for _, w in expected} == {1.0, 1.5}
    cond = clip.encode_from_tokens_scheduled(tokens)
    (states, options), = cond
    assert states.shape == (1, len(tokens["qwen3_06b"][0]), TEXT_WIDTH)
    assert options["t5xxl_ids"].tolist() == [t for t, _ in expected]
    assert options["t5xxl_weights"].tolist() == [w for _, w in expected]


def test_conditions_run_the_adapter_on_the_t5_ids(loaded):
    model = loaded.model
    gen = torch.Generator().manual_seed(4)
    cross = torch.randn(1, 6, TEXT_WIDTH, generator=gen)
    ids, weights = torch.tensor([5, 8, 1], dtype=torch.int32), torch.tensor([1.0, 1.2, 1.0])
    out = AnimaConditions().extra_conds(model, cross_attn=cross, t5xxl_ids=ids, t5xxl_weights=weights,
                                        device=torch.device("cpu"))
    with torch.no_grad():
        expected = model.diffusion_model.preprocess_text_embeds(cross, ids[None], weights[None, :, None])
    assert torch.equal(out["c_crossattn"], expected) and out["c_crossattn"].shape == (1, 512, ADAPTER_WIDTH)
    assert AnimaConditions().extra_conds(model, cross_attn=cross) == {}  # no T5 ids: ComfyUI's context as is


def test_family_policy_is_comfyuis(loaded):
    from comfy_core.models.model_sampling import FlowModelSampling

    model = loaded.model
    sampling = model.model_sampling
    assert type(sampling) is FlowModelSampling and sampling.shift == 3.0 and sampling.multiplier == 1.0
    assert model.latent_format.channels == 16 and type(model.model_config).__name__ == "Anima"
    assert model.model_config.unet_config["image_model"] == "anima"
    family = default_registry().get("anima")
    assert family.comfy_model_class == "Anima" and "stable_diffusion" in family.text_encoders.clip_types
    assert float(sampling.percent_to_sigma(0.5)) == pytest.approx(3 * 0.5 / (1 + 2 * 0.5))


def test_turbo_lora_spellings_reach_every_projection(loaded):
    from comfy_core.lora.dit_keymap import dit_key_map

    key_map = dit_key_map(loaded.model)
    layers = {k[: -len(".lora_A.weight")] for k in turbo_lora_state_dict() if k.endswith(".lora_A.weight")}
    assert layers and all(key_map[layer] == "diffusion_model." + layer[len("diffusion_model."):] + ".weight"
                          for layer in layers)
    assert key_map["lora_unet_blocks_1_cross_attn_k_proj"] == "diffusion_model.blocks.1.cross_attn.k_proj.weight"
    assert key_map["net.llm_adapter.blocks.0.self_attn.q_proj"] == \
        "diffusion_model.llm_adapter.blocks.0.self_attn.q_proj.weight"


def test_unetloader_file_samples_with_the_qwen3_conditioning(tmp_path, clip):
    from comfy_core.sampling.ksampler import sample
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(write_anima_unet(tmp_path / "anima-base.safetensors", seed=3))
    assert model.model.family.name == "anima"
    positive = clip.encode_from_tokens_scheduled(clip.tokenize("1girl, red hair"))
    negative = clip.encode_from_tokens_scheduled(clip.tokenize(""))
    noise = torch.randn(1, 16, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    result = sample(model, noise, 2, 4.0, "euler", "simple", positive, negative, torch.zeros(1, 16, 1, 8, 8))
    assert result.shape == noise.shape and torch.isfinite(result).all()


def test_turbo_lora_file_patches_every_layer_and_changes_the_output(loaded):
    from comfy_core.lora.loader import load_lora_for_models

    tensors = turbo_lora_state_dict()
    patched, _, report = load_lora_for_models(loaded, None, tensors, 1.0, 1.0, name="anima-turbo-lora")
    assert report.unmatched == [] and report.model_keys == len(tensors) // 2
    x = torch.randn(1, 16, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    context = torch.randn(1, 3, ADAPTER_WIDTH, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        with loaded.applied() as plain:
            before = plain.diffusion_model(x, torch.tensor([0.5]), context)
        with patched.applied() as lora:
            after = lora.diffusion_model(x, torch.tensor([0.5]), context)
    assert (after - before).abs().max() > 1e-3


def test_original_release_net_prefix_loads_to_the_same_network(tmp_path, loaded, state):
    from comfy_core.split.diffusion_model import load_diffusion_model

    original = load_diffusion_model(save({"net." + k: v for k, v in state.items()}, tmp_path / "anima_net.safetensors"))
    assert original.model.family.name == "anima"
    x = torch.randn(1, 16, 1, 4, 6, generator=torch.Generator().manual_seed(8))
    context = torch.randn(1, 5, ADAPTER_WIDTH, generator=torch.Generator().manual_seed(9))
    ours, theirs = original.model.diffusion_model.state_dict(), loaded.model.diffusion_model.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    with torch.no_grad():
        a = original.model.diffusion_model(x, torch.tensor([0.4]), context)
        b = loaded.model.diffusion_model(x, torch.tensor([0.4]), context)
    # Equal weights; the outputs agree to float32 rounding (two instances' buffers are placed
    # differently, and some CPU matrix-product builds round by alignment).
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_diffusion_model_wrappers_get_comfyuis_anima_arguments(loaded):
    # ComfyUI's Cosmos-Predict2 `_forward` executor passes (x, timesteps, context, fps, padding_mask)
    # and `transformer_options` among the keywords, which wrappers such as comfyui-tooling-nodes'
    # regional prompts replace by keyword before calling on.
    from comfy_core.wrappers import WrappersMP

    seen = []

    def wrapper(executor, *args, **kwargs):
        seen.append((len(args), sorted(kwargs)))
        options = dict(kwargs.get("transformer_options", {}))
        options["marked"] = True
        kwargs["transformer_options"] = options
        return executor(*args, **kwargs)

    options = {"wrappers": {WrappersMP.DIFFUSION_MODEL: {"test": [wrapper]}}}  # what sampling hands the model
    x = torch.randn(1, 16, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    context = torch.randn(1, 6, ADAPTER_WIDTH, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        wrapped = loaded.model.apply_model(x, torch.tensor([0.6]), c_crossattn=context, transformer_options=options)
        plain = loaded.model.apply_model(x, torch.tensor([0.6]), c_crossattn=context, transformer_options={})
    assert seen == [(5, ["control", "transformer_options"])]  # ComfyUI's `_apply_model` keywords
    torch.testing.assert_close(wrapped, plain)

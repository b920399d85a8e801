"""Ideogram 4 (comfy_core/families/ideogram4): the DiT against diffusers' `Ideogram4Transformer2DModel`
on tiny random weights mapped from ComfyUI's layout (conditional packing, the image-only pass, padded
text), detection from a UNETLoader file, the fp8-scaled and int8 ConvRot files, diffusers' layout,
ComfyUI's sampling policy and conditions, the LoRA spellings; the Qwen3-VL 8B text encoder through
CLIPLoader type "ideogram4" against diffusers' pipeline taps on transformers' `Qwen3VLModel`; and a
DualModelGuider run on the conditional + unconditional pair."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.ideogram4.dit import (Ideogram4Config, Ideogram4ConfigError, Ideogram4InputError,
                                               Ideogram4Transformer, image_positions, latent_to_tokens,
                                               tokens_to_latent)
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.template_models_ideogram4 import (QWEN3VL_LAYERS, quantized_ideogram4, tiny_ideogram4_config,
                                                      tiny_ideogram4_state_dict)

UNET = "model.diffusion_model."
LLM = 24  # a narrow text width for the network-only tests


class _Shape:
    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape


def _header(state: dict) -> dict:
    return {k: _Shape(tuple(v.shape)) for k, v in state.items()}


def _network(seed: int = 1, llm: int = LLM) -> Ideogram4Transformer:
    network = Ideogram4Transformer(tiny_ideogram4_config(llm_features_dim=llm)).eval()
    network.load_state_dict(tiny_ideogram4_state_dict(seed=seed, llm_features_dim=llm), strict=True)
    return network


def _diffusers_names(state: dict) -> dict:
    """ComfyUI's names -> diffusers' (q / k / v split off `qkv`, `o` -> `to_out.0`), written here."""
    out = {}
    for name, tensor in state.items():
        if name.endswith(".attention.qkv.weight"):
            base = name[:-len("qkv.weight")]
            for part, rows in zip("qkv", tensor.chunk(3, dim=0)):
                out[f"{base}to_{part}.weight"] = rows
        else:
            out[name.replace(".attention.o.", ".attention.to_out.0.")] = tensor
    return out


def _diffusers(seed: int = 1, llm: int = LLM):
    from diffusers import Ideogram4Transformer2DModel

    c = tiny_ideogram4_config(llm_features_dim=llm)
    model = Ideogram4Transformer2DModel(
        in_channels=c.in_channels, num_layers=c.num_layers, attention_head_dim=c.attention_head_dim,
        num_attention_heads=c.num_attention_heads, intermediate_size=c.intermediate_size, adaln_dim=c.adaln_dim,
        llm_features_dim=c.llm_features_dim).eval()
    model.load_state_dict(_diffusers_names(tiny_ideogram4_state_dict(seed=seed, llm_features_dim=llm)), strict=True)
    return model


def _packed_reference(reference, x: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor | None) -> torch.Tensor:
    """diffusers' network on the pipeline's packing (`[text, image]`, text at (i, i, i), image at
    (0, r, c) + 65536, one segment), in ComfyUI's terms: time 1 - sigma, the velocity negated.
    The latent -> token reordering is written here independently of the network's."""
    b, ch, h, w = x.shape
    tokens = x.reshape(b, ch // 4, 2, 2, h, w).permute(0, 4, 5, 2, 3, 1).reshape(b, h * w, ch)
    rows = torch.arange(h).repeat_interleave(w)
    cols = torch.arange(w).repeat(h)
    img_pos = torch.stack([torch.zeros_like(rows), rows, cols], dim=1) + 65536
    n = 0 if context is None else context.shape[1]
    text_pos = torch.arange(n)[:, None].repeat(1, 3)
    positions = torch.cat([text_pos, img_pos])[None].repeat(b, 1, 1)
    indicator = torch.tensor([3] * n + [2] * (h * w))[None].repeat(b, 1)
    features = context.shape[-1] if context is not None else reference.config.llm_features_dim
    encoder = torch.zeros(b, n + h * w, features)
    if context is not None:
        encoder[:, :n] = context
    hidden = torch.cat([torch.zeros(b, n, ch), tokens], dim=1)
    out = reference(hidden_states=hidden, timestep=1.0 - sigma, encoder_hidden_states=encoder, position_ids=positions,
                    segment_ids=torch.ones(b, n + h * w, dtype=torch.long), indicator=indicator,
                    return_dict=False)[0][:, n:]
    return -out.reshape(b, h, w, 2, 2, ch // 4).permute(0, 5, 3, 4, 1, 2).reshape(b, ch, h, w)


# --- the DiT ---------------------------------------------------------------------------------------------------

def test_dit_matches_diffusers_with_text_and_image_only():
    ours, reference = _network(), _diffusers()
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 128, 3, 4, generator=generator)
    sigma = torch.tensor([0.8, 0.25])
    context = torch.randn(2, 5, LLM, generator=generator)
    with torch.no_grad():
        got = ours(x, sigma, context)
        expected = _packed_reference(reference, x, sigma, context)
        alone = ours(x, sigma, None)
        expected_alone = _packed_reference(reference, x, sigma, None)
    assert got.shape == x.shape and alone.shape == x.shape
    assert torch.allclose(got, expected, atol=1e-4, rtol=1e-4), (got - expected).abs().max()
    assert torch.allclose(alone, expected_alone, atol=1e-4, rtol=1e-4), (alone - expected_alone).abs().max()
    assert not torch.allclose(got, alone, atol=1e-3)
    zeros = ours(x, sigma, torch.zeros(2, 5, LLM))  # ConditioningZeroOut's features are still text rows
    assert not torch.allclose(zeros, alone, atol=1e-3)


def test_padded_text_is_a_segment_of_its_own():
    """A token mask isolates the padding (ComfyUI's block-diagonal segments): the image rows come out
    as for the text without its padding."""
    ours = _network()
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(1, 128, 2, 3, generator=generator)
    context = torch.randn(1, 7, LLM, generator=generator)
    sigma = torch.tensor([0.5])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        padded = ours(x, sigma, context, attention_mask=mask)
        short = ours(x, sigma, context[:, :5])
        unmasked = ours(x, sigma, context)
    assert torch.allclose(padded, short, atol=1e-5, rtol=1e-5), (padded - short).abs().max()
    assert not torch.allclose(padded, unmasked, atol=1e-4)


def test_token_packing_is_ideograms_patch_order():
    x = torch.arange(2 * 128 * 2 * 3, dtype=torch.float32).reshape(2, 128, 2, 3)
    tokens = latent_to_tokens(x)
    # token (r, c), feature (pi, pj, c): latent channel c * 4 + 2 * pi + pj
    assert tokens[1, 1 * 3 + 2, (1 * 2 + 0) * 32 + 5].item() == x[1, 5 * 4 + 2 * 1 + 0, 1, 2].item()
    assert torch.equal(tokens_to_latent(tokens, 2, 3), x)
    assert image_positions(2, 3, "cpu").tolist()[4] == [65536, 65537, 65537]


def test_config_is_read_from_names_and_shapes():
    state = tiny_ideogram4_state_dict()
    config = Ideogram4Config.detect_from_weights(_header(state))
    assert config == tiny_ideogram4_config()
    assert (config.hidden_size, config.num_attention_heads, config.attention_head_dim, config.num_layers,
            config.intermediate_size, config.adaln_dim, config.in_channels, config.llm_features_dim) == \
        (256, 2, 128, 2, 96, 32, 128, 13 * 64)
    assert Ideogram4Config.detect_from_weights({UNET + k: v for k, v in _header(state).items()}, UNET) == config
    unet = config.comfy_unet_config()
    assert unet["image_model"] == "ideogram4" and unet["mrope_section"] == [24, 20, 20] and unet["rope_theta"] == 5000000
    release = Ideogram4Config()
    assert (release.hidden_size, release.llm_features_dim) == (4608, 53248)


def test_inconsistent_weights_and_inputs_are_typed_errors():
    header = _header(tiny_ideogram4_state_dict())
    with pytest.raises(Ideogram4ConfigError, match="final_layer.linear.weight"):
        Ideogram4Config.detect_from_weights({k: v for k, v in header.items() if k != "final_layer.linear.weight"})
    narrow = dict(header)
    narrow["layers.0.attention.norm_q.weight"] = _Shape((64,))
    with pytest.raises(Ideogram4ConfigError, match="M-RoPE"):
        Ideogram4Config.detect_from_weights(narrow)
    with pytest.raises(Ideogram4InputError, match="text features"):
        _network()(torch.zeros(1, 128, 2, 2), torch.tensor([0.5]), torch.zeros(1, 3, 7))
    with pytest.raises(Ideogram4InputError, match="latent"):
        _network()(torch.zeros(1, 16, 2, 2), torch.tensor([0.5]), None)


# --- the family ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    path = tmp_path_factory.mktemp("ideogram4") / "ideogram4_bf16.safetensors"
    return load_diffusion_model(save(tiny_ideogram4_state_dict(seed=2), path))


def test_unetloader_file_is_detected_with_comfyuis_policy(loaded):
    from comfy_core.models.model_sampling import FlowModelSampling

    registry = default_registry()
    header = {UNET + k: v for k, v in _header(tiny_ideogram4_state_dict()).items()}
    assert registry.detect(header).family.name == "ideogram4"
    assert registry.detect_diffusion_model(header).family.name == "ideogram4"
    model = loaded.model
    assert model.family.name == "ideogram4"
    sampling = model.model_sampling
    assert type(sampling) is FlowModelSampling and sampling.shift == 1.0 and sampling.multiplier == 1.0
    assert float(sampling.timestep(torch.tensor(0.25))) == pytest.approx(0.25)
    assert model.latent_format.channels == 128 and type(model.model_config).__name__ == "Ideogram4"
    assert model.model_config.unet_config["image_model"] == "ideogram4"
    family = registry.get("ideogram4")
    assert family.comfy_model_class == "Ideogram4" and family.text_encoders.clip_types == ("ideogram4",)
    conditions = family.conditioning
    assert conditions.extra_conds(model, cross_attn=torch.zeros(1, 3, 832), attention_mask=torch.ones(1, 3)) == {}
    mask = torch.tensor([[1, 1, 0]])
    assert conditions.extra_conds(model, attention_mask=mask)["attention_mask"] is mask


def test_quantized_files_stay_quantized_and_compute_like_their_dequantised_weights(tmp_path):
    from safetensors.torch import save_file

    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_quant import true_state

    state = tiny_ideogram4_state_dict(seed=4)
    shapes = {k: tuple(v.shape) for k, v in state.items() if k.endswith(".weight")}
    generator = torch.Generator().manual_seed(2)
    x, ctx = torch.randn(1, 128, 2, 3, generator=generator), torch.randn(1, 4, 832, generator=generator)
    for storage, dtype in (("fp8", torch.float8_e4m3fn), ("int8", torch.int8)):
        tensors, metadata = quantized_ideogram4(state, storage)
        path = tmp_path / storage / f"ideogram4_{storage}.safetensors"
        path.parent.mkdir()
        save_file(tensors, str(path), metadata=metadata or None)
        quantised = load_diffusion_model(path)
        plain = load_diffusion_model(save(true_state(tensors, metadata, shapes), tmp_path / storage / "f.safetensors"))
        network = quantised.model.diffusion_model
        assert network.layers[0].attention.qkv.weight.dtype == dtype
        assert network.llm_cond_proj.weight.dtype == dtype
        with torch.no_grad():
            a, b = (m.model.diffusion_model(x, torch.tensor([0.5]), ctx) for m in (quantised, plain))
        assert (a - b).abs().max() < 1e-3 * b.abs().max(), storage


def test_diffusers_layout_file_loads_and_computes_alike(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    state = tiny_ideogram4_state_dict(seed=5)
    comfy = load_diffusion_model(save(state, tmp_path / "a" / "ideogram4.safetensors"))
    diffusers = load_diffusion_model(save(_diffusers_names(state), tmp_path / "b" / "transformer.safetensors"))
    assert diffusers.model.family.name == "ideogram4"
    generator = torch.Generator().manual_seed(3)
    x, ctx = torch.randn(1, 128, 2, 2, generator=generator), torch.randn(1, 3, 832, generator=generator)
    with torch.no_grad():
        a, b = (m.model.diffusion_model(x, torch.tensor([0.3]), ctx) for m in (comfy, diffusers))
    assert torch.equal(a, b)


def test_lora_spellings_reach_the_layers(loaded):
    from comfy_core.lora.dit_keymap import dit_key_map

    key_map = dit_key_map(loaded.model)
    qkv = "diffusion_model.layers.1.attention.qkv.weight"
    for name in ("diffusion_model.layers.1.attention.qkv", "lora_unet_layers_1_attention_qkv"):
        assert key_map[name] == qkv
    assert key_map["transformer.layers.1.attention.to_k"] == (qkv, (0, 256, 256))
    assert key_map["transformer.layers.0.attention.to_out.0"] == "diffusion_model.layers.0.attention.o.weight"
    assert key_map["transformer.layers.0.feed_forward.w3"] == "diffusion_model.layers.0.feed_forward.w3.weight"


# --- the Qwen3-VL 8B text encoder ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from comfy_core.split import load_text_encoders
    from tests.fixtures.qwen3vl_files import tiny_qwen3vl_state_dict, write_tiny_qwen3vl

    state = tiny_qwen3vl_state_dict(seed=7, layers=QWEN3VL_LAYERS)
    path = write_tiny_qwen3vl(tmp_path_factory.mktemp("qwen3vl") / "qwen3vl_8b_fp8_scaled.safetensors",
                              dtype=torch.float32, state=state, layers=QWEN3VL_LAYERS)
    return state, load_text_encoders([path], "ideogram4")


def test_cliploader_ideogram4_taps_13_layers_as_diffusers_pipeline(encoder):
    from diffusers.pipelines.ideogram4.pipeline_ideogram4 import QWEN3_VL_ACTIVATION_LAYERS, Ideogram4Pipeline

    from comfy_core.families.ideogram4.clip import Ideogram4TEModel, Ideogram4Tokenizer
    from tests.fixtures.qwen3vl_files import reference_model

    state, clip = encoder
    assert isinstance(clip.cond_stage_model, Ideogram4TEModel) and isinstance(clip.tokenizer, Ideogram4Tokenizer)
    prompt = '{"high_level_description": "a red fox in the snow"}'
    tokens = clip.tokenize(prompt)
    ids = [t[0] for t in tokens["qwen3vl_8b"][0]]
    assert set(tokens) == {"qwen3vl_8b"}
    text = clip.tokenizer.decode(ids, skip_special_tokens=False)
    assert text == f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"  # no thinking block
    out = clip.encode_from_tokens(tokens, return_pooled=True, return_dict=True)
    reference = reference_model(state)
    n = len(ids)
    with torch.no_grad():
        taps = Ideogram4Pipeline._get_text_encoder_hidden_states(
            reference, torch.tensor([ids]), torch.ones(1, n, dtype=torch.long), torch.arange(n)[None])
    expected = torch.stack(taps, dim=0).permute(1, 2, 3, 0).reshape(1, n, -1)
    assert len(QWEN3_VL_ACTIVATION_LAYERS) == 13
    assert out["pooled_output"] is None and out["attention_mask"].tolist() == [[1] * n]
    assert out["cond"].shape == (1, n, 13 * 64)
    assert torch.allclose(out["cond"], expected, atol=1e-4, rtol=1e-4), (out["cond"] - expected).abs().max()


def test_a_shallow_qwen3vl_is_refused(tmp_path):
    from comfy_core.split import load_text_encoders
    from comfy_core.text_encoders.errors import TokenizeError
    from tests.fixtures.qwen3vl_files import write_tiny_qwen3vl

    clip = load_text_encoders([write_tiny_qwen3vl(tmp_path / "qwen3vl_8b.safetensors", dtype=torch.float32)],
                              "ideogram4")
    with pytest.raises(TokenizeError, match="beyond this 3-block"):
        clip.encode_from_tokens(clip.tokenize("a fox"))


# --- sampling with the two networks --------------------------------------------------------------------------

def test_dual_model_guider_runs_the_unconditional_network_on_the_negative(tmp_path, encoder):
    from comfy_core.families.ideogram4.schedule import ideogram4_sigmas
    from comfy_core.sampling.guider import CFGGuider, DualModelGuider, sampler_object
    from comfy_core.split.diffusion_model import load_diffusion_model

    _, clip = encoder
    cond = load_diffusion_model(save(tiny_ideogram4_state_dict(seed=11), tmp_path / "c" / "ideogram4.safetensors"))
    uncond = load_diffusion_model(save(tiny_ideogram4_state_dict(seed=12),
                                       tmp_path / "u" / "ideogram4_unconditional.safetensors"))
    positive = clip.encode_from_tokens_scheduled(clip.tokenize("a red fox in the snow"))
    negative = [[torch.zeros_like(positive[0][0]), dict(positive[0][1])]]  # ConditioningZeroOut
    noise = torch.randn(1, 128, 4, 4, generator=torch.Generator().manual_seed(0))
    sigmas = ideogram4_sigmas(3, 256, 256, 0.0, 1.75)
    results = []
    for guider in (DualModelGuider(cond, uncond), CFGGuider(cond)):
        guider.set_conds(positive, negative)
        guider.set_cfg(7.0)
        results.append(guider.sample(noise, torch.zeros(1, 128, 4, 4), sampler_object("euler"), sigmas, seed=0))
    dual, single = results
    assert dual.shape == noise.shape and torch.isfinite(dual).all()
    assert not torch.allclose(dual, single, atol=1e-4)  # the negative pass ran on the other network

"""ERNIE-Image (comfy_core/families/ernie_image): the DiT against diffusers' `ErnieImageTransformer2DModel`
on tiny random weights in the real key layout, detection from a UNETLoader file, ComfyUI's sampling
policy, ScaleROPE's options, the LoRA spellings; the Ministral 3 3B text encoder through CLIPLoader type
"flux2" (against transformers' `MistralModel`) and the prompt enhancer's generation (against
transformers' greedy decoding)."""
from __future__ import annotations


import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.ernie_image.dit import (ErnieImageConfig, ErnieImageConfigError, ErnieImageInputError,
                                                 ErnieImageTransformer)
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.mistral_files import TINY_MISTRAL, write_mistral_file
from tests.fixtures.template_models_ernie import (TEXT_WIDTH, tiny_ernie_config, tiny_ernie_state_dict,
                                                  tiny_ministral_state_dict, tiny_prompt_enhancer_state_dict)

UNET = "model.diffusion_model."


class _Shape:
    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape


def _header(state: dict) -> dict:
    return {k: _Shape(tuple(v.shape)) for k, v in state.items()}


def _network(**config: int) -> ErnieImageTransformer:
    network = ErnieImageTransformer(tiny_ernie_config(**config)).eval()
    network.load_state_dict(tiny_ernie_state_dict(seed=1, **config), strict=True)
    return network


def _diffusers(**config: int):
    from diffusers import ErnieImageTransformer2DModel

    c = tiny_ernie_config(**config)
    model = ErnieImageTransformer2DModel(
        hidden_size=c.hidden_size, num_attention_heads=c.num_attention_heads, num_layers=c.num_layers,
        ffn_hidden_size=c.ffn_hidden_size, in_channels=c.in_channels, out_channels=c.out_channels,
        patch_size=c.patch_size, text_in_dim=c.text_in_dim).eval()
    model.load_state_dict(tiny_ernie_state_dict(seed=1, **config), strict=True)
    return model


# --- the DiT ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("config", [dict(in_channels=8, patch_size=1, text_in_dim=48),
                                    dict(in_channels=4, patch_size=2, text_in_dim=48),
                                    dict(in_channels=8, patch_size=1, text_in_dim=256)])
def test_dit_matches_diffusers(config):
    ours, reference = _network(**config), _diffusers(**config)
    assert (ours.text_proj is None) == (config["text_in_dim"] == 256)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, config["in_channels"], 6, 8, generator=generator)
    t = torch.tensor([500.0, 125.0])
    context = torch.randn(2, 5, config["text_in_dim"], generator=generator)
    with torch.no_grad():
        got = ours(x, t, context)
        expected = reference(x, t, context, torch.tensor([5, 5]), return_dict=False)[0]
    assert got.shape == x.shape
    assert torch.allclose(got, expected, atol=1e-4, rtol=1e-4), (got - expected).abs().max()


def test_config_is_read_from_names_and_shapes():
    state = tiny_ernie_state_dict()
    config = ErnieImageConfig.detect_from_weights(_header(state))
    assert config == tiny_ernie_config()
    assert (config.hidden_size, config.num_attention_heads, config.num_layers, config.ffn_hidden_size,
            config.in_channels, config.patch_size, config.text_in_dim) == (256, 2, 2, 320, 128, 1, TEXT_WIDTH)
    prefixed = ErnieImageConfig.detect_from_weights({UNET + k: v for k, v in _header(state).items()}, UNET)
    assert prefixed == config
    unet = config.comfy_unet_config()
    assert unet["image_model"] == "ernie" and unet["rope_axes_dim"] == [32, 48, 48] and unet["rope_theta"] == 256


def test_inconsistent_weights_are_typed_errors():
    header = _header(tiny_ernie_state_dict())
    with pytest.raises(ErnieImageConfigError, match="final_linear.weight"):
        ErnieImageConfig.detect_from_weights({k: v for k, v in header.items() if k != "final_linear.weight"})
    narrow = dict(header)
    narrow["layers.0.self_attention.norm_q.weight"] = _Shape((64,))
    with pytest.raises(ErnieImageConfigError, match="heads of 128"):
        ErnieImageConfig.detect_from_weights(narrow)
    with pytest.raises(ErnieImageInputError, match="text states"):
        _network()(torch.zeros(1, 128, 2, 2), torch.tensor([1.0]), torch.zeros(1, 3, 7))


def test_rope_options_scale_and_shift_the_image_grid():
    network = _network(in_channels=8, text_in_dim=48)
    generator = torch.Generator().manual_seed(3)
    x, context = torch.randn(1, 8, 4, 4, generator=generator), torch.randn(1, 3, 48, generator=generator)
    t = torch.tensor([300.0])
    identity = {"rope_options": {"scale_x": 1.0, "scale_y": 1.0, "shift_x": 0.0, "shift_y": 0.0, "shift_t": 0.0}}
    with torch.no_grad():
        plain = network(x, t, context)
        same = network(x, t, context, transformer_options=identity)
        moved = network(x, t, context, transformer_options={"rope_options": {"scale_y": 2.0, "shift_t": 1.0}})
    assert torch.equal(plain, same) and not torch.allclose(plain, moved)
    ids = network.positions(1, 3, 2, 3, {"scale_y": 2.0, "shift_x": 0.5, "shift_t": 1.0}, "cpu")[0]
    assert ids[:6].tolist() == [[4.0, 0.0, 0.5], [4.0, 0.0, 1.5], [4.0, 0.0, 2.5],
                                [4.0, 2.0, 0.5], [4.0, 2.0, 1.5], [4.0, 2.0, 2.5]]
    assert ids[6:].tolist() == [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0]]


# --- the family ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    path = tmp_path_factory.mktemp("ernie") / "ernie-image-turbo.safetensors"
    return load_diffusion_model(save(tiny_ernie_state_dict(seed=2), path))


def test_unetloader_file_is_detected_with_comfyuis_policy(loaded):
    from comfy_core.models.model_sampling import FlowModelSampling

    registry = default_registry()
    header = {UNET + k: v for k, v in _header(tiny_ernie_state_dict()).items()}
    assert registry.detect(header).family.name == "ernie_image"
    assert registry.detect_diffusion_model(header).family.name == "ernie_image"
    model = loaded.model
    assert model.family.name == "ernie_image"
    sampling = model.model_sampling
    assert type(sampling) is FlowModelSampling and sampling.shift == 3.0 and sampling.multiplier == 1000.0
    assert float(sampling.timestep(torch.tensor(0.5))) == pytest.approx(500.0)
    assert model.latent_format.channels == 128 and type(model.model_config).__name__ == "ErnieImage"
    assert model.model_config.unet_config["image_model"] == "ernie"
    family = registry.get("ernie_image")
    assert family.comfy_model_class == "ErnieImage" and "flux2" in family.text_encoders.clip_types
    assert family.conditioning.extra_conds(model, cross_attn=torch.zeros(1, 3, TEXT_WIDTH),
                                           attention_mask=torch.ones(1, 3)) == {}


def test_lora_spellings_reach_the_projections(loaded):
    from comfy_core.lora.dit_keymap import dit_key_map

    key_map = dit_key_map(loaded.model)
    target = "diffusion_model.layers.1.self_attention.to_q.weight"
    for name in ("diffusion_model.layers.1.self_attention.to_q", "lora_unet_layers_1_self_attention_to_q",
                 "transformer.layers.1.self_attention.to_q"):
        assert key_map[name] == target
    assert key_map["transformer.layers.0.mlp.linear_fc2"] == "diffusion_model.layers.0.mlp.linear_fc2.weight"


# --- Ministral 3 3B ---------------------------------------------------------------------------------------------

def _reference_ministral(state: dict, causal_lm: bool = False):
    from transformers import MistralConfig, MistralForCausalLM, MistralModel

    config = MistralConfig(**{**TINY_MISTRAL, "num_hidden_layers": 26}, rms_norm_eps=1e-5, sliding_window=None,
                           tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    config._attn_implementation = "eager"
    if causal_lm:
        model = MistralForCausalLM(config).eval()
        model.load_state_dict({**{k: v.float() for k, v in state.items()},
                               "lm_head.weight": state["model.embed_tokens.weight"].float()}, strict=True)
        return model
    model = MistralModel(config).eval()
    model.load_state_dict({k[len("model."):]: v.float() for k, v in state.items()}, strict=True)
    return model


def test_ministral_is_told_from_mistral_small_3():
    from comfy_core.text_encoders.mistral import MINISTRAL_SLOT, MISTRAL_SLOT, MistralConfig

    tiny = MistralConfig.detect_from_weights(_header(tiny_ministral_state_dict()))
    assert tiny.slot == MINISTRAL_SLOT and tiny.rope_theta == 1e6 and tiny.final_norm
    from tests.fixtures.mistral_files import tiny_mistral_state_dict

    assert MistralConfig.detect_from_weights(_header(tiny_mistral_state_dict())).slot == MISTRAL_SLOT  # 31 blocks
    # The released widths (ComfyUI's test): 3072 is Ministral whatever the depth, 5120 Mistral Small 3.
    for width, blocks, slot in ((3072, 2, MINISTRAL_SLOT), (5120, 26, MISTRAL_SLOT)):
        header = {"model.embed_tokens.weight": _Shape((131_072, width)), "model.norm.weight": _Shape((width,))}
        for i in range(blocks):
            p = f"model.layers.{i}."
            header.update({p + "self_attn.q_proj.weight": _Shape((4096, width)),
                           p + "self_attn.k_proj.weight": _Shape((1024, width)),
                           p + "self_attn.v_proj.weight": _Shape((1024, width)),
                           p + "self_attn.o_proj.weight": _Shape((width, 4096)),
                           p + "mlp.gate_proj.weight": _Shape((64, width)),
                           p + "mlp.up_proj.weight": _Shape((64, width)),
                           p + "mlp.down_proj.weight": _Shape((width, 64)),
                           p + "input_layernorm.weight": _Shape((width,)),
                           p + "post_attention_layernorm.weight": _Shape((width,))})
        assert MistralConfig.detect_from_weights(header).slot == slot


@pytest.fixture(scope="module")
def ministral(tmp_path_factory):
    from comfy_core.split import load_text_encoders

    state = tiny_ministral_state_dict(seed=4)
    path = write_mistral_file(tmp_path_factory.mktemp("ministral") / "ministral-3-3b.safetensors", state,
                              dtype=torch.float32)
    return state, load_text_encoders([path], "flux2")


def test_cliploader_flux2_encodes_the_next_to_last_block(ministral):
    from comfy_core.families.ernie_image.clip import ErnieTEModel, ErnieTokenizer

    state, clip = ministral
    assert isinstance(clip.cond_stage_model, ErnieTEModel) and isinstance(clip.tokenizer, ErnieTokenizer)
    tokens = clip.tokenize("a red fox in the snow")
    ids = [t[0] for t in tokens["ministral3_3b"][0]]
    assert set(tokens) == {"ministral3_3b"} and ids[0] == 1 and 2 not in ids  # <s> in front, no end token
    assert [t[0] for t in clip.tokenize("a red fox in the snow", llama_template="{} X")["ministral3_3b"][0]] == ids
    out = clip.encode_from_tokens(tokens, return_pooled=True, return_dict=True)
    with torch.no_grad():
        expected = _reference_ministral(state)(torch.tensor([ids]), output_hidden_states=True).hidden_states[-2]
    assert out["pooled_output"] is None and out["attention_mask"].tolist() == [[1] * len(ids)]
    assert out["cond"].shape == (1, len(ids), TEXT_WIDTH)
    assert torch.allclose(out["cond"], expected, atol=1e-4, rtol=1e-4), (out["cond"] - expected).abs().max()


def test_prompt_enhancer_generates_as_transformers_greedy(tmp_path):
    from comfy_core.split import load_text_encoders
    from comfy_core.text_encoders.generate import SamplingOptions, generate_with_clip

    state = tiny_ministral_state_dict(seed=5)
    clip = load_text_encoders([write_mistral_file(tmp_path / "ernie-image-prompt-enhancer.safetensors", state,
                                                  dtype=torch.float32)], "flux2")
    tokens = clip.tokenize("<s>[SYSTEM_PROMPT]expand[/SYSTEM_PROMPT][INST]a fox[/INST]")
    ids = [t[0] for t in tokens["ministral3_3b"][0]]
    assert ids[:3] == [1, 1, 17]  # ComfyUI's start token, then the template's own <s>, [SYSTEM_PROMPT]
    got = generate_with_clip(clip, tokens, 12, SamplingOptions(do_sample=False))
    with torch.no_grad():
        expected = _reference_ministral(state, causal_lm=True).generate(
            torch.tensor([ids]), max_new_tokens=12, do_sample=False, eos_token_id=2, pad_token_id=11)
    assert got == expected[0, len(ids):].tolist()


def test_prompt_enhancer_stops_at_end_of_sequence(tmp_path):
    from comfy_core.split import load_text_encoders
    from comfy_core.text_encoders.generate import SamplingOptions, generate_with_clip

    path = write_mistral_file(tmp_path / "ernie-image-prompt-enhancer.safetensors",
                              tiny_prompt_enhancer_state_dict(seed=6), dtype=torch.bfloat16)
    clip = load_text_encoders([path], "flux2")
    ids = generate_with_clip(clip, clip.tokenize("[INST]a fox[/INST]"), 2048,
                             SamplingOptions(do_sample=True, temperature=0.6, top_k=64, top_p=0.8, min_p=0.05,
                                             repetition_penalty=1.05, seed=0))
    assert ids[-1] == 2 and len(ids) < 2048 and isinstance(clip.tokenizer.decode(ids), str)


def test_unetloader_file_samples_with_the_ministral_conditioning(loaded, ministral):
    from comfy_core.sampling.ksampler import sample

    _, clip = ministral
    positive = clip.encode_from_tokens_scheduled(clip.tokenize("a red fox in the snow"))
    negative = clip.encode_from_tokens_scheduled(clip.tokenize(""))
    noise = torch.randn(1, 128, 4, 4, generator=torch.Generator().manual_seed(0))
    result = sample(loaded, noise, 2, 4.0, "euler", "simple", positive, negative, torch.zeros(1, 128, 4, 4))
    assert result.shape == noise.shape and torch.isfinite(result).all()
    again = sample(loaded, noise, 2, 4.0, "euler", "simple", positive, negative, torch.zeros(1, 128, 4, 4))
    assert torch.equal(result, again)

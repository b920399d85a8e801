"""The Qwen2.5-VL text tower (comfy_core/text_encoders/qwen25vl.py): detection from names and shapes,
numerics against transformers' `Qwen2_5_VLForConditionalGeneration` language model on the same tiny
random weights and token ids (every block's output, the final normed one, bf16 / fp8 storage computed
in float32, a padding mask, 3-axis M-RoPE positions), and typed errors for bad files and input."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from comfy_core.text_encoders.errors import TextEncoderError, TokenizeError
from comfy_core.text_encoders.qwen3 import Qwen3Config, rotary_tables, token_mask
from comfy_core.text_encoders.qwen25vl import (
    Qwen25VLConfig,
    Qwen25VLDetectionError,
    Qwen25VLInputError,
    Qwen25VLKeyError,
    Qwen25VLTextEncoder,
    mrope_tables,
)
from comfy_core.text_encoders.qwen25vl_load import build_qwen25vl_encoder
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen3_files import tiny_qwen3_state_dict
from tests.fixtures.qwen25vl_files import TINY_TEXT, reference_model, tiny_qwen25vl_state_dict
from tests.fixtures.t5_files import header_of

VOCAB = 1024  # a small table: these tests feed ids directly
IDS = torch.tensor([[17, 872, 198, 64, 654, 315, 264, 825, 45, 198, 17, 770, 198],
                    [17, 872, 198, 970, 187, 45, 198, 1000, 1000, 1000, 1000, 1000, 1000]])
PAD = 1000


@pytest.fixture(scope="module")
def state():
    return tiny_qwen25vl_state_dict(vocab_size=VOCAB)


@pytest.fixture(scope="module")
def config(state):
    return Qwen25VLConfig.detect_from_weights(header_of(state), "")


@pytest.fixture(scope="module")
def tower(config, state):
    return build_qwen25vl_encoder(config, state)


@pytest.fixture(scope="module")
def reference(state):
    return reference_model(state, vocab_size=VOCAB)


def _hidden(reference, ids, mask=None, position_ids=None):
    with torch.no_grad():
        return reference.model.language_model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                                              output_hidden_states=True)


# --- detection ---------------------------------------------------------------------------------------

def test_the_shape_is_read_from_names_and_shapes(config):
    assert (config.hidden_size, config.intermediate_size, config.num_layers, config.num_heads, config.num_kv_heads,
            config.head_dim, config.vocab_size) == (256, 64, 3, 2, 1, 128, VOCAB)
    assert config.prefix == "" and config.slot == "qwen25_7b" and config.dtype == "F32"
    vision = config.vision
    assert (vision.hidden_size, vision.intermediate_size, vision.depth, vision.out_hidden_size, vision.patch_size,
            vision.temporal_patch_size, vision.spatial_merge_size) == (64, 32, 8, 256, 14, 2, 2)


def test_a_prefixed_tower_and_comfyuis_slot_names(state):
    header = header_of(state)
    prefixed = {f"text_encoders.qwen25_7b.transformer.{k}": v for k, v in header.items()}
    assert Qwen25VLConfig.detect_from_weights(prefixed, "") is None
    config = Qwen25VLConfig.detect_from_weights(prefixed, "text_encoders.qwen25_7b.transformer.")
    assert config.prefix == "text_encoders.qwen25_7b.transformer." and config.num_layers == 3
    text_only = {k: v for k, v in header.items() if not k.startswith("visual.")}
    assert Qwen25VLConfig.detect_from_weights(text_only, "").vision is None
    # ComfyUI names the tower by its key/value width (detect_te_model): 256 -> 3B, 512 -> 7B
    wide = dict(header, **{"model.layers.0.self_attn.k_proj.bias": torch.empty(256)})
    with pytest.raises(Qwen25VLDetectionError, match="k_proj"):
        Qwen25VLConfig.detect_from_weights(wide, "")  # block 0's other k/v shapes disagree
    # Qwen3 (QK-norm) and Gemma towers are not this tower
    assert Qwen25VLConfig.detect_from_weights(header_of(tiny_qwen3_state_dict()), "") is None
    assert Qwen3Config.detect_from_weights(header, "") is None


def test_incomplete_or_foreign_towers_are_detection_errors(state):
    header = header_of(state)
    missing = {k: v for k, v in header.items() if k != "model.layers.1.self_attn.v_proj.bias"}
    with pytest.raises(Qwen25VLDetectionError, match="model.layers.1.self_attn.v_proj.bias.*missing"):
        Qwen25VLConfig.detect_from_weights(missing, "")
    gap = {k: v for k, v in header.items() if not k.startswith("model.layers.1.")}
    with pytest.raises(Qwen25VLDetectionError, match=r"block indices \[0, 2\]"):
        Qwen25VLConfig.detect_from_weights(gap, "")
    odd = dict(header, **{"model.layers.0.self_attn.k_proj.bias": torch.empty(100)})
    with pytest.raises(Qwen25VLDetectionError, match="heads of 128"):
        Qwen25VLConfig.detect_from_weights(odd, "")
    no_patch = {k: v for k, v in header.items() if k != "visual.patch_embed.proj.weight"}
    with pytest.raises(Qwen25VLDetectionError, match="patch_embed.proj.weight is missing"):
        Qwen25VLConfig.detect_from_weights(no_patch, "")
    no_block = {k: v for k, v in header.items() if not k.startswith("visual.blocks.3.")}
    with pytest.raises(Qwen25VLDetectionError, match=r"visual.blocks: indices"):
        Qwen25VLConfig.detect_from_weights(no_block, "")
    assert issubclass(Qwen25VLDetectionError, TextEncoderError)


# --- numerics against transformers ---------------------------------------------------------------

def test_every_block_output_matches_transformers(tower, reference):
    expected = _hidden(reference, IDS[:1])
    for layer in range(TINY_TEXT["num_hidden_layers"] - 1):  # transformers' last entry is normed
        ours = tower.encode_ids(IDS[:1], layer_idx=layer, layer_norm_hidden=False)
        torch.testing.assert_close(ours, expected.hidden_states[layer + 1], atol=1e-5, rtol=1e-5)
    final = tower.encode_ids(IDS[:1], layer_idx=None)
    torch.testing.assert_close(final, expected.last_hidden_state, atol=1e-5, rtol=1e-5)
    assert final.dtype == torch.float32


def test_the_final_normed_output_is_qwen_images_choice(tower, reference):
    """ComfyUI's Qwen25_7BVLIModel: layer "last" (the final norm's output); the whole model's
    forward (its own text positions) gives the same states."""
    assert tower.options.layer_idx is None
    ours = tower(IDS[:1])
    with torch.no_grad():
        whole = reference(input_ids=IDS[:1], output_hidden_states=True).hidden_states[-1]
    torch.testing.assert_close(ours[0], whole, atol=1e-5, rtol=1e-5)
    assert ours[1] is None and ours[2]["attention_mask"].tolist() == [[1] * IDS.shape[1]]


def test_bf16_weights_compute_in_float32(config, state):
    stored = {k: v.to(torch.bfloat16) for k, v in state.items()}
    tower = build_qwen25vl_encoder(config, stored)
    assert tower.dtype == torch.bfloat16
    assert tower.transformer.model.layers[0].self_attn.q_proj.bias.dtype == torch.bfloat16
    reference = reference_model({k: v.float() for k, v in stored.items()}, vocab_size=VOCAB)
    torch.testing.assert_close(tower.encode_ids(IDS[:1]), _hidden(reference, IDS[:1]).last_hidden_state,
                               atol=1e-5, rtol=1e-5)


def test_fp8_weights_stay_fp8_and_compute_in_float32(state):
    stored = {k: v.to(torch.float8_e4m3fn) for k, v in state.items()}
    config = Qwen25VLConfig.detect_from_weights(header_of(stored), "")
    assert config.dtype == "F8_E4M3"
    tower = build_qwen25vl_encoder(config, stored)
    assert tower.dtype == torch.float8_e4m3fn
    reference = reference_model({k: v.float() for k, v in stored.items()}, vocab_size=VOCAB)
    torch.testing.assert_close(tower.encode_ids(IDS[:1]), _hidden(reference, IDS[:1]).last_hidden_state,
                               atol=1e-5, rtol=1e-5)


def test_a_padding_mask_matches_transformers_on_the_kept_tokens(tower, reference):
    mask = token_mask(IDS.tolist(), PAD)
    assert mask[1].tolist() == [1] * 7 + [0] * 6
    expected = _hidden(reference, IDS, mask).last_hidden_state
    ours = tower.encode_ids(IDS, attention_mask=mask)
    kept = mask.bool()
    torch.testing.assert_close(ours[kept], expected[kept], atol=1e-5, rtol=1e-5)


def test_three_axis_positions_match_transformers_mrope(tower, reference):
    length = IDS.shape[1]
    positions = torch.stack([torch.arange(length), torch.arange(length) * 2 % 5, torch.arange(length) // 3 + 1])
    expected = _hidden(reference, IDS[:1], position_ids=positions[:, None, :]).last_hidden_state
    ours = tower.encode_ids(IDS[:1], position_ids=positions)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(ours, tower.encode_ids(IDS[:1]), atol=1e-3)


def test_equal_positions_are_ordinary_rope():
    positions = torch.arange(9).expand(3, -1)
    for ours, plain in zip(mrope_tables(positions, 128, 1e6, (16, 24, 24), torch.device("cpu")),
                           rotary_tables(9, 128, 1e6, torch.device("cpu"))):
        torch.testing.assert_close(ours, plain)
    with pytest.raises(Qwen25VLInputError, match=r"\[3, tokens\]"):
        mrope_tables(torch.arange(9)[None], 128, 1e6, (16, 24, 24), torch.device("cpu"))
    with pytest.raises(Qwen25VLInputError, match="do not cover"):
        mrope_tables(positions, 64, 1e6, (16, 24, 24), torch.device("cpu"))


# --- the SDClipModel surface and errors ------------------------------------------------------------

def test_encode_token_weights_gives_states_and_the_mask(tower, reference):
    pairs = [[(int(t), 1.0) for t in IDS[1]]]
    assert tower.special_tokens == {"pad": 151643}  # ComfyUI's; this small table pads with PAD instead
    with tower.using_options(dataclasses.replace(tower.options, pad_token=PAD)):
        cond, pooled, extra = tower.encode_token_weights(pairs)
    assert pooled is None and extra["attention_mask"].tolist() == [[1] * 7 + [0] * 6]
    expected = _hidden(reference, IDS[1:], token_mask(IDS[1:].tolist(), PAD)).last_hidden_state
    torch.testing.assert_close(cond[:, :7], expected[:, :7], atol=1e-5, rtol=1e-5)


def test_bad_files_and_input_are_typed_errors(config, state, tower):
    with pytest.raises(Qwen25VLKeyError, match="missing keys"):
        build_qwen25vl_encoder(config, {k: v for k, v in state.items() if "layers.2.mlp" not in k})
    with pytest.raises(Qwen25VLKeyError, match="scaled-fp8"):
        build_qwen25vl_encoder(config, {**state, "model.layers.0.mlp.up_proj.scale_weight": torch.ones(())})
    with pytest.raises(Qwen25VLKeyError, match="not a weight"):
        build_qwen25vl_encoder(config, {**state, "vision.proj.weight": torch.ones(1)})
    text_only = dataclasses.replace(config, vision=None)
    with pytest.raises(Qwen25VLKeyError, match="visual.patch_embed.proj.weight"):  # vision weights need a vision config
        build_qwen25vl_encoder(text_only, state)
    wrong = dict(state, **{"model.layers.0.self_attn.q_proj.bias": torch.zeros(7)})
    with pytest.raises(Qwen25VLKeyError, match="q_proj.bias.*shape"):
        build_qwen25vl_encoder(config, wrong)
    built = build_qwen25vl_encoder(config, {**state, "lm_head.weight": torch.zeros(1)})  # kept for generation only
    assert isinstance(built, Qwen25VLTextEncoder) and built.can_generate  # test_qwen25vl_generate.py
    from comfy_core.text_encoders.generate import GenerationError
    with pytest.raises(GenerationError, match="LM head has shape"):
        built.logits(torch.zeros(1, TINY_TEXT["hidden_size"]))
    with pytest.raises(TokenizeError, match="outside"):
        tower.encode_ids(torch.tensor([[VOCAB]]))
    with pytest.raises(Qwen25VLInputError, match="positions for"):
        tower.encode_ids(IDS[:1], position_ids=torch.zeros(3, 4, dtype=torch.long))


def test_comfyuis_scaled_fp8_files_compute_with_the_scaled_weights(state):
    """ComfyUI's legacy scaled-fp8 layout (`scaled_fp8` marker, per-layer `scale_weight`): a layer
    with a scale computes with fp8 weight x scale; layers without one run as stored (today's
    ComfyUI's `convert_old_quants`)."""
    scaled_names = [k for k in state if k.startswith("model.layers.") and k.endswith("proj.weight")][:5]
    scaled_names.append("visual.blocks.0.attn.qkv.weight")
    stored, true = dict(state), dict(state)
    for name in scaled_names:
        scale = state[name].abs().max() / 448.0
        stored[name] = (state[name] / scale).to(torch.float8_e4m3fn)
        stored[name[:-len("weight")] + "scale_weight"] = scale.reshape(())
        stored[name[:-len("weight")] + "scale_input"] = torch.ones(())
        true[name] = stored[name].float() * scale
    stored["scaled_fp8"] = torch.empty(0, dtype=torch.float8_e4m3fn)
    config = Qwen25VLConfig.detect_from_weights(header_of(stored), "")
    assert config.scaled_fp8
    tower = build_qwen25vl_encoder(config, stored)
    layer = tower.transformer.model.get_submodule(scaled_names[0][len("model."):-len(".weight")])
    assert layer.weight.dtype == torch.float8_e4m3fn and float(layer.scale_weight) > 0
    assert tower.transformer.model.layers[0].input_layernorm.weight.dtype == torch.float32  # as stored
    reference = reference_model(true, vocab_size=VOCAB)
    torch.testing.assert_close(tower.encode_ids(IDS[:1]), _hidden(reference, IDS[:1]).last_hidden_state,
                               atol=1e-5, rtol=1e-5)
    from comfy_core.text_encoders.qwen25vl_vision import encode_image_patches, preprocess_image

    patches, grid = preprocess_image(torch.rand(1, 56, 56, 3), config.vision)
    with torch.no_grad():
        theirs = reference.model.visual(patches, grid_thw=grid).pooler_output
    torch.testing.assert_close(encode_image_patches(tower.transformer.visual, config.vision, patches, grid), theirs,
                               atol=1e-4, rtol=1e-4)
    unmarked = {k: v for k, v in stored.items() if k != "scaled_fp8"}
    with pytest.raises(Qwen25VLKeyError, match="scale_weight.*scaled_fp8 marker"):
        build_qwen25vl_encoder(Qwen25VLConfig.detect_from_weights(header_of(unmarked), ""), unmarked)
    stray = dict(stored, **{"model.norm.scale_weight": torch.ones(())})
    with pytest.raises(Qwen25VLKeyError, match="scales no linear layer"):
        build_qwen25vl_encoder(config, stray)

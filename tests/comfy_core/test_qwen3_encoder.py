"""The Qwen3 text tower (comfy_core/text_encoders/qwen3.py): detection from names and shapes,
numerics against transformers' `Qwen3Model` on the same tiny random weights and token ids (every
block's output, the final normed one, bf16 storage computed in float32, a padding mask), ComfyUI's
token mask, `encode_token_weights` with and without weights, and typed errors for bad files."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from comfy_core.text_encoders.errors import TextEncoderError, TokenizeError
from comfy_core.text_encoders.qwen3 import (
    Qwen3Config,
    Qwen3DetectionError,
    Qwen3KeyError,
    Qwen3TextEncoder,
    build_qwen3_encoder,
    token_mask,
)
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen3_files import TINY_QWEN3, reference_model, tiny_qwen3_state_dict
from tests.fixtures.t5_files import header_of

# A Z-Image prompt in its template, and a second row (right-padded with <|endoftext|>).
IDS = torch.tensor([[151644, 872, 198, 64, 6548, 315, 264, 8251, 151645, 198, 151644, 77091, 198],
                    [151644, 872, 198, 9707, 1879, 151645, 198, 151643, 151643, 151643, 151643, 151643, 151643]])


@pytest.fixture(scope="module")
def state():
    return tiny_qwen3_state_dict()


@pytest.fixture(scope="module")
def config(state):
    return Qwen3Config.detect_from_weights(header_of(state), "")


@pytest.fixture(scope="module")
def tower(config, state):
    return build_qwen3_encoder(config, state)


@pytest.fixture(scope="module")
def reference(state):
    return reference_model(state)


def _hidden(reference, ids, mask=None):
    with torch.no_grad():
        return reference(input_ids=ids, attention_mask=mask, output_hidden_states=True)


# --- detection ---------------------------------------------------------------------------------------

def test_the_shape_is_read_from_names_and_shapes(config):
    assert (config.hidden_size, config.intermediate_size, config.num_layers, config.num_heads, config.num_kv_heads,
            config.head_dim, config.vocab_size) == (32, 48, 3, 4, 2, 16, TINY_QWEN3["vocab_size"])
    assert config.prefix == "" and config.slot == "qwen3_4b" and config.dtype == "F32"


def test_a_prefixed_tower_and_comfyuis_slot_names_by_width(state):
    prefixed = {f"text_encoders.qwen3_4b.transformer.{k}": v for k, v in header_of(state).items()}
    assert Qwen3Config.detect_from_weights(prefixed, "") is None
    config = Qwen3Config.detect_from_weights(prefixed, "text_encoders.qwen3_4b.transformer.")
    assert config.prefix == "text_encoders.qwen3_4b.transformer." and config.num_layers == 3
    wide = tiny_qwen3_state_dict(hidden_size=64, num_hidden_layers=1, vocab_size=64)
    assert Qwen3Config.detect_from_weights(header_of(wide), "").slot == "qwen3_4b"
    assert Qwen3Config.detect_from_weights({"model.embed_tokens.weight": torch.zeros(1)}, "") is None
    gemma3 = dict(header_of(state), **{"model.layers.0.post_feedforward_layernorm.weight": torch.zeros(32)})
    assert Qwen3Config.detect_from_weights(gemma3, "") is None  # QK-norm too, but Gemma 3's sandwich norms


def test_incomplete_or_foreign_towers_are_detection_errors(state):
    header = header_of(state)
    missing = {k: v for k, v in header.items() if k != "model.layers.1.mlp.up_proj.weight"}
    with pytest.raises(Qwen3DetectionError, match="model.layers.1.mlp.up_proj.weight.*missing"):
        Qwen3Config.detect_from_weights(missing, "")
    gap = {k: v for k, v in header.items() if not k.startswith("model.layers.1.")}
    with pytest.raises(Qwen3DetectionError, match=r"block indices \[0, 2\]"):
        Qwen3Config.detect_from_weights(gap, "")
    biased = dict(header, **{"model.layers.0.self_attn.q_proj.bias": header["model.layers.0.input_layernorm.weight"]})
    with pytest.raises(Qwen3DetectionError, match="no bias"):
        Qwen3Config.detect_from_weights(biased, "")
    assert issubclass(Qwen3DetectionError, TextEncoderError)


# --- numerics against transformers ---------------------------------------------------------------

def test_every_block_output_matches_transformers(tower, reference):
    expected = _hidden(reference, IDS[:1])
    for layer in range(TINY_QWEN3["num_hidden_layers"] - 1):  # transformers' last entry is normed
        ours = tower.encode_ids(IDS[:1], layer_idx=layer, layer_norm_hidden=False)
        torch.testing.assert_close(ours, expected.hidden_states[layer + 1], atol=1e-5, rtol=1e-5)
    final = tower.encode_ids(IDS[:1], layer_idx=None)
    torch.testing.assert_close(final, expected.last_hidden_state, atol=1e-5, rtol=1e-5)
    assert final.dtype == torch.float32


def test_the_next_to_last_block_is_zimages_choice(tower, reference):
    """ComfyUI's Qwen3_4BModel: layer "hidden", index -2, no final norm on it."""
    expected = _hidden(reference, IDS[:1]).hidden_states[-2]  # [embeddings, block 0, block 1, block 2 normed]
    assert tower.options.layer_idx == -2 and tower.options.layer_norm_hidden is False
    ours = tower(IDS[:1])
    torch.testing.assert_close(ours[0], expected, atol=1e-5, rtol=1e-5)
    assert ours[1] is None and ours[2]["attention_mask"].tolist() == [[1] * IDS.shape[1]]
    normed = tower.encode_ids(IDS[:1], layer_idx=-2, layer_norm_hidden=True)
    torch.testing.assert_close(normed, reference.norm(expected), atol=1e-5, rtol=1e-5)


def test_bf16_weights_compute_in_float32(config, state):
    stored = {k: v.to(torch.bfloat16) for k, v in state.items()}
    tower = build_qwen3_encoder(config, stored)
    assert tower.dtype == torch.bfloat16
    assert tower.transformer.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    reference = reference_model({k: v.float() for k, v in stored.items()})
    expected = _hidden(reference, IDS[:1]).hidden_states[-2]
    torch.testing.assert_close(tower(IDS[:1])[0], expected, atol=1e-5, rtol=1e-5)


def test_fp8_weights_stay_fp8_and_compute_in_float32(state):
    stored = {k: v.to(torch.float8_e4m3fn) for k, v in state.items()}
    config = Qwen3Config.detect_from_weights(header_of(stored), "")
    assert config.dtype == "F8_E4M3"
    tower = build_qwen3_encoder(config, stored)
    assert tower.dtype == torch.float8_e4m3fn
    reference = reference_model({k: v.float() for k, v in stored.items()})
    expected = _hidden(reference, IDS[:1]).hidden_states[-2]
    torch.testing.assert_close(tower(IDS[:1])[0], expected, atol=1e-5, rtol=1e-5)


def test_a_padding_mask_matches_transformers_on_the_kept_tokens(tower, reference):
    mask = token_mask(IDS.tolist(), 151643)
    assert mask[1].tolist() == [1] * 7 + [0] * 6
    expected = _hidden(reference, IDS, mask).hidden_states[-2]
    ours = tower.encode_ids(IDS, layer_idx=-2, attention_mask=mask)
    kept = mask.bool()
    torch.testing.assert_close(ours[kept], expected[kept], atol=1e-5, rtol=1e-5)
    alone = tower.encode_ids(IDS[1:, :7], layer_idx=-2)
    torch.testing.assert_close(ours[1, :7], alone[0], atol=1e-5, rtol=1e-5)


def test_comfyuis_token_mask_rules():
    pad = 151643
    assert token_mask([[5, 6, pad, 7, pad]], pad).tolist() == [[1, 1, 0, 0, 0]]
    assert token_mask([[pad, pad, 5, 6, pad]], pad).tolist() == [[0, 0, 1, 1, 0]]  # left padding
    vector = torch.zeros(32)
    assert token_mask([[5, pad, vector]], pad).tolist() == [[1, 0, 1]]  # an embedding counts 1


# --- ComfyUI's encode_token_weights --------------------------------------------------------------

def test_encode_token_weights_returns_the_mask_and_no_pooled_output(tower):
    pairs = [[(int(t), 1.0) for t in IDS[0]]]
    cond, pooled, extra = tower.encode_token_weights(pairs)
    assert cond.shape == (1, IDS.shape[1], 32) and pooled is None
    assert extra["attention_mask"].shape == (1, IDS.shape[1])
    torch.testing.assert_close(cond, tower(IDS[:1])[0])


def test_weights_interpolate_from_an_all_pad_row(tower):
    ids = [int(t) for t in IDS[0]]
    weights = [1.0] * len(ids)
    weights[4] = 1.5
    cond = tower.encode_token_weights([list(zip(ids, weights))])[0]
    both = tower([ids, [151643] * len(ids)])[0]
    expected = both[0].clone()
    expected[4] = both[1][4] + (both[0][4] - both[1][4]) * 1.5
    torch.testing.assert_close(cond[0], expected, atol=1e-6, rtol=1e-6)


def test_clip_skip_options_select_another_block(tower, reference):
    with tower.using_options(dataclasses.replace(tower.options, layer_idx=0)):
        first = tower(IDS[:1])[0]
    torch.testing.assert_close(first, _hidden(reference, IDS[:1]).hidden_states[1], atol=1e-5, rtol=1e-5)
    tower.set_clip_options({"layer": None})
    try:
        torch.testing.assert_close(tower(IDS[:1])[0], _hidden(reference, IDS[:1]).last_hidden_state,
                                   atol=1e-5, rtol=1e-5)
    finally:
        tower.reset_clip_options()
    assert tower.options.layer_idx == -2


# --- errors ------------------------------------------------------------------------------------------

def test_bad_files_are_key_errors(config, state):
    with pytest.raises(Qwen3KeyError, match="missing keys"):
        build_qwen3_encoder(config, {k: v for k, v in state.items() if "layers.2.mlp" not in k})
    with pytest.raises(Qwen3KeyError, match="without the scaled_fp8 marker"):
        build_qwen3_encoder(config, {**state, "model.layers.0.mlp.up_proj.scale_weight": torch.ones(())})
    with pytest.raises(Qwen3KeyError, match="not a weight"):
        build_qwen3_encoder(config, {**state, "vision.proj.weight": torch.ones(1)})
    wrong = dict(state, **{"model.layers.0.mlp.up_proj.weight": torch.zeros(47, 32)})
    with pytest.raises(Qwen3KeyError, match="expected shape"):
        build_qwen3_encoder(config, wrong)
    tower = build_qwen3_encoder(config, {**state, "lm_head.weight": torch.zeros(1)})  # ignored
    assert isinstance(tower, Qwen3TextEncoder)


def test_token_ids_outside_the_table_are_refused(tower):
    with pytest.raises(TokenizeError, match="outside"):
        tower.encode_ids(torch.tensor([[TINY_QWEN3["vocab_size"]]]))

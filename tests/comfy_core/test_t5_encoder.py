"""The T5 tower: numerics against transformers' T5EncoderModel loaded on its own from the same
tiny weights, ComfyUI's weighting rule, layers, masks, fp16 / fp8 storage, keys and errors."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from comfy_core.text_encoders.errors import TextEncoderKeyError
from comfy_core.text_encoders.t5 import (
    T5KeyError,
    T5TextEncoder,
    build_t5_encoder,
    relative_position_buckets,
)
from comfy_core.text_encoders.t5_config import T5Config
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.t5_files import header_of, tiny_t5_state_dict

SD3_PREFIX = "text_encoders.t5xxl.transformer."
# Long enough for offsets beyond the 128-token max distance (the shared far bucket).
IDS = torch.tensor([[5, 9, 12, 33, 1] + [0] * 15, list(range(3, 23))])
LONG_IDS = torch.tensor([[(7 * i) % 60 + 3 for i in range(150)] + [1]])


def _build(sd, prefix="", dtype=None, **kwargs) -> T5TextEncoder:
    return build_t5_encoder(T5Config.detect_from_weights(header_of(sd), prefix), sd, dtype, **kwargs)


def _reference(sd, prefix=""):
    """transformers' own T5 encoder, loaded independently from the same tensors."""
    from transformers import T5EncoderModel

    config = T5Config.detect_from_weights(header_of(sd), prefix)
    model = T5EncoderModel(config.to_transformers()).eval()
    model.load_state_dict({k[len(prefix):]: v.float() for k, v in sd.items()}, strict=False)
    assert model.encoder.embed_tokens.weight.data_ptr() == model.shared.weight.data_ptr()  # tied, loaded
    return model


@pytest.fixture(scope="module")
def gated_sd():
    return tiny_t5_state_dict(seed=1)


@pytest.fixture(scope="module")
def encoder(gated_sd):
    return _build(gated_sd)


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("ids", [IDS, LONG_IDS], ids=["short", "long"])
def test_final_output_matches_transformers(gated, ids):
    sd = tiny_t5_state_dict(gated=gated, seed=2)
    ours = _build(sd).encode_ids(ids)
    with torch.no_grad():
        expected = _reference(sd)(input_ids=ids).last_hidden_state
    assert ours.dtype == torch.float32 and ours.shape == (ids.shape[0], ids.shape[1], 32)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)


def test_prefixed_single_file_keys_load_and_match(gated_sd):
    prefixed = {SD3_PREFIX + k: v for k, v in gated_sd.items()}
    prefixed["model.diffusion_model.x.weight"] = torch.zeros(1)  # other parts of the file are not read
    torch.testing.assert_close(_build(prefixed, SD3_PREFIX).encode_ids(IDS), _build(gated_sd).encode_ids(IDS),
                               atol=0, rtol=0)


def test_hidden_layer_and_its_final_norm_match_transformers(encoder, gated_sd):
    with torch.no_grad():
        out = _reference(gated_sd)(input_ids=IDS, output_hidden_states=True)
    first_block = out.hidden_states[1]  # after block 0, before the final norm
    torch.testing.assert_close(encoder.encode_ids(IDS, layer_idx=0, layer_norm_hidden=False), first_block,
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(encoder.encode_ids(IDS, layer_idx=-2, layer_norm_hidden=False), first_block,
                               atol=1e-5, rtol=1e-5)
    normed = encoder.transformer.encoder.final_layer_norm(first_block)
    torch.testing.assert_close(encoder.encode_ids(IDS, layer_idx=-2), normed, atol=1e-5, rtol=1e-5)


def test_attention_mask_matches_transformers(encoder, gated_sd):
    mask = torch.tensor([[1] * 5 + [0] * 15, [1] * 20])
    with torch.no_grad():
        expected = _reference(gated_sd)(input_ids=IDS, attention_mask=mask).last_hidden_state
    ours = encoder.encode_ids(IDS, attention_mask=mask)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(ours[0], encoder.encode_ids(IDS)[0], atol=1e-3)  # padding is attended by default


def test_position_buckets_follow_mesh_tensorflow():
    buckets = relative_position_buckets(1, 300)[0]  # query 0: keys after it, offsets 0..299
    assert buckets[:8].tolist() == [0] + [16 + d for d in range(1, 8)]  # exact buckets, second half
    assert buckets[128:].unique().tolist() == [31]  # beyond max_distance: the last bucket
    assert relative_position_buckets(300, 1)[:, 0][:8].tolist() == list(range(8))  # keys before the query
    assert torch.all(buckets[1:].diff() >= 0)


def test_weighting_is_interpolation_from_the_empty_prompt(encoder):
    tokens = [5, 9, 12, 1, 0, 0]
    weights = [1.0, 1.3, 0.5, 1.0, 1.0, 1.0]
    cond, pooled = encoder.encode_token_weights([list(zip(tokens, weights))])
    assert pooled is None and cond.shape == (1, 6, 32)
    z = encoder.encode_ids(torch.tensor([tokens]))[0]
    z_empty = encoder.encode_ids(torch.tensor([[1, 0, 0, 0, 0, 0]]))[0]  # end token, then padding
    expected = z.clone()
    for position, weight in enumerate(weights):
        if weight != 1.0:
            expected[position] = z_empty[position] + (z[position] - z_empty[position]) * weight
    torch.testing.assert_close(cond[0], expected, atol=1e-5, rtol=1e-5)
    unweighted, _ = encoder.encode_token_weights([[(t, 1.0) for t in tokens]])
    torch.testing.assert_close(unweighted[0], z, atol=1e-5, rtol=1e-5)


def test_several_chunks_concatenate_and_masks_come_back_when_enabled(gated_sd):
    masked = _build(gated_sd, attention_mask=True)
    chunks = [[(5, 1.0), (9, 1.2), (1, 1.0), (0, 1.0)], [(7, 1.0), (1, 1.0), (0, 1.0), (0, 1.0)]]
    cond, pooled, extra = masked.encode_token_weights(chunks)
    assert cond.shape == (1, 8, 32) and pooled is None
    assert extra["attention_mask"].tolist() == [[1, 1, 1, 0, 1, 1, 0, 0]]
    alone = masked.encode_ids(torch.tensor([[7, 1, 0, 0]]), attention_mask=torch.tensor([[1, 1, 0, 0]]))
    torch.testing.assert_close(cond[:, 4:], alone, atol=1e-5, rtol=1e-5)  # the mask was used


def test_fp16_storage_computes_in_float32(gated_sd):
    half = {k: v.half() for k, v in gated_sd.items()}
    encoder16 = _build(half)
    assert encoder16.dtype == torch.float16
    assert encoder16.transformer.encoder.block[0].layer[0].SelfAttention.q.weight.dtype == torch.float16
    rounded = _build({k: v.float() for k, v in half.items()})  # the same values, stored in float32
    torch.testing.assert_close(encoder16.encode_ids(IDS), rounded.encode_ids(IDS), atol=1e-5, rtol=1e-5)


def test_fp8_storage_stays_fp8_and_is_close_to_float32(encoder, gated_sd):
    fp8 = {k: v.to(torch.float8_e4m3fn) for k, v in gated_sd.items()}
    encoder8 = _build(fp8)
    weights = [p.dtype for p in encoder8.parameters()]
    assert set(weights) == {torch.float8_e4m3fn}
    out = encoder8.encode_ids(IDS)
    reference = encoder.encode_ids(IDS)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert torch.nn.functional.cosine_similarity(out.flatten(), reference.flatten(), dim=0) > 0.98
    assert (out - reference).abs().mean() < 0.1 * reference.abs().mean()
    # requested storage dtype converts
    assert _build(fp8, dtype=torch.float32).dtype == torch.float32


def test_state_dict_names_are_comfyui_names(encoder, gated_sd):
    names = set(encoder.state_dict())
    assert names == {f"transformer.{k}" for k in gated_sd}
    assert "transformer.encoder.embed_tokens.weight" not in names


def test_clip_options_select_a_layer_and_reset(encoder):
    final = encoder.encode_token_weights([[(5, 1.0), (1, 1.0)]])[0]
    encoder.set_clip_options({"layer": -2})
    try:
        assert encoder.layer == "hidden" and encoder.layer_idx == -2
        hidden = encoder.encode_token_weights([[(5, 1.0), (1, 1.0)]])[0]
        torch.testing.assert_close(hidden, encoder.encode_ids(torch.tensor([[5, 1]]), layer_idx=-2))
        encoder.set_clip_options({"layer": -30})  # beyond the depth: the final output
        assert encoder.layer == "last"
    finally:
        encoder.reset_clip_options()
    assert encoder.layer_idx is None
    torch.testing.assert_close(encoder.encode_token_weights([[(5, 1.0), (1, 1.0)]])[0], final, atol=0, rtol=0)


@dataclass(frozen=True)
class _SetOptions:  # the fields of an encoder set's EncoderOptions the tower reads
    slot: str = "t5xxl"
    token_key: str = "t5xxl"
    pad_token: int = 0
    layer_idx: int | None = -1
    layer_norm_hidden: bool = False
    projected_pooled: bool = False


def test_using_options_from_an_encoder_set(encoder):
    with encoder.using_options(_SetOptions()):
        out = encoder.encode_token_weights([[(5, 1.0), (1, 1.0)]])[0]
    # the last block's output without the final norm
    torch.testing.assert_close(out, encoder.encode_ids(torch.tensor([[5, 1]]), layer_idx=-1, layer_norm_hidden=False))
    assert encoder.options.layer_idx is None


def test_embedding_vectors_replace_token_positions(encoder):
    table = encoder.token_embedding().weight
    vector = table[9].clone()
    by_vector, _ = encoder([[5, vector, 1]])
    by_id, _ = encoder([[5, 9, 1]])
    torch.testing.assert_close(by_vector, by_id, atol=0, rtol=0)


def test_missing_and_unknown_keys_are_typed_errors(gated_sd):
    missing = dict(gated_sd)
    missing.pop("encoder.block.1.layer.1.layer_norm.weight")
    config = T5Config.detect_from_weights(header_of(gated_sd), "")
    with pytest.raises(T5KeyError, match="encoder.block.1.layer.1.layer_norm.weight") as caught:
        build_t5_encoder(config, missing)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, TextEncoderKeyError)
    prefixed = {SD3_PREFIX + k: v for k, v in gated_sd.items()}
    prefixed[SD3_PREFIX + "something.else"] = torch.zeros(1)
    with pytest.raises(T5KeyError, match="something.else"):
        _build(prefixed, SD3_PREFIX)
    stray = dict(gated_sd)
    stray["encoder.block.0.layer.0.SelfAttention.q.scale_weight"] = torch.tensor(1.0)
    with pytest.raises(T5KeyError, match="scaled_fp8 marker"):
        _build(stray)


def test_scaled_fp8_files_give_the_true_weights(gated_sd):
    """ComfyUI's t5xxl_fp8_e4m3fn_scaled layout: fp8 of weight / scale plus `scale_weight` per layer."""
    scaled = {"scaled_fp8": torch.zeros(0, dtype=torch.float8_e4m3fn)}
    for key, value in gated_sd.items():
        if key.startswith("encoder.block.") and key.endswith(".weight") and value.ndim == 2:
            scale = value.abs().max() / 448.0
            scaled[key] = (value / scale).to(torch.float8_e4m3fn)
            scaled[key[:-len("weight")] + "scale_weight"] = scale.reshape(())
        else:
            scaled[key] = value
    ours = _build(scaled)
    key = "encoder.block.0.layer.0.SelfAttention.q.weight"
    layer = ours.transformer.get_submodule(key[:-len(".weight")])
    # kept as stored, the scale applied per call (ComfyUI's scaled_fp8_ops)
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.scale_weight.dtype == torch.float32
    true = layer.weight.float() * layer.scale_weight
    assert (true - gated_sd[key]).abs().max() <= 0.07 * gated_sd[key].abs().max()
    a = ours.encode_ids(IDS)
    b = _build(gated_sd).encode_ids(IDS)
    assert (a - b).abs().max() < 0.15 * b.abs().max()


def test_a_file_with_the_tied_table_and_a_decoder_loads(gated_sd):
    full = dict(gated_sd)
    full["encoder.embed_tokens.weight"] = gated_sd["shared.weight"]
    full["decoder.block.0.layer.0.SelfAttention.q.weight"] = torch.zeros(32, 32)
    full["lm_head.weight"] = torch.zeros(64, 32)
    torch.testing.assert_close(_build(full).encode_ids(IDS), _build(gated_sd).encode_ids(IDS), atol=0, rtol=0)

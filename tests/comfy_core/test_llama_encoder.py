"""The Llama 3 text tower (HiDream's Llama 3.1 8B): detection from names and shapes, our fp32
forward against transformers' `LlamaModel` on the same tiny random weights (every hidden state,
with and without padding), storage dtypes, ComfyUI's "all" output and token handling, typed errors."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.text_encoders.llama import (PAD_ID, START_ID, LlamaConfig, LlamaDetectionError, LlamaKeyError,
                                            build_llama_encoder)
from tests.fixtures.llama_files import reference_model, tiny_llama_state_dict, write_llama_file


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def state():
    return tiny_llama_state_dict(seed=1)


@pytest.fixture(scope="module")
def encoder(state):
    return build_llama_encoder(LlamaConfig.detect_from_weights(state), state)


def _header(state: dict) -> dict:
    return {k: SimpleNamespace(shape=tuple(v.shape)) for k, v in state.items()}


def test_config_is_read_from_names_and_shapes(state):
    config = LlamaConfig.detect_from_weights(_header(state))
    assert (config.hidden_size, config.intermediate_size, config.num_layers) == (32, 48, 3)
    assert (config.num_heads, config.num_kv_heads, config.head_dim, config.vocab_size) == (2, 1, 128, 128_256)
    assert (config.rms_norm_eps, config.rope_theta, config.slot) == (1e-5, 500_000.0, "llama")
    prefixed = LlamaConfig.detect_from_weights(_header({"text_encoders.llama.transformer." + k: v
                                                        for k, v in state.items()}), "text_encoders.llama.transformer.")
    assert prefixed is not None and prefixed.prefix == "text_encoders.llama.transformer."


def test_other_decoders_are_not_llama_and_bad_towers_are_typed_errors(state):
    header = _header(state)
    assert LlamaConfig.detect_from_weights({**header, "model.layers.0.self_attn.q_norm.weight":
                                            SimpleNamespace(shape=(128,))}) is None  # Qwen3
    assert LlamaConfig.detect_from_weights({**header, "model.layers.0.self_attn.q_proj.bias":
                                            SimpleNamespace(shape=(256,))}) is None  # Qwen2.5
    assert LlamaConfig.detect_from_weights({}) is None
    wrong = {**header, "model.layers.2.mlp.up_proj.weight": SimpleNamespace(shape=(40, 32))}
    with pytest.raises(LlamaDetectionError, match="layers.2.mlp.up_proj.weight"):
        LlamaConfig.detect_from_weights(wrong)
    gap = {k: v for k, v in header.items() if not k.startswith("model.layers.1.")}
    with pytest.raises(LlamaDetectionError, match="block indices"):
        LlamaConfig.detect_from_weights(gap)
    config = LlamaConfig.detect_from_weights(header)
    with pytest.raises(LlamaKeyError, match="without the scaled_fp8 marker"):
        build_llama_encoder(config, {**state, "model.layers.0.self_attn.q_proj.scale_weight": torch.ones(())})
    with pytest.raises(LlamaKeyError, match="missing"):
        build_llama_encoder(config, {k: v for k, v in state.items() if "o_proj" not in k})


def _ids(batch=2, length=9, seed=4):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 128_000, (batch, length), generator=gen)
    ids[:, 0] = START_ID
    return ids


def test_every_hidden_state_matches_transformers_llama_model(state, encoder):
    ids = _ids()
    with torch.no_grad():
        ours = encoder.encode_ids(ids, all_layers=True)  # [B, 4, T, W]
        theirs = reference_model(state)(input_ids=ids, output_hidden_states=True).hidden_states
    assert ours.shape == (2, 4, 9, 32)
    assert (ours - torch.stack(theirs, dim=1)).abs().max() < 1e-5
    with torch.no_grad():
        last = encoder.encode_ids(ids, all_layers=False, layer_idx=None)
        middle = encoder.encode_ids(ids, all_layers=False, layer_idx=1)
    assert (last - theirs[-1]).abs().max() < 1e-5 and (middle - theirs[2]).abs().max() < 1e-5


def test_padded_rows_match_transformers_with_its_attention_mask(state, encoder):
    ids = _ids()
    ids[0, 6:] = PAD_ID
    rows = ids.tolist()
    with torch.no_grad():
        states, _, extra = encoder(rows)
        mask = extra["attention_mask"]
        theirs = reference_model(state)(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert mask[0].tolist() == [1] * 6 + [0] * 3 and mask[1].tolist() == [1] * 9
    assert states.shape == (2, 4, 9, 32)
    assert (states[:, :, :6] - torch.stack(theirs, dim=1)[:, :, :6]).abs().max() < 1e-5
    assert (states[1] - torch.stack(theirs, dim=1)[1]).abs().max() < 1e-5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn])
def test_stored_dtypes_stay_stored_and_compute_in_float32(tmp_path, state, dtype):
    from safetensors.torch import load_file

    stored = load_file(str(write_llama_file(tmp_path / "llama.safetensors", state, dtype=dtype)))
    encoder = build_llama_encoder(LlamaConfig.detect_from_weights(stored), stored)
    assert encoder.transformer.model.layers[0].self_attn.q_proj.weight.dtype == dtype
    reference = build_llama_encoder(LlamaConfig.detect_from_weights(stored), {k: v.float() for k, v in stored.items()})
    ids = _ids()
    with torch.no_grad():
        ours, full = encoder.encode_ids(ids), reference.encode_ids(ids)
    assert ours.dtype == torch.float32
    assert (ours - full).abs().max() < 1e-4  # the same rounded weights, both computed in float32


def test_comfyui_token_handling(encoder):
    assert encoder.special_tokens == {"start": START_ID, "pad": PAD_ID}
    assert encoder.empty_tokens(4) == [START_ID, PAD_ID, PAD_ID, PAD_ID]
    before = encoder.options
    encoder.set_clip_options({"layer": -2})  # HiDream's layer "all" ignores a layer choice, as ComfyUI's
    assert encoder.options == before
    weighted = [[(START_ID, 1.0), (100, 1.5), (200, 1.0), (PAD_ID, 1.0)]]
    cond, pooled, extra = encoder.encode_token_weights(weighted)
    assert cond.shape == (1, 4, 4, 32) and pooled is None and extra["attention_mask"].tolist() == [[1, 1, 1, 0]]
    plain, _, _ = encoder.encode_token_weights([[(t, 1.0) for t, _ in weighted[0]]])
    assert torch.equal(cond[:, :, 0], plain[:, :, 0]) and not torch.equal(cond[:, :, 1], plain[:, :, 1])
    with pytest.raises(Exception, match="outside"):
        encoder.encode_ids(torch.tensor([[START_ID, 200_000]]))

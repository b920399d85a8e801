"""T5 encoder detection from tensor names and shapes only (safetensors headers, never data)."""
from __future__ import annotations

import pytest
import safetensors.torch
import torch

from comfy_core.checkpoint.header import read_safetensors_header
from comfy_core.text_encoders.errors import TextEncoderDetectionError
from comfy_core.text_encoders.t5_config import T5Config, T5DetectionError
from tests.fixtures.t5_files import HeaderEntry, header_of, tiny_t5_state_dict

SD3_PREFIX = "text_encoders.t5xxl.transformer."


class _NoData:
    """A header entry whose data must never be read."""

    def __init__(self, shape, dtype="F16"):
        self.shape = tuple(shape)
        self.dtype = dtype

    def __getattr__(self, name):
        raise AssertionError(f"detection read {name!r} of a header entry")


def _xxl_header(prefix="", dtype="F16", layers=24):
    """T5-XXL v1.1's real shapes (google/t5-v1_1-xxl, SD3 / Flux), header entries only."""
    t = {f"{prefix}shared.weight": _NoData((32128, 4096), dtype),
         f"{prefix}encoder.final_layer_norm.weight": _NoData((4096,), dtype)}
    for i in range(layers):
        b = f"{prefix}encoder.block.{i}.layer."
        for name in "qkv":
            t[f"{b}0.SelfAttention.{name}.weight"] = _NoData((4096, 4096), dtype)
        t[f"{b}0.SelfAttention.o.weight"] = _NoData((4096, 4096), dtype)
        t[f"{b}0.layer_norm.weight"] = _NoData((4096,), dtype)
        t[f"{b}1.DenseReluDense.wi_0.weight"] = _NoData((10240, 4096), dtype)
        t[f"{b}1.DenseReluDense.wi_1.weight"] = _NoData((10240, 4096), dtype)
        t[f"{b}1.DenseReluDense.wo.weight"] = _NoData((4096, 10240), dtype)
        t[f"{b}1.layer_norm.weight"] = _NoData((4096,), dtype)
    t[f"{prefix}encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = _NoData((32, 64), dtype)
    return t


@pytest.mark.parametrize("prefix", ["", SD3_PREFIX])
@pytest.mark.parametrize("dtype", ["F16", "BF16", "F8_E4M3"])
def test_t5_xxl_shapes_from_header_only(prefix, dtype):
    config = T5Config.detect_from_weights(_xxl_header(prefix, dtype), prefix)
    assert (config.d_model, config.d_kv, config.num_heads, config.d_ff, config.num_layers, config.vocab_size) == \
        (4096, 64, 64, 10240, 24, 32128)
    assert config.feed_forward == "gated-gelu" and config.gated
    assert config.prefix == prefix and config.dtype == dtype
    assert config.fp8 == (dtype == "F8_E4M3")
    assert (config.relative_attention_num_buckets, config.relative_attention_max_distance) == (32, 128)


def test_no_t5_under_the_prefix_is_none():
    header = _xxl_header(SD3_PREFIX)
    assert T5Config.detect_from_weights(header, "") is None
    assert T5Config.detect_from_weights({}, "") is None


def test_detection_from_a_file_whose_data_is_garbage(tmp_path):
    path = tmp_path / "t5.safetensors"
    safetensors.torch.save_file(tiny_t5_state_dict(SD3_PREFIX, dtype=torch.float16), str(path))
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    path.write_bytes(raw[: 8 + n] + b"\xff" * (len(raw) - 8 - n))
    config = T5Config.detect_from_weights(read_safetensors_header(path).tensors, SD3_PREFIX)
    assert (config.d_model, config.d_kv, config.num_heads, config.d_ff, config.num_layers, config.vocab_size) == \
        (32, 8, 4, 48, 2, 64)
    assert config.dtype == "F16"


def test_old_relu_t5_layout():
    config = T5Config.detect_from_weights(header_of(tiny_t5_state_dict(gated=False, d_ff=40)), "")
    assert config.feed_forward == "relu" and not config.gated and config.d_ff == 40
    hf = config.to_transformers()
    assert (hf.dense_act_fn, hf.is_gated_act) == ("relu", False)
    gated = T5Config.detect_from_weights(header_of(tiny_t5_state_dict()), "").to_transformers()
    assert gated.is_gated_act and gated.dense_act_fn == "gelu_new"  # the tanh GELU


def test_diffusers_and_tied_table_layouts():
    sd = tiny_t5_state_dict()
    both = dict(sd, **{"encoder.embed_tokens.weight": sd["shared.weight"]})  # tied copy kept in the file
    assert T5Config.detect_from_weights(header_of(both), "").embedding_key == "shared.weight"
    only_encoder = {("encoder.embed_tokens.weight" if k == "shared.weight" else k): v for k, v in sd.items()}
    assert T5Config.detect_from_weights(header_of(only_encoder), "").embedding_key == "encoder.embed_tokens.weight"


def test_heads_come_from_the_position_bias_table():
    config = T5Config.detect_from_weights(header_of(tiny_t5_state_dict(num_heads=2, d_kv=16)), "")
    assert (config.num_heads, config.d_kv, config.inner_dim) == (2, 16, 32)


def test_scaled_fp8_marker_is_recorded():
    header = dict(header_of(tiny_t5_state_dict()), scaled_fp8=HeaderEntry((0,), "F8_E4M3"))
    assert T5Config.detect_from_weights(header, "").scaled_fp8


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop("encoder.block.1.layer.0.SelfAttention.q.weight"), "encoder.block.1.layer.0.SelfAttention.q"),
    (lambda t: t.pop("encoder.block.0.layer.1.DenseReluDense.wi_1.weight"), "wi_1"),
    (lambda t: t.pop("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"), "relative_attention_bias"),
    (lambda t: t.pop("shared.weight"), "embed_tokens"),
    (lambda t: t.update({"encoder.block.0.layer.0.SelfAttention.k.weight": HeaderEntry((32, 31), "F32")}), "k.weight"),
    (lambda t: t.update({"encoder.block.4.layer.0.layer_norm.weight": HeaderEntry((32,), "F32")}), "[3]"),
    (lambda t: [t.pop(k) for k in list(t) if k.startswith("encoder.block.")], "no encoder.block"),
    (lambda t: t.update({"encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight":
                         HeaderEntry((32, 4), "F32")}), "UMT5"),
])
def test_truncated_or_inconsistent_tower_raises_a_typed_error(change, message):
    header = header_of(tiny_t5_state_dict(num_layers=3))
    change(header)
    with pytest.raises(T5DetectionError, match=message.replace("[", r"\[").replace("]", r"\]")) as caught:
        T5Config.detect_from_weights(header, "")
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, TextEncoderDetectionError)

"""The Gemma 4 text tower (comfy_core/text_encoders/gemma4.py) against transformers' Gemma 4 (the
independent reference) on the same tiny random weights: the 12B's layout (values = keys on global
blocks, one key head there, wider global heads, proportional RoPE), E2B's (per-layer embeddings,
key/value-sharing blocks with a double-wide feed-forward) and E4B's (per-layer embeddings, sharing
blocks of the usual width); detection from names and shapes; generation's cached steps."""
from __future__ import annotations

import pytest
import torch

from comfy_core.text_encoders.gemma4 import (FULL, SLIDING, Gemma4Cache, Gemma4Config, Gemma4DetectionError,
                                             Gemma4KeyError, build_gemma4_encoder)

transformers = pytest.importorskip("transformers")
from transformers import Gemma4TextConfig, Gemma4TextModel  # noqa: E402


def _reference(kind: str) -> Gemma4TextModel:
    """A tiny transformers Gemma 4 text model of the given layout with random weights (norms and
    layer gains too)."""
    common = dict(vocab_size=96, hidden_size=32, num_attention_heads=4, head_dim=8, global_head_dim=16,
                  rms_norm_eps=1e-6, final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh",
                  rope_parameters={SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
                                   FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                          "rope_theta": 1_000_000.0}}, use_cache=False)
    if kind == "12b":
        config = Gemma4TextConfig(**common, intermediate_size=48, num_hidden_layers=6, num_key_value_heads=2,
                                  num_global_key_value_heads=1, attention_k_eq_v=True, sliding_window=3,
                                  layer_types=[SLIDING] * 5 + [FULL], hidden_size_per_layer_input=0,
                                  num_kv_shared_layers=0)
    elif kind == "e2b":
        config = Gemma4TextConfig(**common, intermediate_size=40, num_hidden_layers=7, num_key_value_heads=1,
                                  sliding_window=4,
                                  layer_types=[SLIDING, SLIDING, FULL, SLIDING, SLIDING, SLIDING, FULL],
                                  hidden_size_per_layer_input=8, vocab_size_per_layer_input=96,
                                  num_kv_shared_layers=3, use_double_wide_mlp=True)
    else:  # e4b
        config = Gemma4TextConfig(**common, intermediate_size=40, num_hidden_layers=6, num_key_value_heads=2,
                                  sliding_window=4, layer_types=[SLIDING, SLIDING, FULL, SLIDING, SLIDING, FULL],
                                  hidden_size_per_layer_input=8, vocab_size_per_layer_input=96,
                                  num_kv_shared_layers=2, use_double_wide_mlp=False)
    config._attn_implementation = "eager"
    torch.manual_seed({"12b": 0, "e2b": 1, "e4b": 2}[kind])
    model = Gemma4TextModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.randn_like(param) * (0.3 if "norm" in name else 0.2) + (1.0 if "norm" in name else 0.0))
        for layer in model.layers:
            layer.layer_scalar.copy_(torch.rand(1) + 0.5)
    return model


def _file(model: Gemma4TextModel, extra: dict | None = None) -> dict[str, torch.Tensor]:
    """ComfyUI's layout: the text model under `model.`, plus what such files carry besides."""
    sd = {f"model.{k}": v.clone() for k, v in model.state_dict().items()}
    sd.update(extra or {})
    return sd


def _overrides(kind: str) -> dict:
    # What the shapes cannot show for these tiny towers (ComfyUI's configs hold the real ones).
    return {"12b": {"sliding_window": 3}, "e2b": {"sliding_window": 4},
            "e4b": {"sliding_window": 4, "num_kv_shared_layers": 2}}[kind]


@pytest.mark.parametrize("kind", ["12b", "e2b", "e4b"])
def test_hidden_states_equal_transformers(kind: str) -> None:
    reference = _reference(kind)
    sd = _file(reference, {"tokenizer_json": torch.zeros(4, dtype=torch.uint8),
                           "text_embedding_projection.video_aggregate_embed.weight": torch.zeros(2, 2)})
    config = Gemma4Config.detect_from_weights(sd, "", **_overrides(kind))
    assert config is not None
    tower = build_gemma4_encoder(config, sd, torch.float32)
    ids = torch.randint(3, 96, (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = reference(input_ids=ids, output_hidden_states=True)
        states = tower.hidden_states(ids)
    assert len(states) == config.num_layers + 1 == len(expected.hidden_states)
    for ours, theirs in zip(states[:-1], expected.hidden_states[:-1]):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(states[-1], expected.last_hidden_state, rtol=1e-4, atol=1e-4)
    # encode_ids: the final normed output, or one block's output
    with torch.no_grad():
        torch.testing.assert_close(tower.encode_ids(ids), expected.last_hidden_state, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(tower.encode_ids(ids, layer_idx=1), states[2], rtol=1e-5, atol=1e-5)


def test_detection_reads_the_layout_from_shapes() -> None:
    sd = _file(_reference("12b"))
    config = Gemma4Config.detect_from_weights(sd, "")
    assert config.layer_types == (SLIDING,) * 5 + (FULL,)
    assert (config.head_dim, config.global_head_dim, config.num_heads, config.num_kv_heads) == (8, 16, 4, 2)
    assert config.attention_k_eq_v and config.num_global_kv_heads == 1
    assert config.hidden_size_per_layer_input == 0 and config.num_kv_shared_layers == 0
    e2b = Gemma4Config.detect_from_weights(_file(_reference("e2b")), "")
    # the double-wide feed-forward marks the key/value-sharing blocks
    assert e2b.num_kv_shared_layers == 3 and e2b.use_double_wide_mlp and e2b.hidden_size_per_layer_input == 8
    assert e2b.layer_types == (SLIDING, SLIDING, FULL, SLIDING, SLIDING, SLIDING, FULL)
    assert [e2b.kv_source(i) for i in range(7)] == [0, 1, 2, 3, 3, 3, 2]
    # a Gemma 3 file (no layer_scalar) is not Gemma 4
    gemma3 = {k: v for k, v in sd.items() if not k.endswith("layer_scalar")}
    assert Gemma4Config.detect_from_weights(gemma3, "") is None
    broken = dict(sd)
    del broken["model.layers.2.mlp.up_proj.weight"]
    with pytest.raises(Gemma4DetectionError, match="up_proj"):
        Gemma4Config.detect_from_weights(broken, "")


def test_unknown_keys_are_refused_and_unused_shared_kv_skipped() -> None:
    reference = _reference("e4b")
    sd = _file(reference)
    config = Gemma4Config.detect_from_weights(sd, "", **_overrides("e4b"))
    # ComfyUI's files may still hold the sharing blocks' key / value weights: read, not used
    with_kv = dict(sd)
    with_kv["model.layers.5.self_attn.k_proj.weight"] = torch.zeros(2 * 16, 32)
    build_gemma4_encoder(config, with_kv, torch.float32)
    odd = dict(sd)
    odd["model.layers.0.self_attn.extra.weight"] = torch.zeros(1)
    with pytest.raises(Gemma4KeyError, match="extra"):
        build_gemma4_encoder(config, odd, torch.float32)


@pytest.mark.parametrize("kind", ["12b", "e2b"])
def test_cached_decoding_equals_the_full_pass(kind: str) -> None:
    """decode_step over a prompt then one token at a time gives the full pass's last states and
    the soft-capped logits of the tied table (transformers' LM head on the same weights)."""
    from transformers import Gemma4ForCausalLM

    reference = _reference(kind)
    sd = _file(reference)
    config = Gemma4Config.detect_from_weights(sd, "", **_overrides(kind))
    tower = build_gemma4_encoder(config, sd, torch.float32)
    ids = torch.randint(3, 96, (1, 8), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        full = tower.encode_ids(ids)  # [1, 8, W]
        cache = Gemma4Cache()
        first = tower.decode_step(tower.embed_ids(ids[:, :5]), cache)
        torch.testing.assert_close(first, full[:, 4], rtol=1e-4, atol=1e-4)
        for step in range(5, 8):
            last = tower.decode_step(tower.embed_ids(ids[:, step:step + 1]), cache)
            torch.testing.assert_close(last, full[:, step], rtol=1e-4, atol=1e-4)
        lm = Gemma4ForCausalLM(reference.config).eval()
        lm.model.load_state_dict(reference.state_dict())
        lm.lm_head.weight = lm.model.embed_tokens.weight
        expected = lm(input_ids=ids).logits[:, -1]
        torch.testing.assert_close(tower.logits(last), expected, rtol=1e-4, atol=1e-4)

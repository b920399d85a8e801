"""The T5Gemma encoder tower (comfy_core/text_encoders/t5gemma.py, Stable Audio 3's text encoder)
against transformers' `T5GemmaEncoderModel` on the same tiny random weights (eager attention:
soft-capped scores, sliding-window and full layers, padded keys masked), detection from names and
shapes, refusals."""
from __future__ import annotations

import pytest
import torch

from comfy_core.text_encoders.t5gemma import (T5GemmaConfig, T5GemmaDetectionError, T5GemmaKeyError,
                                              build_t5gemma_encoder)

transformers = pytest.importorskip("transformers")
TOLERANCE = 1e-5


def _reference(sliding_window: int = 3):
    from transformers import T5GemmaConfig as HFConfig, T5GemmaEncoderModel
    from transformers.models.t5gemma.configuration_t5gemma import T5GemmaModuleConfig

    module = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=sliding_window,
                  attn_logit_softcapping=5.0)
    config = HFConfig(encoder=T5GemmaModuleConfig(**module), decoder=T5GemmaModuleConfig(**module),
                      is_encoder_decoder=False, vocab_size=64)
    config.encoder._attn_implementation = "eager"
    model = T5GemmaEncoderModel(config).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def test_encoder_matches_transformers():
    reference = _reference()
    state = reference.state_dict()
    config = T5GemmaConfig.detect_from_weights(state, head_dim=16, attn_logit_softcapping=5.0, sliding_window=3)
    assert (config.prefix, config.num_attention_heads, config.num_key_value_heads, config.num_hidden_layers) == \
        ("encoder.", 4, 2, 2)
    ours = build_t5gemma_encoder(config, state)
    ids = torch.tensor([[2, 10, 11, 12, 13, 14, 15, 1], [2, 20, 21, 1, 0, 0, 0, 0]])
    mask = (torch.arange(8)[None] < torch.tensor([[8], [4]])).long()
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours(ids, mask)
    assert (got - expected)[mask.bool()].abs().max() < TOLERANCE  # padded queries' states are not used
    with torch.no_grad():  # the window matters: without it the first layer differs
        wide = build_t5gemma_encoder(T5GemmaConfig.detect_from_weights(
            state, head_dim=16, attn_logit_softcapping=5.0, sliding_window=None), state)(ids, mask)
    assert (wide - expected)[mask.bool()].abs().max() > 1e-3


def test_detection_and_refusals():
    state = _reference().state_dict()
    assert T5GemmaConfig.detect_from_weights({"shared.weight": torch.zeros(1)}) is None
    with pytest.raises(T5GemmaDetectionError, match="heads"):
        T5GemmaConfig.detect_from_weights(state, head_dim=12)
    broken = dict(state)
    broken["encoder.layers.1.mlp.up_proj.weight"] = torch.zeros(47, 32)
    with pytest.raises(T5GemmaKeyError, match="up_proj"):
        T5GemmaConfig.detect_from_weights(broken, head_dim=16)
    prefixed = {"model." + k: v for k, v in state.items()}
    assert T5GemmaConfig.detect_from_weights(prefixed, head_dim=16).prefix == "model.encoder."

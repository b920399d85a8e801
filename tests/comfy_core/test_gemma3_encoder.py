"""The Gemma 3 tower against transformers' `Gemma3TextModel` (5.25) within 1e-5 on tiny random
weights: per-head q/k norms, the five-sliding-one-global block pattern, two RoPE bases with the
global blocks' linear scaling, the token mask; detection from names and shapes."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from comfy_core.text_encoders.gemma import GemmaConfig
from comfy_core.text_encoders.gemma3 import Gemma3Config, attention_biases, build_gemma3_encoder

transformers = pytest.importorskip("transformers")

TINY = dict(hidden_size=32, intermediate_size=48, num_layers=6, num_heads=2, num_kv_heads=1, vocab_size=300)


def _tiny(window=3, prefix="", seed=0):
    config = Gemma3Config(prefix=prefix, sliding_window=window, **TINY)
    reference = transformers.Gemma3TextModel(config.to_transformers()).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in reference.named_parameters():
            values = torch.randn(param.shape, generator=generator)
            param.copy_(0.3 * values if "norm" in name else values / max(param.shape[-1], 1) ** 0.5)
    state = {prefix + "model." + k: v.clone() for k, v in reference.state_dict().items()}
    return config, reference, state


def test_detection_tells_gemma3_from_gemma2():
    _, _, state = _tiny(prefix="text_encoders.gemma3_12b.transformer.")
    prefix = "text_encoders.gemma3_12b.transformer."
    config = Gemma3Config.detect_from_weights(state, prefix)
    assert (config.hidden_size, config.num_layers, config.num_heads, config.num_kv_heads) == (32, 6, 2, 1)
    assert (config.sliding_window, config.rope_theta, config.rope_scale, config.rope_local_theta) == (
        1024, 1_000_000.0, 8.0, 10_000.0)  # ComfyUI's Gemma3_12B_Config
    assert GemmaConfig.detect_from_weights(state, prefix) is None
    assert [config.layer_type(i) for i in range(6)] == ["sliding_attention"] * 5 + ["full_attention"]


@pytest.mark.parametrize("window", [3, 1024])
def test_hidden_states_match_transformers(window):
    config, reference, state = _tiny(window)
    detected = dataclasses.replace(Gemma3Config.detect_from_weights(state, ""), sliding_window=window)
    encoder = build_gemma3_encoder(detected, state)
    ids = torch.randint(0, 300, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :3] = 0  # left padding, as LTX-2's tokenizer pads
    with torch.no_grad():
        ours = encoder.hidden_states(ids, mask)
        theirs = reference(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert len(ours) == len(theirs) == 7
    for a, b in zip(ours, theirs):
        assert torch.allclose(a[0], b[0], atol=1e-5), (a[0] - b[0]).abs().max()
        assert torch.allclose(a[1, 3:], b[1, 3:], atol=1e-5), (a[1, 3:] - b[1, 3:]).abs().max()
    with torch.no_grad():
        last = encoder.encode_ids(ids, layer_idx=None, attention_mask=mask)
        second_last = encoder.encode_ids(ids, layer_idx=-2, attention_mask=mask)
    assert torch.allclose(last, ours[-1]) and torch.allclose(second_last, ours[-2])


def test_sliding_window_changes_the_result():
    config, _, state = _tiny(3)
    ids = torch.randint(0, 300, (1, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        narrow = build_gemma3_encoder(dataclasses.replace(config, sliding_window=3), state).hidden_states(ids)[-1]
        wide = build_gemma3_encoder(dataclasses.replace(config, sliding_window=1024), state).hidden_states(ids)[-1]
    assert torch.allclose(narrow[:, :3], wide[:, :3], atol=1e-6)  # the first tokens see no further back anyway
    assert not torch.allclose(narrow[:, 3:], wide[:, 3:], atol=1e-4)


def test_attention_biases_window():
    biases = attention_biases(None, 5, 2, torch.device("cpu"))
    allowed = biases["sliding_attention"][0, 0] == 0
    assert allowed.tolist()[4] == [False, False, False, True, True]
    assert (biases["full_attention"][0, 0] == 0).tolist()[4] == [True] * 5

"""GPT-OSS as a text encoder (comfy_core/text_encoders/gpt_oss.py) against transformers' GPT-OSS
(`transformers.models.gpt_oss`) on tiny random weights: the tapped block outputs and the final
normed states agree to 1e-4, with sliding-window layers, attention sinks, YaRN RoPE, the MoE router
and padding in play."""
from __future__ import annotations

import pytest
import torch

from comfy_core.text_encoders.gpt_oss import (GptOssConfig, GptOssConfigError, build_gpt_oss,
                                              from_transformers_experts)

transformers = pytest.importorskip("transformers")


def tiny_hf(sliding: int = 4, layers: int = 4):
    from transformers import GptOssConfig as HFConfig
    from transformers import GptOssModel as HFModel

    config = HFConfig(vocab_size=64, hidden_size=32, intermediate_size=24, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=6,
                      num_experts_per_tok=2, sliding_window=sliding, rope_theta=150000.0,
                      rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                    "truncate": False, "original_max_position_embeddings": 4096},
                      max_position_embeddings=131072, attention_bias=True)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = HFModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if "norm" not in name else 0.1) + (1.0 if "norm" in name else 0.0))
    return config, model


def ours_from_hf(model) -> tuple[GptOssConfig, torch.nn.Module]:
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ours = from_transformers_experts(state)
    config = GptOssConfig.detect_from_weights(ours)
    return config, build_gpt_oss(config, ours)


def test_config_read_from_comfyui_names():
    _, model = tiny_hf()
    config, _ = ours_from_hf(model)
    assert (config.vocab_size, config.hidden_size, config.intermediate_size, config.num_layers) == (64, 32, 24, 4)
    assert (config.num_heads, config.num_kv_heads, config.head_dim, config.num_experts) == (4, 2, 8, 6)


@pytest.mark.parametrize("padded", [False, True])
def test_matches_transformers(padded):
    hf_config, model = tiny_hf(sliding=4)
    config, ours = ours_from_hf(model)
    config = GptOssConfig(**{**config.__dict__, "experts_per_token": 2, "sliding_window": 4})
    ours.config = config
    for layer in ours.layers:
        layer.self_attn.config = config
        layer.mlp.config = config
    ids = torch.randint(0, 64, (2, 11))
    mask = torch.ones(2, 11, dtype=torch.long)
    if padded:
        mask[1, 8:] = 0
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        taps = ours.captured(ids, mask, [0, 1, 2])
        final = ours.final(ids, mask)
    keep = mask.bool()
    for tap, index in zip(taps, [0, 1, 2]):
        assert torch.allclose(tap[keep], ref.hidden_states[index + 1][keep], atol=1e-4, rtol=1e-4)
    assert torch.allclose(final[keep], ref.last_hidden_state[keep], atol=1e-4, rtol=1e-4)


def test_sinks_change_the_output():
    _, model = tiny_hf()
    _, ours = ours_from_hf(model)
    ids = torch.randint(0, 64, (1, 7))
    with torch.no_grad():
        before = ours.captured(ids, None, [0])[0]
        ours.layers[0].self_attn.sinks.add_(3.0)
        after = ours.captured(ids, None, [0])[0]
    assert not torch.allclose(before, after)


def test_tap_beyond_depth_refused():
    _, model = tiny_hf()
    _, ours = ours_from_hf(model)
    with pytest.raises(GptOssConfigError, match="beyond"):
        ours.captured(torch.zeros(1, 3, dtype=torch.long), None, [4])

"""ACE-Step 1.5's network against diffusers' (`AceStepTransformer1DModel`, the condition encoder,
the attention pooler, the detokenizer, the FSQ codebook) on tiny random weights, and its detection
from names and shapes."""
from __future__ import annotations

import re

import pytest
import torch

from comfy_core.families.ace_step15.network import (AceStep15Config, AceStep15ConfigError, AceStep15Model, FSQ,
                                                    group_by_order)
from tests.fixtures.ace_step_files import TEXT_DIM, tiny_ace_state_dict, tiny_config

diffusers = pytest.importorskip("diffusers")

WINDOW = 4  # a band narrower than the test sequences, so the banded layers differ from full attention


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return tiny_ace_state_dict(seed=3)


@pytest.fixture(scope="module")
def model(state: dict[str, torch.Tensor]) -> AceStep15Model:
    network = AceStep15Model(tiny_config(sliding_window=WINDOW)).eval()
    network.load_state_dict(state)
    return network


def to_diffusers(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Our (ComfyUI's) names under `prefix` -> diffusers' names."""
    out = {}
    for name, tensor in state.items():
        if not name.startswith(prefix):
            continue
        name = name[len(prefix):]
        name = name.replace("proj_in.1.", "proj_in_conv.").replace("proj_out.1.", "proj_out_conv.")
        name = re.sub(r"attn\.(q|k|v)_proj\.", r"attn.to_\1.", name)
        name = name.replace("attn.o_proj.", "attn.to_out.0.").replace("attn.q_norm.", "attn.norm_q.")
        name = name.replace("attn.k_norm.", "attn.norm_k.")
        out[name] = tensor
    return out


def _stack_kwargs(stack) -> dict:
    return dict(hidden_size=stack.width, intermediate_size=stack.inner, num_attention_heads=stack.heads,
                num_key_value_heads=stack.kv_heads, head_dim=stack.head_dim)


def test_config_is_read_from_names_and_shapes(state):
    config = AceStep15Config.detect_from_weights({"model.diffusion_model." + k: v for k, v in state.items()},
                                                 "model.diffusion_model.")
    assert config == tiny_config()
    assert (config.dit.width, config.encoder_width, config.text_dim, config.pool_window) == (32, 24, TEXT_DIM, 5)
    broken = dict(state)
    del broken["decoder.layers.0.self_attn.q_norm.weight"]
    with pytest.raises(AceStep15ConfigError, match="q_norm"):
        AceStep15Config.detect_from_weights(broken)


def test_dit_matches_diffusers(model, state):
    from diffusers import AceStepTransformer1DModel

    config = tiny_config()
    reference = AceStepTransformer1DModel(**_stack_kwargs(config.dit), num_hidden_layers=config.dit.layers,
                                          in_channels=192, audio_acoustic_hidden_dim=64, patch_size=2,
                                          sliding_window=WINDOW, encoder_hidden_size=config.encoder_width).eval()
    reference.load_state_dict(to_diffusers(state, "decoder."), strict=True)
    torch.manual_seed(0)
    x, context = torch.randn(2, 21, 64), torch.randn(2, 5, config.encoder_width)  # odd length: padded patch
    hints = torch.randn(2, 21, 128)
    t = torch.tensor([0.9, 0.35])
    with torch.no_grad():
        expected = reference(x, t, t, context, hints).sample
        got = model.decoder(x, t, t, context, hints)
        # the band matters here: full attention everywhere would differ
        model.decoder.layers[0].self_attn.sliding_window = None
        unbanded = model.decoder(x, t, t, context, hints)
        model.decoder.layers[0].self_attn.sliding_window = WINDOW
    assert got.shape == (2, 21, 64)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert (unbanded - expected).abs().max() > 1e-3


def test_condition_encoder_matches_diffusers(model, state):
    from diffusers.pipelines.ace_step.modeling_ace_step import AceStepConditionEncoder

    config = tiny_config()
    reference = AceStepConditionEncoder(**_stack_kwargs(config.lyric), text_hidden_dim=TEXT_DIM, timbre_hidden_dim=64,
                                        num_lyric_encoder_hidden_layers=config.lyric.layers,
                                        num_timbre_encoder_hidden_layers=config.timbre.layers).eval()
    weights = to_diffusers(state, "encoder.")
    weights["null_condition_emb"] = state["null_condition_emb"]
    weights["silence_latent"] = reference.silence_latent
    reference.load_state_dict(weights, strict=True)
    torch.manual_seed(1)
    text, lyrics, refer = torch.randn(1, 6, TEXT_DIM), torch.randn(1, 9, TEXT_DIM), torch.randn(1, 11, 64)
    order = torch.zeros(1, dtype=torch.long)
    with torch.no_grad():
        expected, mask = reference(text, torch.ones(1, 6), lyrics, torch.ones(1, 9), refer, order)
        got = model.encoder(text, lyrics, refer, order)
    assert bool(mask.all()) and got.shape == (1, 9 + 1 + 6, 24)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_pooler_and_detokenizer_match_diffusers(model, state):
    from diffusers.pipelines.ace_step.modeling_ace_step import AceStepAttentionPooler, AceStepAudioTokenDetokenizer

    config = tiny_config()
    pooler = AceStepAttentionPooler(**_stack_kwargs(config.pooler),
                                    num_attention_pooler_hidden_layers=config.pooler.layers).eval()
    pooler.load_state_dict(to_diffusers(state, "tokenizer.attention_pooler."), strict=True)
    detok = AceStepAudioTokenDetokenizer(**_stack_kwargs(config.detokenizer), audio_acoustic_hidden_dim=64,
                                         pool_window_size=5,
                                         num_attention_pooler_hidden_layers=config.detokenizer.layers).eval()
    detok.load_state_dict(to_diffusers(state, "detokenizer."), strict=True)
    torch.manual_seed(2)
    windows, coarse = torch.randn(2, 3, 5, 32), torch.randn(2, 4, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.tokenizer.attention_pooler(windows), pooler(windows), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(model.detokenizer(coarse), detok(coarse), atol=1e-4, rtol=1e-4)


def test_fsq_codebook_matches_diffusers_and_quantises_onto_its_levels(model, state):
    from diffusers.pipelines.ace_step.modeling_ace_step import _AceStepResidualFSQ

    reference = _AceStepResidualFSQ(dim=32)
    reference.load_state_dict({k[len("tokenizer.quantizer."):]: v for k, v in state.items()
                               if k.startswith("tokenizer.quantizer.")})
    indices = torch.tensor([[0, 1, 7, 8, 63, 35847, 63999]])
    fsq = model.tokenizer.quantizer
    with torch.no_grad():
        torch.testing.assert_close(fsq.from_indices(indices, torch.float32), reference.get_output_from_indices(indices),
                                   atol=1e-5, rtol=1e-5)
        # forward: each index is the code it quantised to; codes sit on the levels' grid
        vectors = torch.randn(4, 32) * 3
        _, got = fsq(vectors)
        z = fsq.project_in(vectors)
        levels, _ = FSQ.levels(z.device)
        clamp = 1 + 1 / (levels - 1)
        bounded = (z / clamp).tanh() * clamp
        expected_codes = ((levels - 1) * (bounded.tanh() + 1) / 2 + 0.5).floor() * 2 / (levels - 1) - 1
    torch.testing.assert_close(fsq.codes_of(got[..., 0]), expected_codes)
    assert int(got.max()) < 8 * 8 * 8 * 5 * 5 * 5


def test_timbre_vectors_group_by_sample_order():
    vectors = torch.arange(6.0).reshape(3, 2)
    grouped, mask = group_by_order(vectors, torch.tensor([0, 0, 2]))
    assert grouped.shape == (3, 2, 2)
    assert grouped[0].tolist() == [[0.0, 1.0], [2.0, 3.0]] and grouped[2, 0].tolist() == [4.0, 5.0]
    assert mask.tolist() == [[1, 1], [0, 0], [1, 0]]


def test_model_call_uses_codes_reference_and_null_embedding(model):
    torch.manual_seed(4)
    x, context, lyrics = torch.randn(1, 64, 12), torch.randn(1, 4, TEXT_DIM), torch.randn(1, 5, TEXT_DIM)
    refer = torch.randn(1, 64, 12)
    t = torch.tensor([0.5])
    with torch.no_grad():
        with_codes = model(x, t, context, lyric_embed=lyrics, refer_audio=refer, audio_codes=torch.tensor([[3, 900]]))
        other_codes = model(x, t, context, lyric_embed=lyrics, refer_audio=refer, audio_codes=torch.tensor([[4, 900]]))
        reference_src = model(x, t, context, lyric_embed=lyrics, refer_audio=refer, is_covers=False)
        null = model(x, t, context, lyric_embed=lyrics, refer_audio=refer, is_covers=False,
                     replace_with_null_embeds=True)
        null_other_text = model(x, t, torch.randn(1, 4, TEXT_DIM), lyric_embed=lyrics, refer_audio=refer,
                                is_covers=False, replace_with_null_embeds=True)
        # with codes, the hints are the codebook vectors (padded with code 35847) through the detokenizer
        hints = model.hints(12, refer.movedim(-1, -2), torch.tensor([[3, 900]]), torch.float32)
        padded = model.detokenizer(model.tokenizer.quantizer.from_indices(torch.tensor([[3, 900, 35847]]),
                                                                          torch.float32))[:, :12]
    assert with_codes.shape == (1, 64, 12)
    assert (with_codes - other_codes).abs().max() > 1e-4
    assert (with_codes - reference_src).abs().max() > 1e-4
    torch.testing.assert_close(hints, padded)
    torch.testing.assert_close(null, null_other_text)  # the text no longer reaches the DiT
    with pytest.raises(AceStep15ConfigError, match="lyric"):
        model(x, t, context)

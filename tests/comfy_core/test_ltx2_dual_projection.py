"""LTX-2.3's text path on the template fixtures' tiny files (tests/fixtures/template_models_ltx2.py):
the per-stream text projection (ComfyUI's `DualLinearProjection`) against its equations, the
NVFP4 `fp4_mixed` Gemma 3 file read as its dequantised truth, the DiT with no caption projection
(`caption_proj_before_connector`) splitting the projected states before its connectors, and Gemma
3's cached decoding (the generation TextGenerateLTX2Prompt runs) against the full forward."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.families.ltx2.dit import LTXAVConfig, LTXAVModel
from comfy_core.families.ltx2.encoders import UNPROCESSED_KEY
from comfy_core.families.ltx2.ltxav_loader import load_ltxav_text_encoder
from comfy_core.families.ltx2.latent import LTXAVInputError
from comfy_core.families.ltx2.text import DualTextEmbeddingProjection, per_token_rms_features
from tests.fixtures.template_models_ltx2 import WRITERS_LTX2

VIDEO, AUDIO = 128, 64  # the tiny 2.3 streams' widths


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx23")
    paths = {"checkpoint": root / "ltx-2.3-22b-distilled.safetensors",
             "gemma": root / "gemma_3_12B_it_fp4_mixed.safetensors"}
    WRITERS_LTX2["ltx23_checkpoint"](paths["checkpoint"])
    WRITERS_LTX2["gemma3_12b_fp4_mixed"](paths["gemma"])
    return paths


@pytest.fixture(scope="module")
def clip(files):
    return load_ltxav_text_encoder(files["gemma"], files["checkpoint"])


def test_dual_projection_follows_its_equations():
    torch.manual_seed(0)
    width, layers, t = 4, 3, 5
    states = [torch.randn(1, t, width) * (i + 1) for i in range(layers)]
    mask = torch.tensor([[0, 1, 1, 1, 1]])
    weights = {"text_embedding_projection.video_aggregate_embed.weight": torch.randn(6, width * layers),
               "text_embedding_projection.video_aggregate_embed.bias": torch.randn(6),
               "text_embedding_projection.audio_aggregate_embed.weight": torch.randn(2, width * layers),
               "text_embedding_projection.audio_aggregate_embed.bias": torch.randn(2)}
    out = DualTextEmbeddingProjection.from_weights(weights, width)(states, mask)
    # by hand: per token and layer x / sqrt(mean(x^2) + 1e-6), channel d of layer l at d * L + l
    features = torch.zeros(1, t, width * layers)
    for token in range(t):
        for layer in range(layers):
            x = states[layer][0, token]
            normed = x / math.sqrt(float((x ** 2).mean()) + 1e-6)
            for d in range(width):
                features[0, token, d * layers + layer] = normed[d] if mask[0, token] else 0.0
    expected = []
    for side, out_width in (("video", 6), ("audio", 2)):
        w = weights[f"text_embedding_projection.{side}_aggregate_embed.weight"]
        b = weights[f"text_embedding_projection.{side}_aggregate_embed.bias"]
        expected.append(features * math.sqrt(out_width / width) @ w.T + b)
    assert torch.allclose(out, torch.cat(expected, dim=-1), atol=1e-5)
    assert torch.equal(per_token_rms_features(states, mask)[0, 0], torch.zeros(width * layers))


def test_ltx23_conditioning_is_the_dual_projection_of_the_quantised_tower(files, clip):
    from safetensors import safe_open

    from comfy_core.text_encoders.generate import generating_encoder
    from comfy_core.weights.quant_registry import FORMATS, QuantizedLayer, dequantize_stored

    _, tower = generating_encoder(clip.cond_stage_model)
    with safe_open(str(files["gemma"]), "pt") as f:  # an nvfp4 layer reads as its dequantised weight
        layer = QuantizedLayer("model.layers.1.self_attn.q_proj", FORMATS["nvfp4"], {"format": "nvfp4"})
        truth = dequantize_stored(layer, f.get_tensor, tuple(tower.transformer.model.layers[1].self_attn.q_proj.weight.shape))
        assert "model.layers.1.self_attn.q_proj.comfy_quant" in f.keys()
        assert f.get_tensor("model.layers.1.self_attn.q_proj.weight").dtype == torch.uint8
    assert torch.equal(tower.transformer.model.layers[1].self_attn.q_proj.weight.float(), truth)
    tokens = clip.tokenize("a red fox")
    cond, pooled, extra = clip.cond_stage_model.encode_token_weights(tokens)
    ids = [t for t, _ in tokens["gemma3_12b"][0] if t != 0]
    states = tower.hidden_states(torch.tensor([ids]))
    expected = clip.cond_stage_model.text_embedding_projection(states, torch.ones(1, len(ids)))
    assert cond.shape == (1, len(ids), VIDEO + AUDIO) and pooled is None and extra == {UNPROCESSED_KEY: True}
    assert torch.allclose(cond, expected, atol=1e-6)


def test_the_ltx23_dit_splits_the_projection_before_its_connectors(files, clip):
    from safetensors.torch import load_file

    state = {k[len("model.diffusion_model."):]: v.float() for k, v in load_file(str(files["checkpoint"])).items()
             if k.startswith("model.diffusion_model.")}
    import json
    from safetensors import safe_open
    with safe_open(str(files["checkpoint"]), "pt") as f:
        metadata = f.metadata()
    config = LTXAVConfig.detect_from_weights(state, "", metadata)
    assert config.caption_proj_before_connector and config.context_width == VIDEO + AUDIO
    assert json.loads(metadata["config"])["transformer"]["caption_proj_before_connector"] is True
    network = LTXAVModel.from_config(config, device="meta")
    network.load_state_dict(state, assign=True)
    assert network.caption_projection is None
    cond = clip.encode_from_tokens(clip.tokenize("a red fox"))  # [1, N, 192]
    out = network.preprocess_text_embeds(cond, unprocessed=True)
    assert torch.allclose(out[..., :VIDEO], network.video_embeddings_connector(cond[..., :VIDEO])[0])
    assert torch.allclose(out[..., VIDEO:], network.audio_embeddings_connector(cond[..., VIDEO:])[0])
    assert torch.equal(network.preprocess_text_embeds(out), out)  # already processed: as it is
    v_context, a_context = network._context(out, 1)
    assert torch.equal(v_context, out[..., :VIDEO]) and torch.equal(a_context, out[..., VIDEO:])
    with pytest.raises(LTXAVInputError, match="expected"):
        network.preprocess_text_embeds(cond[..., :100], unprocessed=True)


def test_gemma3_cached_decoding_equals_the_full_forward(clip):
    from comfy_core.text_encoders.generate import SamplingOptions, generate_with_clip, generating_encoder

    _, tower = generating_encoder(clip.cond_stage_model)
    ids = torch.tensor([[2, 10, 20, 30, 40, 50, 60]])
    cache = tower.new_cache(1, 16)
    tower.decode_step(tower.embed_ids(ids[:, :4]), cache)
    last = tower.decode_step(tower.embed_ids(ids[:, 4:]), cache)
    assert torch.allclose(last, tower.hidden_states(ids)[-1][:, -1], atol=1e-5)
    tokens = clip.tokenize("<start_of_turn>user\nhello<end_of_turn>\n", min_length=1)
    out = generate_with_clip(clip, tokens, 3, SamplingOptions(do_sample=False))
    row = [t for t, _ in tokens["gemma3_12b"][0]]
    greedy = int(tower.logits(tower.hidden_states(torch.tensor([row]))[-1][:, -1]).argmax())
    assert len(out) == 3 and out[0] == greedy


def test_the_gemma_lora_reaches_every_projection_of_the_tower(clip, tmp_path):
    from safetensors.torch import load_file

    from comfy_core.lora import load_lora_for_models

    path = tmp_path / "gemma-3-12b-it-abliterated_lora_rank64_bf16.safetensors"
    WRITERS_LTX2["lora_gemma3_12b"](path)
    lora = load_file(str(path))
    _model, patched, report = load_lora_for_models(None, clip, lora, 0.0, 1.0)
    assert report.unmatched == [] and report.clip_keys == len(lora) // 2
    assert not torch.equal(clip.encode_from_tokens(clip.tokenize("a fox")),
                           patched.encode_from_tokens(patched.tokenize("a fox")))

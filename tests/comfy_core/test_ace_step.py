"""ACE-Step 1: the DiT's pieces against their equations written out here (linear attention, the
interleaved RoPE, Transformer-XL relative attention, the final un-patching), detection from names
and shapes, ComfyUI's extra_conds, and loading through the split and single-file loaders."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.families.ace_step.conditions import AceStepConditions
from comfy_core.families.ace_step.dit import (AceStepConfig, AceStepConfigError, AceStepTransformer, apply_rope,
                                              linear_attention, rope_tables)
from comfy_core.families.ace_step.latent_format import latent_columns
from comfy_core.families.ace_step.lyric_encoder import RelPositionAttention, relative_position_table
from tests.fixtures.ace1_files import (LYRIC_VOCAB, TEXT_DIM, tiny_ace1_state_dict, tiny_config,
                                      write_ace1_diffusion_model)


def test_linear_attention_is_the_relu_kernel_ratio():
    torch.manual_seed(0)
    q, k, v = torch.rand(1, 2, 5, 4), torch.rand(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    got = linear_attention(q, k, v)
    want = torch.empty_like(got)
    for h in range(2):
        for i in range(5):
            weights = torch.stack([torch.dot(k[0, h, j], q[0, h, i]) for j in range(5)])
            want[0, h, i] = (weights[:, None] * v[0, h]).sum(0) / (weights.sum() + 1e-15)
    torch.testing.assert_close(got, want)


def test_rope_rotates_interleaved_pairs_with_the_concatenated_tables():
    torch.manual_seed(1)
    dim, length = 8, 3
    x = torch.randn(1, 1, length, dim)
    cos, sin = rope_tables(length, dim, None)
    got = apply_rope(x, cos, sin)
    for s in range(length):
        for d in range(dim):
            angle = s * 1e6 ** (-(2 * (d % (dim // 2))) / dim)  # table column d uses frequency d mod dim/2
            partner = x[0, 0, s, d + 1] if d % 2 == 0 else x[0, 0, s, d - 1]
            sign = -1.0 if d % 2 == 0 else 1.0
            want = x[0, 0, s, d] * math.cos(angle) + sign * partner * math.sin(angle)
            assert got[0, 0, s, d].item() == pytest.approx(want.item(), abs=1e-5)


def test_relative_attention_scores_use_the_distance_encoding():
    torch.manual_seed(2)
    width, heads, t = 8, 2, 4
    attention = RelPositionAttention(width, heads, ops=torch.nn)
    for p in attention.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(1, t, width)
    pos = relative_position_table(t, width, torch.float32, None)
    got = attention(x, pos)

    def encoding(distance):  # sinusoid of the relative distance i - j
        row = torch.zeros(width)
        for c in range(0, width, 2):
            row[c] = math.sin(distance * 10000 ** (-c / width))
            row[c + 1] = math.cos(distance * 10000 ** (-c / width))
        return row

    d = width // heads
    q, k, v = attention.linear_q(x)[0], attention.linear_k(x)[0], attention.linear_v(x)[0]
    out = torch.zeros(t, width)
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        for i in range(t):
            scores = torch.stack([
                torch.dot(q[i, cols] + attention.pos_bias_u[h], k[j, cols])
                + torch.dot(q[i, cols] + attention.pos_bias_v[h], attention.linear_pos(encoding(i - j))[cols])
                for j in range(t)]) / math.sqrt(d)
            out[i, cols] = (torch.softmax(scores, 0)[:, None] * v[:, cols]).sum(0)
    torch.testing.assert_close(got[0], attention.linear_out(out), atol=1e-5, rtol=1e-5)


def test_config_is_read_from_names_and_shapes():
    state = tiny_ace1_state_dict()
    assert AceStepConfig.detect_from_weights(state) == tiny_config()
    assert tiny_config().heads == 1 and tiny_config().comfy_unet_config() == {"audio_model": "ace"}
    del state["lyric_embs.weight"]
    with pytest.raises(AceStepConfigError, match="lyric_embs.weight"):
        AceStepConfig.detect_from_weights(state)


def test_forward_unpatches_rows_and_scales_the_lyrics():
    torch.manual_seed(3)
    network = AceStepTransformer(tiny_config()).eval()
    network.load_state_dict(tiny_ace1_state_dict())
    x, t, context = torch.randn(1, 8, 16, 5), torch.tensor([700.0]), torch.randn(1, 3, TEXT_DIM)
    lyrics_a, lyrics_b = torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5, 6]])
    with torch.no_grad():
        out = network(x, t, context=context, lyric_token_idx=lyrics_a)
        silent_a = network(x, t, context=context, lyric_token_idx=lyrics_a, lyrics_strength=0.0)
        silent_b = network(x, t, context=context, lyric_token_idx=lyrics_b, lyrics_strength=0.0)
        lyric_b = network(x, t, context=context, lyric_token_idx=lyrics_b)
        # the final layer by hand: row r, channel c of column t is output feature r * 8 + c
        h = torch.randn(1, 5, 64)
        embedded = torch.randn(1, 64)
        final = network.final_layer(h, embedded, 7)
        shift, scale = network.final_layer.scale_shift_table + embedded
        normed = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        features = network.final_layer.linear(normed * (1 + scale) + shift)
    assert out.shape == x.shape
    torch.testing.assert_close(silent_a, silent_b)  # strength 0: the lyric states are zeros
    assert not torch.allclose(out, lyric_b)
    assert final.shape == (1, 8, 16, 7) and final[..., 5:].abs().max() == 0  # padded to the latent's length
    torch.testing.assert_close(final[0, 3, 10, 2], features[0, 2, 10 * 8 + 3])


def test_conditions_follow_comfyuis_extra_conds():
    noise = torch.zeros(2, 8, 16, 4, dtype=torch.float64)
    lyrics = torch.tensor([[261, 7, 2]])
    out = AceStepConditions().extra_conds(None, noise=noise, cross_attn=torch.randn(1, 3, TEXT_DIM),
                                          conditioning_lyrics=lyrics, lyrics_strength=0.4)
    assert out["lyric_token_idx"] is lyrics and out["lyrics_strength"] == 0.4
    assert out["speaker_embeds"].shape == (2, 512) and out["speaker_embeds"].dtype == torch.float64
    assert not out["speaker_embeds"].any()
    bare = AceStepConditions().extra_conds(None, noise=noise)
    assert "lyric_token_idx" not in bare and bare["lyrics_strength"] == 1.0


def test_latent_length_is_comfyuis_rule():
    assert latent_columns(120.0) == 1291 and latent_columns(1.0) == 10


def test_split_file_loads_and_runs_through_the_sampler_path(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(write_ace1_diffusion_model(tmp_path / "ace_step_v1_dit.safetensors"))
    diffusion = model.model
    assert diffusion.family.name == "ace_step" and type(diffusion.diffusion_model).__name__ == \
        "ACEStepTransformer2DModel"
    assert type(diffusion.model_config).__name__ == "ACEStep"
    assert diffusion.model_config.unet_config == {"audio_model": "ace"}
    sampling = diffusion.model_sampling
    assert sampling.shift == pytest.approx(3.0) and sampling.multiplier == pytest.approx(1000.0)
    noise = torch.randn(1, 8, 16, 5)
    context = torch.randn(1, 3, TEXT_DIM)
    extra = diffusion.extra_inputs(noise=noise, device=noise.device, cross_attn=context,
                                   conditioning_lyrics=torch.randint(0, LYRIC_VOCAB, (1, 4)), lyrics_strength=0.5)
    with torch.no_grad(), model.applied():
        denoised = diffusion.apply_model(noise, torch.tensor([0.8]), c_crossattn=context, **extra)
        velocity = diffusion.diffusion_model(noise, torch.tensor([800.0]), context=context, **extra)
    # flow (CONST): denoised = x - sigma * v, the network seeing sigma x 1000
    torch.testing.assert_close(denoised, noise - 0.8 * velocity, atol=1e-5, rtol=1e-5)


def test_single_file_with_a_malformed_vae_names_the_missing_key(tmp_path):
    from comfy_core.checkpoint.errors import ShapeMismatchError
    from comfy_core.loading import load_checkpoint

    path = write_ace1_diffusion_model(tmp_path / "ace_step_v1_3.5b.safetensors", prefix="model.diffusion_model.",
                                      extra={"vae.vocoder.backbone.channel_layers.0.0.bias": torch.zeros(4)})
    with pytest.raises(ShapeMismatchError, match="vae.dcae.encoder.conv_in.weight"):
        load_checkpoint(path)

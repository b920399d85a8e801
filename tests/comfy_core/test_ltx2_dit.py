"""The LTX-2 joint audio-video DiT against diffusers' `LTX2VideoTransformer3DModel` (0.42.1) on tiny
random weights read from a tiny file with ComfyUI's names; detection from names, shapes and the
file's config metadata; the per-frame timestep; patch points."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from comfy_core.families.ltx2.dit import (LTXAVConfig, LTXAVConfigError, LTXAVInputError, LTXAVModel,
                                          audio_positions, patchify_audio, unpatchify_audio)
from comfy_core.families.ltx2.rope import apply_rope, rope_table
from tests.fixtures.ltx2_files import (CAPTION, IN_CHANNELS, PREFIX, diffusers_dit_kwargs, to_diffusers_dit,
                                       write_tiny_ltx2_unet)

diffusers_ltx2 = pytest.importorskip("diffusers.models.transformers.transformer_ltx2")

F_, H_, W_, T_AUDIO, M = 2, 2, 3, 5, 6
RATE = 25.0


def _load(tmp_path, variant):
    path = write_tiny_ltx2_unet(tmp_path / f"ltx2_{variant}.safetensors", variant)
    state = load_file(str(path))
    with safe_open(str(path), "pt") as handle:
        metadata = handle.metadata()
    config = LTXAVConfig.detect_from_weights(state, PREFIX, metadata)
    model = LTXAVModel.from_config(config)
    bare = {k[len(PREFIX):]: v for k, v in state.items()}
    model.load_state_dict(bare, strict=True)
    return model.eval(), bare, config


def _reference(bare, variant):
    ref = diffusers_ltx2.LTX2VideoTransformer3DModel(**diffusers_dit_kwargs(variant)).eval()
    ref.load_state_dict(to_diffusers_dit(bare), strict=True)
    return ref


def _inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    vx = torch.randn(1, IN_CHANNELS, F_, H_, W_, generator=g)
    ax = torch.randn(1, 8, T_AUDIO, 16, generator=g)
    v_ctx = torch.randn(1, M, CAPTION, generator=g)
    a_ctx = torch.randn(1, M, CAPTION, generator=g)
    return vx, ax, v_ctx, a_ctx


def _diffusers(ref, vx, ax, v_ctx, a_ctx, sigma, variant, mask=None):
    kwargs = {}
    if variant == "2.3":
        kwargs["sigma"] = torch.tensor([sigma * 1000.0])
        first = torch.zeros(1, F_ * H_ * W_, 1)
        first[:, :H_ * W_] = 1.0  # the first latent frame stands for one pixel frame
        kwargs["video_keyframes_mask"] = first
    out = ref(hidden_states=vx.flatten(2).transpose(1, 2), audio_hidden_states=patchify_audio(ax),
              encoder_hidden_states=v_ctx, audio_encoder_hidden_states=a_ctx,
              timestep=torch.tensor([sigma * 1000.0]), encoder_attention_mask=mask,
              audio_encoder_attention_mask=mask, num_frames=F_, height=H_, width=W_, fps=RATE,
              audio_num_frames=T_AUDIO, return_dict=False, **kwargs)
    video = out[0].transpose(1, 2).reshape(vx.shape)
    audio = unpatchify_audio(out[1], 8, 16)
    return video, audio


@pytest.mark.parametrize("variant", ["2.0", "2.3"])
def test_matches_diffusers(tmp_path, variant):
    model, bare, config = _load(tmp_path, variant)
    ref = _reference(bare, variant)
    vx, ax, v_ctx, a_ctx = _inputs()
    with torch.no_grad():
        video, audio = model([vx, ax], torch.tensor([0.7]), torch.cat([v_ctx, a_ctx], dim=-1), frame_rate=RATE)
        want_video, want_audio = _diffusers(ref, vx, ax, v_ctx, a_ctx, 0.7, variant)
    assert video.shape == vx.shape and audio.shape == ax.shape
    assert torch.allclose(video, want_video, atol=1e-4, rtol=1e-4), (video - want_video).abs().max()
    assert torch.allclose(audio, want_audio, atol=1e-4, rtol=1e-4), (audio - want_audio).abs().max()


def test_text_mask_matches_diffusers(tmp_path):
    model, bare, _ = _load(tmp_path, "2.0")
    ref = _reference(bare, "2.0")
    vx, ax, v_ctx, a_ctx = _inputs(2)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        video, audio = model([vx, ax], torch.tensor([0.3]), torch.cat([v_ctx, a_ctx], -1), attention_mask=mask,
                             frame_rate=RATE)
        want_video, want_audio = _diffusers(ref, vx, ax, v_ctx, a_ctx, 0.3, "2.0", mask=mask)
        unmasked, _ = model([vx, ax], torch.tensor([0.3]), torch.cat([v_ctx, a_ctx], -1), frame_rate=RATE)
    assert torch.allclose(video, want_video, atol=1e-4) and torch.allclose(audio, want_audio, atol=1e-4)
    assert not torch.allclose(video, unmasked, atol=1e-4)


def test_detection_reads_shapes_and_metadata(tmp_path):
    _, _, config = _load(tmp_path, "2.3")
    assert (config.in_channels, config.audio_in_channels, config.num_layers) == (16, 128, 2)
    assert (config.attention_head_dim, config.audio_attention_head_dim) == (4, 2)
    assert config.cross_attention_adaln and config.apply_gated_attention and config.use_keyframes_abs_pos_embedding
    assert (config.rope_type, config.frequencies_precision, config.use_middle_indices_grid) == ("split", "float64", True)
    assert config.connector["connector_num_learnable_registers"] == 4
    assert config.connector["connector_attention_head_dim"] == 16
    unet = config.comfy_unet_config()
    assert unet["image_model"] == "ltxav" and unet["cross_attention_adaln"] is True
    _, _, plain = _load(tmp_path, "2.0")
    assert not plain.cross_attention_adaln and not plain.apply_gated_attention


def test_detection_without_metadata_takes_comfyui_defaults(tmp_path):
    state = load_file(str(write_tiny_ltx2_unet(tmp_path / "x.safetensors")))
    heads_only = {"config": json.dumps({"transformer": {"connector_num_attention_heads": 2}})}
    config = LTXAVConfig.detect_from_weights(state, PREFIX, heads_only)
    assert (config.rope_type, config.frequencies_precision, config.av_ca_timestep_scale_multiplier) == (
        "interleaved", "float32", 1.0)
    assert not config.use_middle_indices_grid and not config.causal_temporal_positioning
    with pytest.raises(LTXAVConfigError, match="30 heads"):  # ComfyUI's default connector heads
        LTXAVConfig.detect_from_weights(state, PREFIX, None)


def test_detection_rejects_missing_and_bad_metadata(tmp_path):
    state = load_file(str(write_tiny_ltx2_unet(tmp_path / "x.safetensors")))
    broken = {k: v for k, v in state.items() if "audio_attn2.to_k" not in k}
    with pytest.raises(LTXAVConfigError, match="audio_attn2.to_k"):
        LTXAVConfig.detect_from_weights(broken, PREFIX)
    with pytest.raises(LTXAVConfigError, match="JSON"):
        LTXAVConfig.detect_from_weights(state, PREFIX, {"config": "{not json"})
    with pytest.raises(LTXAVConfigError, match="rope_type"):
        LTXAVConfig.detect_from_weights(state, PREFIX, {"config": json.dumps({"transformer": {
            "rope_type": "x", "connector_num_attention_heads": 2}})})


def test_per_frame_timestep_equals_per_token(tmp_path):
    model, _, _ = _load(tmp_path, "2.0")
    per_token = torch.tensor([[0.0] * (H_ * W_) + [0.8] * (H_ * W_)])  # an image-to-video mask: frame 0 clean
    spatial = per_token.clone()
    spatial[0, -1] = 0.79  # a spatial difference defeats the per-frame path
    with torch.no_grad():
        compressed = model._timesteps(per_token, torch.tensor([[0.8]]), 1, H_ * W_, torch.float32)
        full = model._timesteps(spatial, torch.tensor([[0.8]]), 1, H_ * W_, torch.float32)
        direct, _ = model.adaln_single(per_token.flatten() * 1000.0, torch.float32)
    assert torch.allclose(compressed["v_timestep"][0], direct, atol=1e-6)
    assert compressed["v_timestep"].shape == full["v_timestep"].shape
    assert not torch.allclose(compressed["v_timestep"][0, -1], full["v_timestep"][0, -1])


def test_denoise_mask_makes_video_timesteps_per_token(tmp_path):
    model, _, _ = _load(tmp_path, "2.0")
    vx, ax, v_ctx, a_ctx = _inputs(3)
    mask = torch.ones(1, 1, F_, H_, W_)
    mask[:, :, 0] = 0.0
    context = torch.cat([v_ctx, a_ctx], -1)
    with torch.no_grad():
        masked = model([vx, ax], torch.tensor([0.6]), context, denoise_mask=mask, frame_rate=RATE)
        explicit = model([vx, ax], (mask.flatten(1) * 0.6, torch.tensor([0.6])), context, frame_rate=RATE)
        plain = model([vx, ax], torch.tensor([0.6]), context, frame_rate=RATE)
    assert torch.allclose(masked[0], explicit[0]) and torch.allclose(masked[1], explicit[1])
    assert not torch.allclose(masked[0], plain[0])


def test_video_alone_and_bad_inputs(tmp_path):
    model, _, _ = _load(tmp_path, "2.0")
    vx, _, v_ctx, a_ctx = _inputs(4)
    with torch.no_grad():
        out = model(vx, torch.tensor([0.5]), torch.cat([v_ctx, a_ctx], -1))
    assert isinstance(out, torch.Tensor) and out.shape == vx.shape
    with pytest.raises(LTXAVInputError, match="context"):
        model(vx, torch.tensor([0.5]), v_ctx)
    with pytest.raises(LTXAVInputError, match="audio latent"):
        model([vx, torch.zeros(1, 8, 3, 8)], torch.tensor([0.5]), torch.cat([v_ctx, a_ctx], -1))


def test_block_replace_patch_and_stg(tmp_path):
    model, _, _ = _load(tmp_path, "2.0")
    vx, ax, v_ctx, a_ctx = _inputs(5)
    context = torch.cat([v_ctx, a_ctx], -1)
    seen = []

    def replace(args, extra):
        seen.append(sorted(args))
        return extra["original_block"](args)

    options = {"patches_replace": {"dit": {("double_block", 1): replace}}}
    with torch.no_grad():
        plain = model([vx, ax], torch.tensor([0.5]), context)
        patched = model([vx, ax], torch.tensor([0.5]), context, transformer_options=options)
        stg = model([vx, ax], torch.tensor([0.5]), context, transformer_options={"stg_self_attn_blocks": [0]})
    assert len(seen) == 1 and {"img", "v_context", "a_context", "v_timestep", "a_cross_gate_timestep"} <= set(seen[0])
    assert torch.allclose(plain[0], patched[0]) and torch.allclose(plain[1], patched[1])
    assert not torch.allclose(plain[0], stg[0])


def test_audio_positions_are_latent_frame_spans_in_seconds():
    spans = audio_positions(3, 1, "cpu")[0, 0]
    # 4 mel frames of a 10 ms hop per latent frame, the first latent frame covering one mel frame
    assert torch.allclose(spans, torch.tensor([[0.0, 0.01], [0.01, 0.05], [0.05, 0.09]]))


def test_split_rope_pairs_halves_per_head():
    positions = torch.tensor([[[0.0, 3.0]]])  # [B, 1 axis, 2 tokens]
    table = rope_table(positions, 8, 10000.0, [4.0], True, 2, True, False, torch.float32)
    x = torch.randn(1, 2, 8)
    out = apply_rope(x, table)
    # head 0 is channels 0..3: channel 0 pairs with channel 2, channel 1 with channel 3
    angle = table.cos[0, 1, 0, 0].acos() * torch.sign(table.sin[0, 1, 0, 0])
    c, s = angle.cos(), angle.sin()
    assert torch.allclose(out[0, 1, 0], x[0, 1, 0] * c - x[0, 1, 2] * s, atol=1e-6)
    assert torch.allclose(out[0, 1, 2], x[0, 1, 2] * c + x[0, 1, 0] * s, atol=1e-6)
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5)

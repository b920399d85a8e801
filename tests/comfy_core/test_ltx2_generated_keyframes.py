"""LTX-2.5's generated keyframes on the DiT side (comfy_core/families/ltx2/dit.py, conditions.py):
the slots LTXVAddGeneratedKeyframes records (`generated_keyframes`) get `keyframes_abs_pos_embedding`
like the causal first frame, checked against diffusers' `LTX2VideoTransformer3DModel` given the
same tokens in its `video_keyframes_mask`; the record reaches the network through extra_conds."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.ltx2.conditions import LTXAVConditions
from comfy_core.families.ltx2.latent import video_positions
from tests.comfy_core.test_ltx2_dit import F_, H_, RATE, T_AUDIO, W_, _inputs, _load, _reference
from comfy_core.families.ltx2.dit import patchify_audio, unpatchify_audio

pytest.importorskip("diffusers.models.transformers.transformer_ltx2")


def _diffusers(ref, vx, ax, v_ctx, a_ctx, sigma, marked_frames):
    mask = torch.zeros(1, F_ * H_ * W_, 1)
    for frame in marked_frames:
        mask[:, frame * H_ * W_:(frame + 1) * H_ * W_] = 1.0
    out = ref(hidden_states=vx.flatten(2).transpose(1, 2), audio_hidden_states=patchify_audio(ax),
              encoder_hidden_states=v_ctx, audio_encoder_hidden_states=a_ctx,
              timestep=torch.tensor([sigma * 1000.0]), sigma=torch.tensor([sigma * 1000.0]), num_frames=F_,
              height=H_, width=W_, fps=RATE, audio_num_frames=T_AUDIO, return_dict=False,
              video_keyframes_mask=mask)
    return out[0].transpose(1, 2).reshape(vx.shape), unpatchify_audio(out[1], 8, 16)


def test_generated_keyframe_slots_get_the_keyframe_embedding(tmp_path):
    model, bare, config = _load(tmp_path, "2.3")
    assert config.use_keyframes_abs_pos_embedding
    ref = _reference(bare, "2.3")
    vx, ax, v_ctx, a_ctx = _inputs(seed=3)
    hw = H_ * W_
    # the last latent frame is a generated keyframe slot at the positions it has anyway, so that only
    # the marker differs from a plain forward
    spans = video_positions(F_, H_, W_, 1, config.vae_scale_factors, True, "cpu")[:, :, (F_ - 1) * hw:]
    record = {"first_latent_frame": F_ - 1, "num_keyframes": 1, "frame_indices": [1], "num_pixel_frames": 9,
              "guide_entry_index": 0, "tokens_per_frame": hw}
    context = torch.cat([v_ctx, a_ctx], dim=-1)
    with torch.no_grad():
        video, audio = model([vx, ax], torch.tensor([0.6]), context, frame_rate=RATE, keyframe_idxs=spans,
                             generated_keyframes=record)
        plain, _ = model([vx, ax], torch.tensor([0.6]), context, frame_rate=RATE, keyframe_idxs=spans)
        want_video, want_audio = _diffusers(ref, vx, ax, v_ctx, a_ctx, 0.6, [0, F_ - 1])
        first_only, _ = _diffusers(ref, vx, ax, v_ctx, a_ctx, 0.6, [0])
    assert torch.allclose(video, want_video, atol=1e-4, rtol=1e-4), (video - want_video).abs().max()
    assert torch.allclose(audio, want_audio, atol=1e-4, rtol=1e-4), (audio - want_audio).abs().max()
    # without the record the slot is an unmarked guide token: the first frame alone is marked
    assert torch.allclose(plain, first_only, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(plain, video, atol=1e-3)


def test_the_record_reaches_the_network_through_extra_conds():
    record = {"first_latent_frame": 3, "num_keyframes": 2}
    conds = LTXAVConditions().extra_conds(object(), generated_keyframes=record, keyframe_idxs=torch.zeros(1, 3, 4, 2))
    assert conds["generated_keyframes"] is record and "keyframe_idxs" in conds
    assert "generated_keyframes" not in LTXAVConditions().extra_conds(object())

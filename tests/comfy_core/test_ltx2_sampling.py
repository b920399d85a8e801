"""A 2-step Euler sample of the tiny LTX-2 joint model through this engine's model wrapper
(`DiffusionModel.apply_model` with the LTX-2 conditions and flow sampling) on ComfyUI's packed
audio-video latent, against the same two steps run by hand on diffusers'
`LTX2VideoTransformer3DModel` (0.42.1). (The samplers' latent check does not take the packed
`[B, 1, N]` latent yet.)"""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.ltx2.conditions import LTXAVConditions
from comfy_core.families.ltx2.dit import LTXAVInputError, pack_latents, patchify_audio, unpack_latents, unpatchify_audio
from comfy_core.models.diffusion import DiffusionModel
from comfy_core.models.latent_formats import LatentFormat
from comfy_core.models.model_sampling import FlowModelSampling
from tests.comfy_core.test_ltx2_dit import F_, H_, RATE, T_AUDIO, W_, _diffusers, _inputs, _load, _reference


def test_pack_and_unpack_are_inverse():
    parts = [torch.randn(2, 3, 2, 2, 2), torch.randn(2, 8, 4, 16)]
    packed, shapes = pack_latents(parts)
    assert packed.shape == (2, 1, 24 + 512) and shapes == [[2, 3, 2, 2, 2], [2, 8, 4, 16]]
    again = unpack_latents(packed, shapes)
    assert all(torch.equal(a, b) for a, b in zip(parts, again))
    with pytest.raises(LTXAVInputError, match="packed"):
        unpack_latents(packed[..., :-1], shapes)


def test_two_step_sample_matches_diffusers(tmp_path):
    network, bare, _ = _load(tmp_path, "2.0")
    ref = _reference(bare, "2.0")
    vx, ax, v_ctx, a_ctx = _inputs(11)
    noise, shapes = pack_latents([vx, ax])
    fmt = LatentFormat(name="ltxav-test", channels=16, scale_factor=1.0)
    model = DiffusionModel(network, FlowModelSampling(shift=1.0, multiplier=1.0), fmt, adm=LTXAVConditions())
    sigmas = torch.tensor([1.0, 0.55, 0.0])
    context = torch.cat([v_ctx, a_ctx], -1)
    extra = model.extra_inputs(latent_shapes=shapes, frame_rate=RATE)
    with torch.no_grad():
        ours = noise.clone()
        for s, s_next in zip(sigmas[:-1], sigmas[1:]):  # Euler on the denoised estimate (k-diffusion's form)
            denoised = model.apply_model(ours, s.reshape(1), c_crossattn=context, **extra)
            ours = ours + (ours - denoised) / s * (s_next - s)
        video, audio = vx.clone(), ax.clone()
        for s, s_next in zip(sigmas[:-1].tolist(), sigmas[1:].tolist()):
            v_vel, a_vel = _diffusers(ref, video, audio, v_ctx, a_ctx, s, "2.0")
            video, audio = video + (s_next - s) * v_vel, audio + (s_next - s) * a_vel
    got_video, got_audio = unpack_latents(ours, shapes)
    assert got_video.shape == (1, 16, F_, H_, W_) and got_audio.shape == (1, 8, T_AUDIO, 16)
    assert torch.allclose(got_video, video, atol=1e-4), (got_video - video).abs().max()
    assert torch.allclose(got_audio, audio, atol=1e-4), (got_audio - audio).abs().max()


def test_packed_denoise_mask_splits_into_video_and_audio():
    shapes = [[1, 16, F_, H_, W_], [1, 8, T_AUDIO, 16]]
    video_mask, audio_mask = torch.ones(1, 16, F_, H_, W_), torch.zeros(1, 8, T_AUDIO, 16)
    packed, _ = pack_latents([video_mask, audio_mask])
    out = LTXAVConditions().extra_conds(None, denoise_mask=packed, latent_shapes=shapes)
    assert torch.equal(out["denoise_mask"], video_mask) and torch.equal(out["audio_denoise_mask"], audio_mask)
    assert out["frame_rate"] == 25 and out["latent_shapes"] == shapes

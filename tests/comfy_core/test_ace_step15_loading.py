"""ACE-Step 1.5 files load as ComfyUI's do: the all-in-one checkpoint (network, the 0.6B and LM text
encoders, the 48 kHz Oobleck VAE), the split diffusion model and VAE; the conditioning the network
receives (ComfyUI's `ACEStep15.extra_conds`) and one model call through the sampler's path."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from comfy_core.families.ace_step15.conditions import AceStep15Conditions
from comfy_core.families.ace_step15.silence import silence_latent
from tests.fixtures.ace_step_files import (TEXT_DIM, tiny_ace_state_dict, tiny_vae_state_dict, write_ace_checkpoint,
                                           write_ace_diffusion_model, write_safetensors)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.loading import load_checkpoint

    path = write_ace_checkpoint(tmp_path_factory.mktemp("ace") / "ace_step_1.5_turbo_aio.safetensors",
                                dtype=torch.bfloat16)
    return load_checkpoint(path)


def test_all_in_one_checkpoint_loads_every_part(loaded):
    model, clip, vae = loaded
    network = model.model.diffusion_model
    assert model.model.family.name == "ace_step15" and type(network).__name__ == "AceStepConditionGenerationModel"
    assert type(model.model.model_config).__name__ == "ACEStep15"
    assert model.model.model_config.unet_config["audio_model"] == "ace1.5"
    assert type(clip.cond_stage_model).__name__ == "ACE15TEModel" and clip.cond_stage_model.slots == ("qwen3_06b",
                                                                                                     "qwen3_4b")
    assert (vae.audio_sample_rate, vae.latent_channels, vae.upscale_ratio, vae.latent_dim) == (48000, 64, 1920, 1)
    audio = vae.decode(torch.randn(1, 64, 3))
    assert audio.shape == (1, 3 * 1920, 2)
    sampling = model.model.model_sampling
    assert sampling.shift == pytest.approx(3.0) and sampling.multiplier == pytest.approx(1.0)


def test_split_files_load_through_the_split_loaders(tmp_path):
    from comfy_core.loading import load_vae
    from comfy_core.split.diffusion_model import load_diffusion_model

    unet = load_diffusion_model(write_ace_diffusion_model(tmp_path / "acestep_v1.5_turbo.safetensors",
                                                          dtype=torch.bfloat16))
    assert unet.model.family.name == "ace_step15"
    assert unet.model.diffusion_model.config.encoder_width == 24
    vae = load_vae(write_safetensors(tmp_path / "ace_1.5_vae.safetensors", tiny_vae_state_dict()))
    assert type(vae).__name__ == "OobleckVaePatcher" and vae.audio_sample_rate == 48000


def test_conditions_follow_comfyuis_extra_conds():
    conditions = AceStep15Conditions()
    noise = torch.zeros(1, 64, 900)
    text, lyrics = torch.randn(1, 4, TEXT_DIM), torch.randn(1, 3, TEXT_DIM)
    with_codes = conditions.extra_conds(None, noise=noise, cross_attn=text, conditioning_lyrics=lyrics,
                                        audio_codes=[[5, 6, 7]])
    assert with_codes["audio_codes"].tolist() == [[5, 6, 7]] and "is_covers" not in with_codes
    assert "replace_with_null_embeds" not in with_codes and with_codes["lyric_embed"] is lyrics
    # the timbre reference: the silence latent's first 750 frames, then its frames from 750 on (the same)
    torch.testing.assert_close(with_codes["refer_audio"], silence_latent(900))
    no_codes = conditions.extra_conds(None, noise=noise, cross_attn=torch.zeros(1, 4, TEXT_DIM),
                                      conditioning_lyrics=lyrics)
    assert no_codes["is_covers"] is False and no_codes["replace_with_null_embeds"] is True
    reference = torch.randn(1, 64, 500)
    covered = conditions.extra_conds(None, noise=noise, cross_attn=text, conditioning_lyrics=lyrics,
                                     audio_codes=[[1]], reference_audio_timbre_latents=[torch.randn(1, 64, 9), reference])
    assert covered["is_covers"] is True and "audio_codes" not in covered
    torch.testing.assert_close(covered["refer_audio"][:, :, :500], reference)
    torch.testing.assert_close(covered["refer_audio"][:, :, 500:], silence_latent(900)[:, :, 500:])


def test_silence_latent_is_the_onset_then_the_steady_frame():
    latent = silence_latent(6)
    assert latent.shape == (1, 64, 6)
    assert latent[0, :3, 0].tolist() == pytest.approx([0.5707, 0.0982, 0.6909])
    assert latent[0, 19, 1].item() == pytest.approx(-5.0707)
    torch.testing.assert_close(latent[:, :, 4], latent[:, :, 5])
    assert latent[0, 63, 5].item() == pytest.approx(1.0)
    assert silence_latent(2).shape == (1, 64, 2)


def test_one_model_call_through_the_sampler_path(loaded):
    model = loaded[0]
    diffusion = model.model
    noise = torch.randn(1, 64, 10)
    extra = diffusion.extra_inputs(noise=noise, device=noise.device, cross_attn=torch.randn(1, 4, TEXT_DIM),
                                   conditioning_lyrics=torch.randn(1, 3, TEXT_DIM), audio_codes=[[3, 4]])
    sigma = torch.tensor([0.8])
    with torch.no_grad(), model.applied():
        denoised = diffusion.apply_model(noise, sigma, c_crossattn=torch.randn(1, 4, TEXT_DIM), **extra)
    assert denoised.shape == noise.shape and torch.isfinite(denoised).all()
    state = tiny_ace_state_dict()
    assert set(state) <= {k for k, _ in diffusion.diffusion_model.state_dict().items()}


def test_whole_sample_matches_diffusers_flow_loop(tmp_path):
    """KSampler (euler, simple, 8 steps, cfg 1, shift 3) from the same noise as diffusers'
    AceStepPipeline loop: its DiT and FlowMatchEulerDiscreteScheduler over the pipeline's shifted
    schedule, fed the encoder states and hints our network computes (both checked against diffusers
    in test_ace_step15.py)."""
    from diffusers import AceStepTransformer1DModel, FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.ace_step.pipeline_ace_step import AceStepPipeline

    from comfy_core.sampling.ksampler import sample
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.comfy_core.test_ace_step15 import _stack_kwargs, to_diffusers
    from tests.fixtures.ace_step_files import tiny_config

    state = tiny_ace_state_dict(seed=9)
    model = load_diffusion_model(write_ace_diffusion_model(tmp_path / "acestep_v1.5_turbo.safetensors", state))
    torch.manual_seed(0)
    length, text, lyrics = 14, torch.randn(1, 5, TEXT_DIM), torch.randn(1, 4, TEXT_DIM)
    codes = [[17, 40000, 3]]
    positive = [[text, {"conditioning_lyrics": lyrics, "audio_codes": codes}]]
    noise = torch.randn(1, 64, length)
    got = sample(model, noise, 8, 1.0, "euler", "simple", positive, positive, torch.zeros(1, 64, length),
                 disable_pbar=True)

    network = model.model.diffusion_model
    refer = silence_latent(length).movedim(-1, -2)
    with torch.no_grad():
        states = network.encoder(text, lyrics, refer, torch.zeros(1, dtype=torch.long))
        hints = network.hints(length, refer, torch.tensor(codes), torch.float32)
    context = torch.cat([hints, torch.ones(1, length, 64)], dim=-1)
    config = tiny_config()
    reference = AceStepTransformer1DModel(**_stack_kwargs(config.dit), num_hidden_layers=config.dit.layers,
                                          in_channels=192, audio_acoustic_hidden_dim=64, patch_size=2,
                                          encoder_hidden_size=config.encoder_width).eval()
    reference.load_state_dict(to_diffusers(state, "decoder."), strict=True)
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1, shift=1.0)
    schedule = AceStepPipeline._get_timestep_schedule(None, num_inference_steps=8, shift=3.0, dtype=torch.float32)
    scheduler.set_timesteps(sigmas=schedule.tolist())
    x = noise.movedim(-1, -2)
    with torch.no_grad():
        for t in scheduler.timesteps:
            step_t = torch.full((1,), float(t))
            v = reference(x, step_t, step_t, states, context, return_dict=False)[0]
            x = scheduler.step(v, t, x, return_dict=False)[0]
    torch.testing.assert_close(got, x.movedim(-1, -2), atol=1e-4, rtol=1e-4)


def test_lora_layers_are_named_as_comfyui_names_them(loaded):
    from comfy_core.lora.dit_keymap import dit_key_map

    key_map = dit_key_map(loaded[0].model)
    target = "diffusion_model.decoder.layers.0.self_attn.q_proj.weight"
    assert key_map["diffusion_model.decoder.layers.0.self_attn.q_proj"] == target
    assert key_map["lora_unet_decoder_layers_0_self_attn_q_proj"] == target
    assert key_map["lora_unet_encoder_lyric_encoder_layers_0_mlp_gate_proj"] == \
        "diffusion_model.encoder.lyric_encoder.layers.0.mlp.gate_proj.weight"

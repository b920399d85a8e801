"""Stable Audio Open as a family: the released single file's layout detected and loaded (the DiT, the
seconds embedders, the Oobleck VAE as an audio VAE, continuous-v sampling), T5-base through
CLIPLoader type "stable_audio" (token mask, states zeroed after the prompt), the seconds
conditioning ComfyUI's `StableAudio1.extra_conds` forms, and a headless text-to-audio run whose
saved FLAC is read back (channels, rate, duration)."""
from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
import torch

from comfy_core.families.stable_audio.conditioner import FRAMES_PER_SECOND
from comfy_core.loading import load_checkpoint
from comfy_core.models.model_conditions import ConditioningError
from comfy_core.models.model_sampling import ContinuousVModelSampling
from comfy_core.patching.audio_vae import AudioVaePatcher
from comfy_core.split.text_encoder_files import load_text_encoders
from tests.fixtures.stable_audio_files import T5_WIDTH, write_checkpoint, write_t5_base


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stable_audio")
    return {"checkpoint": write_checkpoint(root / "models" / "checkpoints" / "stable-audio-open-1.0.safetensors"),
            "t5": write_t5_base(root / "models" / "text_encoders" / "t5-base.safetensors"), "root": root}


@pytest.fixture(scope="module")
def loaded(files):
    return load_checkpoint(files["checkpoint"])


def test_the_single_file_loads_as_stable_audio(loaded):
    model, clip, vae = loaded
    dm = model.model
    assert dm.family.name == "stable_audio" and clip is None  # the release carries no text encoder
    assert isinstance(dm.model_sampling, ContinuousVModelSampling)
    assert float(dm.model_sampling.sigma_min) == pytest.approx(0.03, rel=1e-6)
    assert float(dm.model_sampling.sigma_max) == pytest.approx(500.0, rel=1e-6)
    assert dm.seconds_start_embedder.width == dm.seconds_total_embedder.width == T5_WIDTH
    assert isinstance(vae, AudioVaePatcher)  # the audio nodes take it
    assert (vae.latent_channels, vae.latent_dim, vae.downscale_ratio, vae.audio_sample_rate) == (64, 1, 2048, 44100)
    assert type(dm.model_config).__name__ == "StableAudio"
    audio = vae.decode(torch.zeros(1, 64, 3))
    assert audio.shape == (1, 3 * 2048, 2)
    assert vae.encode(audio).shape == (1, 64, 3)


def test_tiled_decode_is_comfyui_1d_tiling(loaded):
    vae = loaded[2]
    latent = torch.randn(1, 64, 12, generator=torch.Generator().manual_seed(0))
    whole = vae.decode(latent)
    assert torch.equal(vae.decode_tiled(latent, tile_y=4, overlap=2), whole)  # tile_y ignored: one 128-frame tile
    tiled = vae.decode_tiled(latent, tile_x=6, overlap=2)
    assert tiled.shape == whole.shape == (1, 12 * 2048, 2)
    assert not torch.equal(tiled, whole)
    with pytest.raises(ValueError, match="overlap"):
        vae.decode_tiled(latent, tile_x=4, overlap=4)


def test_seconds_conditioning(loaded):
    dm = loaded[0].model
    noise = torch.zeros(1, 64, 100)
    text = torch.randn(2, 7, T5_WIDTH)
    out = dm.extra_inputs(noise=noise, device=noise.device, cross_attn=text, seconds_start=3)
    start = dm.seconds_start_embedder([3])[0]
    total = dm.seconds_total_embedder([int(100 / FRAMES_PER_SECOND)])[0]  # the latent's duration by default
    assert torch.allclose(out["global_embed"], torch.cat((start, total), dim=-1))
    assert out["c_crossattn"].shape == (2, 9, T5_WIDTH)
    assert torch.equal(out["c_crossattn"][:, :7], text)
    assert torch.allclose(out["c_crossattn"][1, 7], start[0]) and torch.allclose(out["c_crossattn"][1, 8], total[0])
    with pytest.raises(ConditioningError, match="wrong text encoder"):
        dm.extra_inputs(noise=noise, device=noise.device, cross_attn=torch.randn(1, 7, T5_WIDTH + 1))


def test_the_samplers_take_audio_latents_for_audio_models_only(loaded):
    from nodes.errors import NodeInputError
    from nodes.sampling import ksampler

    cond = [[torch.zeros(1, 4, T5_WIDTH), {}]]
    with pytest.raises(NodeInputError, match=r"\[B, C, t\] \(audio\)"):
        ksampler(loaded[0], 0, 1, 1.0, "euler", "normal", cond, cond, {"samples": torch.zeros(1, 64, 4, 4)}, 1.0)
    out = ksampler(loaded[0], 0, 1, 1.0, "euler", "normal", cond, cond, {"samples": torch.zeros(1, 64, 4)}, 1.0)
    assert out[0]["samples"].shape == (1, 64, 4)


def test_t5_base_pads_to_128_and_zeroes_after_the_prompt(files):
    clip = load_text_encoders([files["t5"]], "stable_audio")
    assert type(clip.cond_stage_model).__name__ == "SAT5Model"
    tokens = clip.tokenize("heaven church electronic dance music")
    ids = [t for t, _w in tokens["t5xxl"][0]]
    assert len(ids) == 128 and ids.count(1) == 1  # end token once, then padding
    cond = clip.encode_from_tokens_scheduled(tokens)[0][0]
    end = ids.index(1)
    assert cond.shape == (1, 128, T5_WIDTH)
    assert cond[0, :end + 1].abs().sum(-1).min() > 0 and cond[0, end + 1:].abs().max() == 0


def test_text_to_audio_runs_headless_and_the_audio_reads_back(files):
    from comfy_core.video.audio_files import read_audio
    from web.config import ServerConfig
    from web.headless import run_workflow

    prompt = {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": files["checkpoint"].name}},
        "10": {"class_type": "CLIPLoader", "inputs": {"clip_name": files["t5"].name, "type": "stable_audio"}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "rain on a tin roof", "clip": ["10", 0]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["10", 0]}},
        "11": {"class_type": "EmptyLatentAudio", "inputs": {"seconds": 1.0, "batch_size": 1}},
        "3": {"class_type": "KSampler", "inputs": {
            "model": ["4", 0], "seed": 1, "steps": 2, "cfg": 4.0, "sampler_name": "dpmpp_3m_sde_gpu",
            "scheduler": "exponential", "positive": ["6", 0], "negative": ["7", 0], "latent_image": ["11", 0],
            "denoise": 1.0}},
        "12": {"class_type": "VAEDecodeAudio", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "20": {"class_type": "SaveAudio", "inputs": {"filename_prefix": "audio/sa", "audio": ["12", 0]}}}
    root = files["root"]
    path = root / "prompt.json"
    path.write_text(json.dumps(prompt))
    out, err = io.StringIO(), io.StringIO()
    code = asyncio.run(run_workflow(ServerConfig(base_dir=root, output_dir=root / "output"), path, out=out, err=err))
    assert code == 0, err.getvalue()[-2000:]
    written = [line.split(" ", 1)[1] for line in out.getvalue().splitlines() if line.startswith("wrote ")]
    waveform, rate = read_audio(written[0])
    frames = round(1.0 * 44100 / 2048 / 2) * 2  # EmptyLatentAudio's latent frames for 1 s
    assert rate == 44100 and waveform.shape == (2, frames * 2048)
    assert waveform.abs().max() > 0

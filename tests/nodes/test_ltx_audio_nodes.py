"""LTX-2's audio VAE nodes (nodes/ltx_audio_nodes.py) and the generic audio latent nodes
(nodes/audio_latent.py) on a tiny audio VAE file (tests/fixtures/ltx_audio_files.py), and a video
saved with the decoded audio track: duration and sample count in sync."""
from __future__ import annotations

import asyncio
import math
from pathlib import Path

import av
import pytest
import torch

from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.audio_latent import (empty_latent_audio, record_audio, vae_decode_audio, vae_decode_audio_tiled,
                                vae_encode_audio)
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.ltx_audio_nodes import (_audio_vae_names, ltxv_audio_vae_decode, ltxv_audio_vae_encode,
                                   ltxv_audio_vae_loader, ltxv_empty_latent_audio)
from tests.fixtures import ltx_audio_files as fx
from tests.nodes.node_context import folders_env, running_node


@pytest.fixture
def env(tmp_path: Path) -> Environment:
    environment = folders_env(tmp_path)
    fx.write_ltx_audio_vae(tmp_path / "base" / "models" / "vae" / "ltx2_audio_vae.safetensors")
    fx.write_ltx_audio_vae(tmp_path / "base" / "models" / "checkpoints" / "ltx23_av.safetensors", bwe=True)
    return environment


def _load(env: Environment, name: str = "ltx2_audio_vae.safetensors"):
    with running_node("LTXVAudioVAELoader", "1", env):
        (vae,) = ltxv_audio_vae_loader(name)
    return vae


def _tone(seconds: float, rate: int, channels: int = 2) -> dict:
    t = torch.arange(round(seconds * rate)) / rate
    wave = 0.3 * torch.sin(2 * math.pi * 440 * t)
    return {"waveform": wave.expand(1, channels, -1).contiguous(), "sample_rate": rate}


class _Nested:
    """ComfyUI's NestedTensor interface (comfy/nested_tensor.py) as LTXVConcatAVLatent makes it."""

    is_nested = True

    def __init__(self, tensors: list) -> None:
        self.tensors = tensors

    def unbind(self) -> list:
        return self.tensors


def test_loader_lists_vae_then_checkpoint_files_and_loads_both(env):
    assert _audio_vae_names(env) == ["ltx2_audio_vae.safetensors", "ltx23_av.safetensors"]
    plain, bwe = _load(env), _load(env, "ltx23_av.safetensors")
    assert plain.latent_channels == fx.Z and plain.latent_dim == 2 and plain.audio_sample_rate_output == 16000
    assert type(bwe.first_stage_model.vocoder).__name__ == "VocoderWithBWE"
    assert plain.autoencoder is plain.first_stage_model.autoencoder  # the LTXV pack reads vae.autoencoder
    with pytest.raises(NodeInputError, match="ckpt_name"):
        _load(env, "missing.safetensors")
    from safetensors.torch import save_file

    save_file({"decoder.conv_in.weight": torch.zeros(1)}, str(env.folders.paths("vae")[0] / "image_vae.safetensors"))
    with pytest.raises(NodeInputError, match="LTX-2 audio VAE file"):
        _load(env, "image_vae.safetensors")


def test_encode_then_decode_through_the_nodes(env):
    vae = _load(env)
    audio = _tone(0.5, 22050)
    with running_node("LTXVAudioVAEEncode", "2", env):
        (latent,) = ltxv_audio_vae_encode(audio, vae)
    # 0.5 s -> 8000 samples at 16 kHz -> 51 mel frames -> ceil(51 / 4) latent frames
    assert latent["samples"].shape == (1, fx.Z, 13, 16)
    with torch.no_grad():
        direct = vae.first_stage_model.encode(
            __import__("comfy_core.models.ltx_audio_vae", fromlist=["sinc_resample"]).sinc_resample(
                audio["waveform"], 22050, 44100), 44100)
    assert torch.allclose(latent["samples"], direct, atol=1e-6)  # VAEEncodeAudio's path: 44.1 kHz first
    with running_node("LTXVAudioVAEDecode", "3", env):
        (decoded,) = ltxv_audio_vae_decode(latent, vae)
    assert decoded["sample_rate"] == 16000 and decoded["waveform"].shape == (1, 2, (4 * 13 - 3) * fx.HOP)
    nested = {"samples": _Nested([torch.zeros(1, 128, 2, 1, 1), latent["samples"]])}
    with running_node("LTXVAudioVAEDecode", "3", env):
        (from_av,) = ltxv_audio_vae_decode(nested, vae)  # the audio part of an audio-video latent
    assert torch.allclose(from_av["waveform"], decoded["waveform"])
    with running_node("LTXVAudioVAEDecode", "3", env), pytest.raises(NodeInputError, match="audio_vae"):
        ltxv_audio_vae_decode(latent, object())
    with running_node("LTXVAudioVAEEncode", "2", env), pytest.raises(NodeInputError, match="audio"):
        ltxv_audio_vae_encode({"waveform": torch.zeros(1, 3, 100), "sample_rate": 16000}, vae)


def test_empty_latent_audio_covers_the_videos_frames(env):
    vae = _load(env)
    with running_node("LTXVEmptyLatentAudio", "4", env):
        (latent,) = ltxv_empty_latent_audio(97, 25.0, 2, vae)
        (by_int,) = ltxv_empty_latent_audio(121, 24, 1, vae)  # frame_rate may be linked as INT
    assert latent["type"] == "audio" and latent["samples"].shape == (2, fx.Z, 97, 16)  # 25 latents a second
    assert by_int["samples"].shape == (1, fx.Z, round(121 / 24 * 25), 16) and not by_int["samples"].any()
    with running_node("LTXVEmptyLatentAudio", "4", env), pytest.raises(NodeInputError, match="frame_rate"):
        ltxv_empty_latent_audio(97, 0.0, 1, vae)


def test_generic_audio_latent_nodes(env):
    vae = _load(env)
    (empty,) = empty_latent_audio(47.6, 3)
    assert empty["type"] == "audio" and empty["samples"].shape == (3, 64, round(47.6 * 44100 / 2048 / 2) * 2)
    audio = _tone(0.4, 16000)
    with running_node("VAEEncodeAudio", "5", env):
        (latent,) = vae_encode_audio(audio, vae)
        (ltx,) = ltxv_audio_vae_encode(audio, vae)
    assert torch.equal(latent["samples"], ltx["samples"])
    with running_node("VAEDecodeAudio", "6", env):
        (decoded,) = vae_decode_audio(latent, vae)
        (labelled,) = vae_decode_audio({**latent, "sample_rate": 16000}, vae)
    raw = vae.decode(latent["samples"]).movedim(-1, 1)
    guard = (raw.std(dim=[1, 2], keepdim=True) * 5.0).clamp_min(1.0)  # loud clips scaled down, quiet kept
    assert torch.allclose(decoded["waveform"], raw / guard)
    assert decoded["sample_rate"] == 44100 and labelled["sample_rate"] == 16000  # ComfyUI's labelling
    with running_node("VAEDecodeAudio", "6", env), pytest.raises(NodeInputError, match="vae"):
        vae_decode_audio(latent, "not a vae")


def test_tiled_decode_matches_the_whole_decode_before_the_first_seam(env):
    vae = _load(env)
    latent = {"samples": torch.randn(1, fx.Z, 20, 16, generator=torch.Generator().manual_seed(0))}
    with running_node("VAEDecodeAudioTiled", "7", env):
        (tiled,) = vae_decode_audio_tiled(latent, vae, 8, 2)
        (whole,) = vae_decode_audio(latent, vae)
        (one_tile,) = vae_decode_audio_tiled(latent, vae, 32, 8)
    assert tiled["waveform"].shape == whole["waveform"].shape == (1, 2, (4 * 20 - 3) * fx.HOP)
    # the decoder is causal: the first tile's first 16 mel frames are the whole decode's
    head = 16 * fx.HOP
    a, b = tiled["waveform"][..., :head], whole["waveform"][..., :head]
    scale_a, scale_b = a.abs().max(), b.abs().max()
    assert torch.allclose(a / scale_a, b / scale_b, atol=1e-4)
    assert torch.allclose(one_tile["waveform"], whole["waveform"])  # one tile: the plain decode
    with running_node("VAEDecodeAudioTiled", "7", env), pytest.raises(NodeInputError, match="overlap"):
        vae_decode_audio_tiled(latent, vae, 32, 32)


def test_record_audio_reads_the_uploaded_recording(env):
    from comfy_core.video.audio_files import encode_audio

    data = encode_audio(_tone(0.25, 16000, channels=1)["waveform"][0], 16000, "flac")
    (env.input_dir / "recording.flac").write_bytes(data)
    with running_node("RecordAudio", "8", env):
        (audio,) = record_audio("recording.flac")
    assert audio["sample_rate"] == 16000 and audio["waveform"].shape == (1, 1, 4000)
    with running_node("RecordAudio", "8", env), pytest.raises(NodeInputError):
        record_audio("absent.flac")


def test_an_ltx2_audio_prompt_validates(env):
    registry = Registry()
    register_builtin_nodes(registry)
    prompt = {
        "1": {"class_type": "LTXVAudioVAELoader", "inputs": {"ckpt_name": "ltx2_audio_vae.safetensors"}},
        "2": {"class_type": "LTXVEmptyLatentAudio",
              "inputs": {"frames_number": 97, "frame_rate": 25.0, "batch_size": 1, "audio_vae": ["1", 0]}},
        "3": {"class_type": "LTXVAudioVAEDecode", "inputs": {"samples": ["2", 0], "audio_vae": ["1", 0]}},
        "4": {"class_type": "SaveAudio", "inputs": {"audio": ["3", 0], "filename_prefix": "audio/ComfyUI"}},
        "5": {"class_type": "RecordAudio", "inputs": {"audio": "recording.flac"}},
        "6": {"class_type": "PreviewAudio", "inputs": {"audio": ["5", 0]}},
    }
    result = asyncio.run(validate_prompt(prompt, registry, env=env))
    assert result.ok, result
    prompt["2"]["inputs"]["frame_rate"] = 24  # an INT constant on the FLOAT,INT input
    assert asyncio.run(validate_prompt(prompt, registry, env=env)).ok


def test_a_saved_video_carries_the_decoded_audio_in_sync(env):
    """LTX-2's pairing: 25 audio latents a second, a video of `frames` frames at 25 fps; the saved
    file's audio lasts as long as its frames (CreateVideo + SaveVideo, PyAV)."""
    from nodes.video_io import create_video, get_video_components, load_video, save_video

    vae = _load(env)
    frames, fps = 25, 25.0
    with running_node("LTXVEmptyLatentAudio", "1", env):
        (latent,) = ltxv_empty_latent_audio(frames, fps, 1, vae)
    latent["samples"] = torch.randn(latent["samples"].shape, generator=torch.Generator().manual_seed(1))
    with running_node("LTXVAudioVAEDecode", "2", env):
        (audio,) = ltxv_audio_vae_decode(latent, vae)
    rate = audio["sample_rate"]
    images = torch.linspace(0, 1, frames)[:, None, None, None].expand(frames, 16, 16, 3).contiguous()
    with running_node("SaveVideo", "3", env):
        (video,) = create_video(images, fps, audio)
        ui = save_video(video, "video/ltx2", "mp4", "h264")
    record = ui["ui"]["images"][0]
    path = env.output_dir / record["subfolder"] / record["filename"]
    with av.open(str(path)) as container:
        video_stream, audio_stream = container.streams.video[0], container.streams.audio[0]
        decoded_frames = sum(1 for _ in container.decode(video_stream))
        container.seek(0)
        samples = sum(f.samples for f in container.decode(audio_stream))
        audio_rate = audio_stream.codec_context.sample_rate
    assert decoded_frames == frames and audio_rate == rate
    seconds = frames / fps
    decoded_seconds = audio["waveform"].shape[-1] / rate
    assert round((seconds - decoded_seconds) * rate) == 3 * fx.HOP  # the causal decode is 3 mel frames short
    # the muxed track covers the decoded audio, at most one AAC frame of padding more
    assert audio["waveform"].shape[-1] <= samples <= audio["waveform"].shape[-1] + 2048
    with running_node("LoadVideo", "4", env):
        (loaded,) = load_video(f"{record['subfolder']}/{record['filename']} [output]")["result"]
        _, back, back_fps, _, _ = get_video_components(loaded)
    assert back["sample_rate"] == rate and float(back_fps) == fps
    assert abs(back["waveform"].shape[-1] / rate - decoded_seconds) <= 2048 / rate


def test_packs_reach_the_nodes_through_comfy_extras(comfy_nodes, env):
    import comfy_extras.nodes_audio as audio_module
    import comfy_extras.nodes_lt_audio as lt_module

    assert {"LTXVAudioVAELoader", "LTXVAudioVAEEncode", "LTXVAudioVAEDecode",
            "LTXVEmptyLatentAudio"} <= set(lt_module.NODE_CLASS_MAPPINGS)
    assert {"EmptyLatentAudio", "VAEEncodeAudio", "VAEDecodeAudio", "VAEDecodeAudioTiled",
            "RecordAudio"} <= set(audio_module.NODE_CLASS_MAPPINGS)
    (latent,) = audio_module.EmptyLatentAudio().generate(10.0, 1)  # ComfyUI 0.3.64's V1 method
    assert latent["samples"].shape == (1, 64, round(10.0 * 44100 / 2048 / 2) * 2)
    vae = _load(env)
    with running_node("VAEEncodeAudio", "9", env):
        (encoded,) = audio_module.VAEEncodeAudio().encode(vae, _tone(0.2, 16000))  # (vae, audio), as 0.3.64
    assert encoded["samples"].shape[:2] == (1, fx.Z)


def test_packs_import_the_audio_vae_modules_by_comfyuis_names(comfy_nodes):
    from comfy.ldm.lightricks.vae.audio_vae import LATENT_DOWNSAMPLE_FACTOR, AudioVAE
    from comfy.ldm.lightricks.vae.causal_audio_autoencoder import CausalAudioAutoencoder
    from comfy.ldm.lightricks.vocoders.vocoder import Vocoder, VocoderWithBWE

    from comfy_core.models import ltx_audio_vae, ltx_vocoder

    model = AudioVAE(fx.metadata())  # ComfyUI's constructor: the file's metadata
    assert isinstance(model.autoencoder, CausalAudioAutoencoder) and isinstance(model.vocoder, Vocoder)
    assert LATENT_DOWNSAMPLE_FACTOR == 4 and VocoderWithBWE is ltx_vocoder.VocoderWithBWE
    assert AudioVAE is ltx_audio_vae.LTXAudioVAE


def test_vae_loader_loads_an_ltx_audio_vae_file(env):
    """LTX-2.5's templates load the audio VAE with VAELoader (ComfyUI's VAE detects the vocoder)."""
    from comfy_core.checkpoint.errors import CheckpointError
    from comfy_core.patching.audio_vae import AudioVaePatcher
    from nodes.loaders import vae_loader

    with running_node("VAELoader", "1", env):
        (vae,) = vae_loader("ltx2_audio_vae.safetensors")
    assert isinstance(vae, AudioVaePatcher) and vae.latent_channels == fx.Z
    from safetensors.torch import save_file

    broken = {k: v for k, v in fx.tiny_audio_state_dict().items() if "conv_out" not in k}
    save_file(broken, str(env.folders.paths("vae")[0] / "broken_audio.safetensors"), metadata=fx.metadata())
    with running_node("VAELoader", "1", env), pytest.raises(CheckpointError, match="LTX audio VAE"):
        vae_loader("broken_audio.safetensors")


def test_comfy_sd_vae_builds_the_audio_vae_from_its_state_dict(comfy_nodes):
    """ComfyUI's own LTXVAudioVAELoader: `comfy.sd.VAE(sd=..., metadata=...)` after renaming
    `audio_vae.` to `autoencoder.`; packs copying it get the audio VAE."""
    import comfy.sd

    from comfy_core.patching.audio_vae import AudioVaePatcher

    sd = {("autoencoder." + k[len("audio_vae."):] if k.startswith("audio_vae.") else k): v
          for k, v in fx.tiny_audio_state_dict().items()}
    vae = comfy.sd.VAE(sd=sd, metadata=fx.metadata())
    assert isinstance(vae, AudioVaePatcher) and isinstance(vae, comfy.sd.VAE)
    vae.throw_exception_if_invalid()
    assert vae.latent_channels == fx.Z and vae.first_stage_model.output_sample_rate == 16000
    assert type(vae.clone()) is AudioVaePatcher
    latent = vae.encode(_tone(0.2, 44100)["waveform"].movedim(1, -1))
    assert latent.shape[:2] == (1, fx.Z) and vae.decode(latent).shape[-1] == 2  # [B, S, C]
    with pytest.raises(TypeError, match="metadata"):
        comfy.sd.VAE(sd=sd, metadata=fx.metadata(), config={"params": {}})

"""ComfyUI's audio latent and recording nodes (today's `comfy_extras/nodes_audio.py`, V3 schemas):

- EmptyLatentAudio: zeros `[B, 64, round(seconds * 44100 / 2048 / 2) * 2]`, `type` "audio"
  (Stable Audio's latent: 64 channels, 2048 samples a frame at 44.1 kHz).
- VAEEncodeAudio: the waveform resampled to the VAE's `audio_sample_rate` (44.1 kHz when it
  names none), channels last, through `vae.encode` -> `{"samples": latent}`.
- VAEDecodeAudio / VAEDecodeAudioTiled: `vae.decode` (or `decode_tiled(tile_y=tile_size,
  overlap=overlap)`), channels first, and ComfyUI's loudness guard: each clip divided by
  `max(1, 5 * std)`; the rate is the latent's `sample_rate` if it carries one, else the VAE's
  `audio_sample_rate` (44.1 kHz when it names none).
- RecordAudio: the editor's microphone widget (`AUDIO_RECORD`) uploads the recording into the
  input folder and sends its name; the file is read as LoadAudio reads one.

A VAE here is one with an audio path (`comfy_core.patching.audio_vae.AudioVaePatcher`, LTX-2's
audio VAE); an image or video VAE is a `NodeInputError` naming the `vae` input.
"""
from __future__ import annotations

from typing import Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Float, Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes._media_files import media_errors
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe
from nodes.image import annotated_path

MODULE = "comfy_extras.nodes_audio"
STABLE_AUDIO_RATE, STABLE_AUDIO_FRAME, STABLE_AUDIO_CHANNELS = 44100, 2048, 64


def _audio_vae(vae: Any) -> Any:
    from comfy_core.patching.audio_vae import AudioVaePatcher

    if not isinstance(vae, AudioVaePatcher):
        raise NodeInputError("vae", "an audio VAE (LTXVAudioVAELoader's)", describe(vae))
    return vae


@v3_node("EmptyLatentAudio", display_name="Empty Latent Audio", category="latent/audio", python_module=MODULE,
         inputs=[Float("seconds", default=47.6, min=1.0, max=1000.0, step=0.1),
                 Int("batch_size", default=1, min=1, max=4096, tooltip="The number of latent images in the batch.")],
         outputs=[Output("LATENT")])
def empty_latent_audio(seconds: float, batch_size: int) -> tuple[dict]:
    import torch

    seconds = checks.number(seconds, "seconds", 0.0)
    batch_size = checks.integer(batch_size, "batch_size", 1)
    length = round((seconds * STABLE_AUDIO_RATE / STABLE_AUDIO_FRAME) / 2) * 2
    return ({"samples": torch.zeros([batch_size, STABLE_AUDIO_CHANNELS, length]), "type": "audio"},)


@v3_node("VAEEncodeAudio", display_name="VAE Encode Audio", category="latent/audio", python_module=MODULE,
         search_aliases=["audio to latent"],
         inputs=[Socket("audio", "AUDIO"), Socket("vae", "VAE")], outputs=[Output("LATENT")])
def vae_encode_audio(audio: dict, vae: Any) -> tuple[dict]:
    from nodes.ltx_audio_nodes import encode_audio

    return (encode_audio(_audio_vae(vae), audio),)


def decode_audio(vae: Any, samples: Any, tile: int | None = None, overlap: int | None = None) -> dict:
    """ComfyUI's `vae_decode_audio`: decode, channels first, loudness guard, the rate."""
    import torch

    from comfy_core.models.ltx_audio_vae import AudioVAEInputError

    vae = _audio_vae(vae)
    latent = samples.get("samples") if isinstance(samples, dict) else None
    if getattr(latent, "is_nested", False):  # a nested [video, audio] latent (MiniMax H3's): its audio part
        latent = latent.unbind()[-1]
    if not isinstance(latent, torch.Tensor) or latent.ndim not in (3, 4):
        raise NodeInputError("samples", "an audio LATENT ({'samples': [B, C, T] or [B, C, T, F]})", describe(samples))
    try:
        if tile is None:
            audio = vae.decode(latent).movedim(-1, 1)
        else:
            audio = vae.decode_tiled(latent, tile_y=tile, overlap=overlap).movedim(-1, 1)
    except AudioVAEInputError as exc:
        raise NodeInputError("samples", "a latent the audio VAE decodes", str(exc)) from None
    std = torch.std(audio, dim=[1, 2], keepdim=True) * 5.0
    audio = audio / std.clamp_min(1.0)
    rate = samples["sample_rate"] if "sample_rate" in samples else getattr(vae, "audio_sample_rate", STABLE_AUDIO_RATE)
    return {"waveform": audio, "sample_rate": rate}


@v3_node("VAEDecodeAudio", display_name="VAE Decode Audio", category="latent/audio", python_module=MODULE,
         search_aliases=["latent to audio"],
         inputs=[Socket("samples", "LATENT"), Socket("vae", "VAE")], outputs=[Output("AUDIO")])
def vae_decode_audio(samples: dict, vae: Any) -> tuple[dict]:
    return (decode_audio(vae, samples),)


@v3_node("VAEDecodeAudioTiled", display_name="VAE Decode Audio (Tiled)", category="latent/audio",
         python_module=MODULE, search_aliases=["latent to audio"],
         inputs=[Socket("samples", "LATENT"), Socket("vae", "VAE"),
                 Int("tile_size", default=512, min=32, max=8192, step=8),
                 Int("overlap", default=64, min=0, max=1024, step=8)],
         outputs=[Output("AUDIO")])
def vae_decode_audio_tiled(samples: dict, vae: Any, tile_size: int, overlap: int) -> tuple[dict]:
    tile_size = checks.integer(tile_size, "tile_size", 2)
    overlap = checks.integer(overlap, "overlap", 0)
    if overlap >= tile_size:
        raise NodeInputError("overlap", f"an overlap smaller than tile_size ({tile_size})", str(overlap))
    return (decode_audio(vae, samples, tile_size, overlap),)


@v3_node("RecordAudio", display_name="Record Audio", category="audio", python_module=MODULE,
         search_aliases=["microphone input", "audio capture", "voice input"],
         inputs=[InputSpec("audio", "AUDIO_RECORD", REQUIRED, {})], outputs=[Output("AUDIO")])
def record_audio(audio: str) -> tuple[dict]:
    """The uploaded recording (a file of the input folder), `[1, C, S]` float32 at its rate."""
    from comfy_core.video.audio_files import read_audio

    path = annotated_path(current_env(), audio, input_name="audio")
    with media_errors("audio"):
        waveform, sample_rate = read_audio(path)
    return ({"waveform": waveform.unsqueeze(0), "sample_rate": sample_rate},)

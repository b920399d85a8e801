"""LTX-2's audio VAE nodes (ComfyUI's `comfy_extras/nodes_lt_audio.py`, V3 schemas as today's
ComfyUI declares them); written here:

- LTXVAudioVAELoader: a file of the `vae` or `checkpoints` folders (a whole LTX-2 checkpoint or
  the audio VAE alone): its `audio_vae.*` and `vocoder.*` tensors and the `config` metadata ->
  VAE (`comfy_core.patching.audio_vae.AudioVaePatcher`).
- LTXVAudioVAEEncode: AUDIO -> LATENT `{"samples": [B, 8, T, 16]}` (VAEEncodeAudio's path: the
  waveform resampled to the VAE's 44.1 kHz input rate, then to the model's rate inside).
- LTXVAudioVAEDecode: LATENT (the audio part of an audio-video latent too) -> AUDIO at the
  vocoder's rate.
- LTXVEmptyLatentAudio: zeros `[B, 8, round(frames / fps * latents_per_second), 16]`, `type` "audio".
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Int, Output, Socket, v3_node
from graph.spec import InputSpec, REQUIRED
import nodes.checks as checks
from nodes.environment import Environment, current_env
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_lt_audio"
FOLDERS = ("vae", "checkpoints")


def _audio_vae_names(env: Any = None) -> list[str]:
    """The `vae` folders' files, then the checkpoints' not already listed (ComfyUI's order)."""
    folders = (env if isinstance(env, Environment) else current_env()).folders
    names: list[str] = []
    for kind in FOLDERS:
        names += [name for name in folders.filenames(kind) if name not in names]
    return names


def _audio_vae(value: Any, name: str = "audio_vae") -> Any:
    from comfy_core.patching.audio_vae import AudioVaePatcher

    if not isinstance(value, AudioVaePatcher):
        raise NodeInputError(name, "an LTX audio VAE (from LTXVAudioVAELoader)", describe(value))
    return value


def _vae_socket(tooltip: str) -> InputSpec:
    return Socket("audio_vae", "VAE", tooltip=tooltip, display_name="Audio VAE")


@v3_node("LTXVAudioVAELoader", display_name="Load LTXV Audio VAE", category="model/loaders", python_module=MODULE,
         inputs=[InputSpec("ckpt_name", _audio_vae_names, REQUIRED,  # a live file list, as a V3 combo
                           {"tooltip": "Audio VAE checkpoint to load.", "multiselect": False})],
         outputs=[Output("VAE", "Audio VAE")])
def ltxv_audio_vae_loader(ckpt_name: str) -> tuple[Any]:
    from comfy_core.models.ltx_audio_vae import AudioVAEConfigError, load_ltx_audio_vae
    from comfy_core.patching.audio_vae import AudioVaePatcher

    env = current_env()
    path = None
    if isinstance(ckpt_name, str):
        for kind in FOLDERS:
            path = env.folders.full_path(kind, ckpt_name)
            if path is not None:
                break
    if path is None:
        raise NodeInputError("ckpt_name", "a file in the vae or checkpoints folders", repr(ckpt_name))
    try:
        model = load_ltx_audio_vae(path)
    except AudioVAEConfigError as exc:
        raise NodeInputError("ckpt_name", "an LTX-2 audio VAE file (audio_vae.* and vocoder.* tensors with "
                             "their config metadata)", f"{path.name}: {exc}") from None
    vae = AudioVaePatcher(model, load_device=getattr(env.memory, "device", None), offload_device="cpu")
    if env.memory is not None:
        env.memory.track(vae)
    return (vae,)


def encode_audio(vae: Any, audio: Any, input_name: str = "audio") -> dict:
    """ComfyUI's VAEEncodeAudio: the waveform at the VAE's input rate, channels last, encoded."""
    from comfy_core.models.ltx_audio_vae import AudioVAEInputError, sinc_resample
    from comfy_core.video.audio_frames import check_audio
    from comfy_core.video.errors import MediaFileError, VideoEncodingError

    try:
        waveform, rate = check_audio(audio, input_name)
    except (MediaFileError, VideoEncodingError) as exc:
        raise NodeInputError(input_name, "AUDIO", str(exc)) from None
    target = int(getattr(vae, "audio_sample_rate", 44100))
    try:
        waveform = sinc_resample(waveform.float(), rate, target)
        return {"samples": vae.encode(waveform.movedim(1, -1))}
    except AudioVAEInputError as exc:
        raise NodeInputError(input_name, "audio the VAE encodes", str(exc)) from None


@v3_node("LTXVAudioVAEEncode", display_name="LTXV Audio VAE Encode", category="model/latent/ltxv",
         python_module=MODULE,
         inputs=[Socket("audio", "AUDIO", tooltip="The audio to be encoded."),
                 _vae_socket("The Audio VAE model to use for encoding.")],
         outputs=[Output("LATENT", "Audio Latent")])
def ltxv_audio_vae_encode(audio: dict, audio_vae: Any) -> tuple[dict]:
    return (encode_audio(_audio_vae(audio_vae), audio),)


def _audio_part(samples: Any) -> Any:
    """The audio latent: the tensor itself, or the last part of a nested audio-video latent
    (anything answering ComfyUI's NestedTensor API: `is_nested` true and `unbind()`)."""
    if getattr(samples, "is_nested", False) is True and callable(getattr(samples, "unbind", None)):
        return samples.unbind()[-1]
    return samples


@v3_node("LTXVAudioVAEDecode", display_name="LTXV Audio VAE Decode", category="model/latent/ltxv",
         python_module=MODULE,
         inputs=[Socket("samples", "LATENT", tooltip="The latent to be decoded."),
                 _vae_socket("The Audio VAE model used for decoding the latent.")],
         outputs=[Output("AUDIO", "Audio")])
def ltxv_audio_vae_decode(samples: dict, audio_vae: Any) -> tuple[dict]:
    import torch

    from comfy_core.models.ltx_audio_vae import AudioVAEInputError

    vae = _audio_vae(audio_vae)
    latent = _audio_part(samples.get("samples") if isinstance(samples, dict) else None)
    if not isinstance(latent, torch.Tensor):
        raise NodeInputError("samples", "a LATENT with an audio latent [B, C, T, F]", describe(samples))
    try:
        waveform = vae.decode(latent).movedim(-1, 1).to(latent.device)
    except AudioVAEInputError as exc:
        raise NodeInputError("samples", "an LTX audio latent", str(exc)) from None
    return ({"waveform": waveform, "sample_rate": int(vae.first_stage_model.output_sample_rate)},)


# V3's MultiType.Input(Float, [Int]): one widget, either type may be linked in.
_FRAME_RATE = InputSpec("frame_rate", "FLOAT,INT", REQUIRED,
                        {"tooltip": "Number of frames per second.", "default": 25.0, "min": 1.0, "max": 1000.0,
                         "step": 0.01, "display": "number"})


@v3_node("LTXVEmptyLatentAudio", display_name="Empty LTXV Latent Audio", category="model/latent/ltxv",
         python_module=MODULE,
         inputs=[Int("frames_number", default=97, min=1, max=1000, step=1, display="number",
                     tooltip="Number of frames."),
                 _FRAME_RATE,
                 Int("batch_size", default=1, min=1, max=4096, display="number",
                     tooltip="The number of latent audio samples in the batch."),
                 _vae_socket("The Audio VAE model to get configuration from.")],
         outputs=[Output("LATENT", "Latent")])
def ltxv_empty_latent_audio(frames_number: int, frame_rate: float, batch_size: int, audio_vae: Any) -> tuple[dict]:
    import torch

    checks.integer(frames_number, "frames_number", 1)
    checks.integer(batch_size, "batch_size", 1)
    if isinstance(frame_rate, bool) or not isinstance(frame_rate, (int, float)) or frame_rate <= 0:
        raise NodeInputError("frame_rate", "a positive number of frames per second", describe(frame_rate))
    vae = _audio_vae(audio_vae)
    model = vae.first_stage_model
    frames = model.num_of_latents_from_frames(frames_number, frame_rate)
    samples = torch.zeros((batch_size, vae.latent_channels, frames, model.latent_frequency_bins))
    return ({"samples": samples, "type": "audio"},)

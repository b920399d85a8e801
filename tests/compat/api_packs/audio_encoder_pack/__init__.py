"""Fixture pack: ComfyUI's audio-encoder API used the way node packs use it.

The imports are those of packs and scripts that run Wan's audio models or transcribe music:
`import comfy.audio_encoders.audio_encoders` and its `load_audio_encoder_from_sd` on a state dict
from `comfy.utils.load_torch_file` (a file found with `folder_paths`), `encode_audio` after
`comfy.model_management.load_model_gpu(encoder.patcher)`, an `AudioEncoderModel(config)` filled
by `load_sd`, and the built-in nodes' classes from `comfy_extras.nodes_audio_encoder` called
through `execute`. The code here is written for these tests.
"""
from __future__ import annotations

import comfy.audio_encoders.audio_encoders
import comfy.model_management
import comfy.utils
import comfy_extras.nodes_audio_encoder as audio_nodes
import folder_paths
from comfy.audio_encoders.audio_encoders import AudioEncoderModel, load_audio_encoder_from_sd
from comfy_extras.nodes_audio_encoder import AudioEncoderEncode, AudioEncoderLoader

NODE_CLASS_MAPPINGS: dict = {}


def load_by_name(name: str):  # noqa: ANN201
    """A pack's own loader: the file of the `audio_encoders` folder, read into a state dict."""
    path = folder_paths.get_full_path_or_raise("audio_encoders", name)
    sd = comfy.utils.load_torch_file(path, safe_load=True)
    encoder = comfy.audio_encoders.audio_encoders.load_audio_encoder_from_sd(sd)
    if encoder is None:
        raise RuntimeError("not an audio encoder")
    return encoder


def encode(encoder, audio: dict) -> dict:  # noqa: ANN001
    comfy.model_management.load_model_gpu(encoder.patcher)
    return encoder.encode_audio(audio["waveform"], audio["sample_rate"])


def build(config: dict, sd: dict) -> tuple:
    """An encoder built from ComfyUI's config dict, then filled from a state dict."""
    encoder = AudioEncoderModel(config)
    missing, unexpected = encoder.load_sd(sd)
    return encoder, missing, unexpected


def from_sd(sd: dict):  # noqa: ANN201
    return load_audio_encoder_from_sd(sd)


def through_nodes(name: str, audio: dict) -> tuple:
    """The built-in nodes' classes, as a pack chains them."""
    (encoder,) = AudioEncoderLoader.execute(name)
    (output,) = AudioEncoderEncode.execute(encoder, audio)
    return encoder, output


def node_names() -> list[str]:
    return sorted(audio_nodes.NODE_CLASS_MAPPINGS)

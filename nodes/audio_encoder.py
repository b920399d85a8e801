"""Audio encoders: ComfyUI's `AudioEncoderLoader` and `AudioEncoderEncode`
(`comfy_extras/nodes_audio_encoder.py`), V3 schemas as today's ComfyUI declares them; the work in
comfy_core/audio_encoders/.

- AudioEncoderLoader: a file of the `audio_encoders` folder (wav2vec2 large or base, Whisper
  large-v3's encoder) -> AUDIO_ENCODER, stored in the text-encoder dtype (as ComfyUI), computed
  in float32.
- AudioEncoderEncode: AUDIO -> AUDIO_ENCODER_OUTPUT, the dict Wan's audio nodes read
  (`encoded_audio`, `encoded_audio_all_layers`, `audio_samples`), the waveform resampled to 16 kHz.
"""
from __future__ import annotations

from typing import Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Output, Socket, v3_node
from nodes.environment import Environment, current_env, model_file
from nodes.errors import NodeInputError, describe

KIND = "audio_encoders"
MODULE = "comfy_extras.nodes_audio_encoder"


def _encoder_files(env: Any = None) -> list[str]:
    """The combo's live options: the files of the audio_encoders folders."""
    environment = env if isinstance(env, Environment) else current_env()
    return environment.folders.filenames(KIND)


@v3_node("AudioEncoderLoader", display_name="Load Audio Encoder", category="model/loaders", python_module=MODULE,
         inputs=[InputSpec("audio_encoder_name", _encoder_files, REQUIRED, {"multiselect": False})],
         outputs=[Output("AUDIO_ENCODER")])
def audio_encoder_loader(audio_encoder_name: str) -> tuple[Any]:
    from comfy_core.audio_encoders.model import AudioEncoderError, load_audio_encoder
    from nodes.clip_vision import _text_dtype

    env = current_env()
    path = model_file(KIND, audio_encoder_name, "audio_encoder_name")
    try:
        encoder = load_audio_encoder(path, dtype=_text_dtype(),
                                     load_device=getattr(env.memory, "device", None), offload_device="cpu")
    except AudioEncoderError as exc:
        raise NodeInputError("audio_encoder_name", "an audio encoder (wav2vec2 or Whisper)", str(exc)) from None
    if env.memory is not None:
        env.memory.track(encoder.patcher)
    return (encoder,)


@v3_node("AudioEncoderEncode", category="model/conditioning", python_module=MODULE,
         inputs=[Socket("audio_encoder", "AUDIO_ENCODER"), Socket("audio", "AUDIO")],
         outputs=[Output("AUDIO_ENCODER_OUTPUT")])
def audio_encoder_encode(audio_encoder: Any, audio: Any) -> tuple[dict]:
    from comfy_core.audio_encoders.model import AudioEncoderError
    from comfy_core.video.audio_frames import check_audio
    from comfy_core.video.errors import MediaFileError, VideoEncodingError

    if not callable(getattr(audio_encoder, "encode_audio", None)):
        raise NodeInputError("audio_encoder", "an AUDIO_ENCODER (from AudioEncoderLoader)", describe(audio_encoder))
    try:
        waveform, rate = check_audio(audio, "audio")
    except (MediaFileError, VideoEncodingError) as exc:
        raise NodeInputError("audio", "AUDIO", str(exc)) from None
    try:
        return (audio_encoder.encode_audio(waveform, rate),)
    except AudioEncoderError as exc:
        raise NodeInputError("audio", "audio the encoder takes", str(exc)) from None

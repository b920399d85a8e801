"""ComfyUI's `comfy.audio_encoders` package for node packs: the audio encoders of Wan's audio
models (wav2vec2, Whisper large-v3) through `audio_encoders` (compat/audio_encoders_api.py over
comfy_core/audio_encoders/)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up

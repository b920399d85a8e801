"""ComfyUI's `comfy.audio_encoders.audio_encoders` for node packs: `AudioEncoderModel` (our
AUDIO_ENCODER, with ComfyUI's constructor from a config dict and `load_sd`) and
`load_audio_encoder_from_sd` (compat/audio_encoders_api.py)."""
from compat.facade import facade

_A = "compat.audio_encoders_api:"
facade(__name__, {name: _A + name for name in ("AudioEncoderModel", "load_audio_encoder_from_sd")})

"""ComfyUI's `comfy.audio_encoders.audio_encoders` for node packs (its comfy/audio_encoders/
audio_encoders.py signatures), over comfy_core/audio_encoders/:

- `AudioEncoderModel(config)`: ComfyUI's constructor from a config dict (`model_type` "wav2vec2"
  with its `embed_dim`, `num_heads`, `num_layers`, `conv_norm`, `conv_bias`, `do_normalize`,
  `do_stable_layer_norm`; or "whisper3" with WhisperLargeV3's `n_mels`, `n_audio_ctx`,
  `n_audio_state`, `n_audio_head`, `n_audio_layer`), the network empty until `load_sd(sd)`. It
  is our AUDIO_ENCODER class (`encode_audio`, `get_sd`, `patcher`, `model`, `load_device`,
  `dtype`, `model_sample_rate`), so what a pack builds works in our nodes and theirs.
- `load_audio_encoder_from_sd(sd, prefix="")`: the encoder a state dict holds, loaded as the
  AudioEncoderLoader node loads a file (kind by names, geometry by shapes, the text-encoder
  storage dtype, tracked by the memory manager). ComfyUI reads only its two published wav2vec2
  widths and Whisper large-v3; shapes decide here. A state dict that is none of these raises
  `UnsupportedAudioEncoderError`, a `RuntimeError` as ComfyUI's (and a ValueError as ours).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from comfy_core.audio_encoders.model import AudioEncoderError
from comfy_core.audio_encoders.model import AudioEncoderModel as _CoreAudioEncoderModel

if TYPE_CHECKING:
    import torch


class UnsupportedAudioEncoderError(AudioEncoderError, RuntimeError):
    """Not an audio encoder this engine builds (ComfyUI raises RuntimeError there)."""


def _devices_and_dtype() -> tuple[Any, Any, Any]:
    """(load device, text-encoder storage dtype, memory manager) of the running environment."""
    from nodes.clip_vision import _text_dtype
    from nodes.environment import current_env

    env = current_env()
    return getattr(env.memory, "device", None), _text_dtype(), env.memory


def _network(config: Mapping[str, Any]) -> tuple[str, Any, Any]:
    """ComfyUI's config dict -> (kind, our network, our config)."""
    from comfy_core.audio_encoders.wav2vec2 import Wav2Vec2Config, Wav2Vec2Model
    from comfy_core.audio_encoders.whisper import WhisperAudioEncoder, WhisperConfig

    options = dict(config)
    kind = options.pop("model_type", None)
    for ignored in ("dtype", "device", "operations", "final_dim"):  # ComfyUI's build options; no quantiser here
        options.pop(ignored, None)
    try:
        if kind == "wav2vec2":
            width = options.pop("embed_dim", 1024)
            network_config = Wav2Vec2Config(
                embed_dim=width, num_heads=options.pop("num_heads", 16), num_layers=options.pop("num_layers", 24),
                conv_layer_norm=options.pop("conv_norm", True), conv_bias=options.pop("conv_bias", True),
                normalize=options.pop("do_normalize", True),
                stable_layer_norm=options.pop("do_stable_layer_norm", True), ff_dim=4 * width)
            network = Wav2Vec2Model(network_config)
        elif kind == "whisper3":
            width = options.pop("n_audio_state", 1280)
            network_config = WhisperConfig(n_mels=options.pop("n_mels", 128), n_ctx=options.pop("n_audio_ctx", 1500),
                                           width=width, heads=options.pop("n_audio_head", 20),
                                           layers=options.pop("n_audio_layer", 32), ff_dim=4 * width)
            network = WhisperAudioEncoder(network_config)
        else:
            raise UnsupportedAudioEncoderError(f"model_type must be 'wav2vec2' or 'whisper3', got {kind!r}")
    except TypeError as exc:
        raise UnsupportedAudioEncoderError(f"{kind} config: {exc}") from None
    if options:
        raise UnsupportedAudioEncoderError(f"{kind} config: unknown options {sorted(options)}")
    return kind, network, network_config


class AudioEncoderModel(_CoreAudioEncoderModel):
    """ComfyUI's `AudioEncoderModel`: built from its config dict, filled by `load_sd`."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        kind, network, network_config = _network(config)
        device, dtype, memory = _devices_and_dtype()
        super().__init__(kind, network.to(dtype), network_config, load_device=device, offload_device="cpu")
        if memory is not None:
            memory.track(self.patcher)

    @classmethod
    def adopt(cls, encoder: _CoreAudioEncoderModel) -> "AudioEncoderModel":
        """Our loader's encoder as this class (the same patcher and network, no copy)."""
        adopted = cls.__new__(cls)
        adopted.__dict__.update(vars(encoder))
        return adopted

    def encode_audio(self, audio: "torch.Tensor", sample_rate: int) -> dict[str, Any]:
        """ComfyUI's spelling (`audio`, not `waveform`): `[B, C, S]` at `sample_rate` ->
        AUDIO_ENCODER_OUTPUT."""
        return super().encode_audio(audio, sample_rate)

    def load_sd(self, sd: Mapping[str, "torch.Tensor"]) -> Any:
        """The weights of `sd` (ComfyUI's names: `wav2vec2.` and Whisper's `model.` prefixes
        dropped, older weight-norm names read) into the network, not strictly: returns torch's
        `(missing_keys, unexpected_keys)`, as ComfyUI's."""
        from comfy_core.audio_encoders.model import _old_weight_norm, _strip

        tensors = _strip(sd, "wav2vec2.")
        if self.kind == "whisper3":
            tensors = {k: v for k, v in _strip(tensors, "model.").items() if not k.startswith("decoder.")}
        else:
            tensors = _old_weight_norm(dict(tensors))
        return self.model.load_state_dict(tensors, strict=False)


def load_audio_encoder_from_sd(sd: Mapping[str, "torch.Tensor"], prefix: str = "") -> AudioEncoderModel:
    """The audio encoder in `sd` (keys under `prefix`, when one is given); see the module docstring."""
    from comfy_core.audio_encoders.model import audio_encoder_from_state_dict

    if prefix:
        sd = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
    device, dtype, memory = _devices_and_dtype()
    try:
        encoder = audio_encoder_from_state_dict(sd, "state dict", dtype, load_device=device, offload_device="cpu")
    except AudioEncoderError as exc:
        raise UnsupportedAudioEncoderError(str(exc)) from None
    if memory is not None:
        memory.track(encoder.patcher)
    return AudioEncoderModel.adopt(encoder)

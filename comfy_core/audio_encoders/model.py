"""The AUDIO_ENCODER wire object and its loader: a file of the `audio_encoders` folder, its kind
told by tensor names and its geometry by shapes (header only), after ComfyUI's
`comfy/audio_encoders/audio_encoders.py: load_audio_encoder_from_sd` (read, not copied).

| kind | marker (after the prefixes below are removed) | network |
|---|---|---|
| `wav2vec2` | `encoder.layer_norm.bias` | `wav2vec2.Wav2Vec2Model` (large or base, told by the feature convolutions' norms) |
| `whisper3` | `encoder.embed_positions.weight` (a file spells it `model.encoder.…`) | `whisper.WhisperAudioEncoder` |

Prefixes dropped: `wav2vec2.` (transformers' CTC / pre-training heads' files); `model.` for
Whisper, whose `decoder.*` tensors are ignored. Tensors the network does not use (a CTC head,
the quantiser, `masked_spec_embed` absent) are tolerated and logged; a tensor the network needs
that is missing or of the wrong shape is an `AudioEncoderError`.

wav2vec2 variant: ComfyUI picks by width (1024: large, 768: base); here the same two settings are
told by what the shapes show (LayerNorms on the feature convolutions: large's; a GroupNorm on the
first only: base's), which agrees with ComfyUI on both published files and also reads small
ones; heads are 16 at width 1024, 12 at 768, else width / 64.

`encode_audio(waveform [B, C, S], sample_rate)` resamples to 16 kHz with torchaudio's windowed-sinc
resampler (`models.ltx_audio_vae.sinc_resample`) and returns ComfyUI's AUDIO_ENCODER_OUTPUT dict:
`encoded_audio` (the last hidden state `[B, T, D]`), `encoded_audio_all_layers` (the tuple of
hidden states) and `audio_samples` (the resampled length).
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.audio_encoders.wav2vec2 import Wav2Vec2Config, Wav2Vec2Model
from comfy_core.audio_encoders.whisper import WhisperAudioEncoder, WhisperConfig
from comfy_core.models.ltx_audio_vae import sinc_resample
from comfy_core.patching.patcher import Patcher

log = logging.getLogger(__name__)

MODEL_SAMPLE_RATE = 16000
WAV2VEC2_MARKER = "encoder.layer_norm.bias"
WHISPER_MARKER = "model.encoder.embed_positions.weight"
_OPTIONAL = {"masked_spec_embed"}


class AudioEncoderError(ValueError):
    """A file that is not an audio encoder this engine builds, or whose tensors do not fit it; or
    audio it cannot encode."""


def _layer_count(names: Mapping[str, Any], stem: str) -> int:
    pattern = re.compile(re.escape(stem) + r"(\d+)\.")
    found = {int(m.group(1)) for name in names if (m := pattern.match(name))}
    if found != set(range(len(found))):
        raise AudioEncoderError(f"layers {sorted(found)} under {stem!r} are not numbered 0..n-1")
    return len(found)


def _shape(tensors: Mapping[str, Any], key: str) -> tuple[int, ...]:
    if key not in tensors:
        raise AudioEncoderError(f"tensor {key!r} is missing")
    return tuple(tensors[key].shape)


def _heads(width: int, known: dict[int, int]) -> int:
    heads = known.get(width, max(1, width // 64))
    if width % heads:
        raise AudioEncoderError(f"width {width} does not split into {heads} heads")
    return heads


def wav2vec2_config(tensors: Mapping[str, Any]) -> Wav2Vec2Config:
    """The geometry of a wav2vec2 state dict (names already without `wav2vec2.`)."""
    width = _shape(tensors, "encoder.layer_norm.bias")[0]
    conv_dim = _shape(tensors, "feature_extractor.conv_layers.0.conv.weight")[0]
    layer_norm = "feature_extractor.conv_layers.1.layer_norm.weight" in tensors
    if not layer_norm and "feature_extractor.conv_layers.0.layer_norm.weight" not in tensors:
        raise AudioEncoderError("wav2vec2 without normalisation in its feature convolutions is not supported")
    kernel_key = ("encoder.pos_conv_embed.conv.parametrizations.weight.original1"
                  if "encoder.pos_conv_embed.conv.parametrizations.weight.original1" in tensors
                  else "encoder.pos_conv_embed.conv.weight_v")
    out_ch, per_group, kernel = _shape(tensors, kernel_key)
    return Wav2Vec2Config(
        embed_dim=width, num_heads=_heads(width, {1024: 16, 768: 12}),
        num_layers=_layer_count(tensors, "encoder.layers."), conv_dim=conv_dim,
        conv_layer_norm=layer_norm, conv_bias="feature_extractor.conv_layers.1.conv.bias" in tensors,
        normalize=layer_norm, stable_layer_norm=layer_norm, pos_kernel=kernel, pos_groups=out_ch // per_group,
        ff_dim=_shape(tensors, "encoder.layers.0.feed_forward.intermediate_dense.weight")[0])


def whisper_config(tensors: Mapping[str, Any]) -> WhisperConfig:
    """The geometry of a Whisper encoder state dict (names `encoder.*`)."""
    n_ctx, width = _shape(tensors, "encoder.embed_positions.weight")
    return WhisperConfig(n_mels=_shape(tensors, "encoder.conv1.weight")[1], n_ctx=n_ctx, width=width,
                         heads=_heads(width, {1280: 20}), layers=_layer_count(tensors, "encoder.layers."),
                         ff_dim=_shape(tensors, "encoder.layers.0.fc1.weight")[0])


def _strip(tensors: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in tensors.items()}


def _old_weight_norm(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' older files store the positional kernel as `weight_g` / `weight_v`."""
    stem = "encoder.pos_conv_embed.conv."
    if stem + "weight_g" in tensors:
        tensors[stem + "parametrizations.weight.original0"] = tensors.pop(stem + "weight_g")
        tensors[stem + "parametrizations.weight.original1"] = tensors.pop(stem + "weight_v")
    return tensors


class AudioEncoderModel:
    """AUDIO_ENCODER: an audio encoder network behind a patcher (ComfyUI's `AudioEncoderModel`
    surface: `model`, `patcher`, `load_device`, `dtype`, `model_sample_rate`, `encode_audio`,
    `get_sd`)."""

    def __init__(self, kind: str, model: nn.Module, config: Any, *, load_device: torch.device | str | None = None,
                 offload_device: torch.device | str | None = None) -> None:
        self.kind = kind
        self.config = config
        self.model_sample_rate = MODEL_SAMPLE_RATE
        self.patcher = Patcher(model.eval(), load_device=load_device, offload_device=offload_device)

    @property
    def model(self) -> nn.Module:
        return self.patcher.model

    @property
    def load_device(self) -> torch.device:
        return self.patcher.load_device

    @property
    def dtype(self) -> torch.dtype:
        return next(iter(self.model.parameters())).dtype

    def get_sd(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict()

    def encode_audio(self, waveform: torch.Tensor, sample_rate: int) -> dict[str, Any]:
        """`waveform` `[B, C, S]` at `sample_rate` -> ComfyUI's AUDIO_ENCODER_OUTPUT dict."""
        if not isinstance(waveform, torch.Tensor) or waveform.ndim != 3 or not waveform.is_floating_point():
            raise AudioEncoderError(f"audio must be a float waveform [batch, channels, samples], got "
                                    f"{getattr(waveform, 'shape', type(waveform).__name__)}")
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
            raise AudioEncoderError(f"sample_rate must be a positive integer, got {sample_rate!r}")
        audio = sinc_resample(waveform.float(), sample_rate, self.model_sample_rate)
        with torch.no_grad(), self.patcher.applied() as module:
            device = next(iter(module.parameters())).device
            out, states = module(audio.to(device))
        offload = self.patcher.offload_device
        return {"encoded_audio": out.to(offload), "encoded_audio_all_layers": tuple(s.to(offload) for s in states),
                "audio_samples": int(audio.shape[2])}

    def __repr__(self) -> str:
        return f"AudioEncoderModel({self.kind}: {self.config}, {self.dtype})"


def _build(module: nn.Module, tensors: dict[str, torch.Tensor], name: str, dtype: torch.dtype) -> nn.Module:
    expected = module.state_dict()
    missing = sorted(k for k in expected if k not in tensors and k not in _OPTIONAL)
    if missing:
        raise AudioEncoderError(f"{name}: {len(missing)} tensors missing, e.g. {', '.join(missing[:5])}")
    wrong = [f"{k} {tuple(tensors[k].shape)} (expected {tuple(v.shape)})" for k, v in expected.items()
             if k in tensors and tuple(tensors[k].shape) != tuple(v.shape)]
    if wrong:
        raise AudioEncoderError(f"{name}: tensors of the wrong shape: {', '.join(wrong[:5])}")
    unused = sorted(set(tensors) - set(expected))
    if unused:
        log.warning("audio encoder %s: %d unused tensors, e.g. %s", name, len(unused), ", ".join(unused[:3]))
    module.load_state_dict({k: tensors[k] for k in expected if k in tensors}, strict=False)
    return module.to(dtype)


def audio_encoder_from_state_dict(tensors: Mapping[str, torch.Tensor], name: str = "state dict",
                                  dtype: torch.dtype = torch.float32, **devices: Any) -> AudioEncoderModel:
    """The audio encoder the tensors hold (see the module docstring), in `dtype`, eval mode."""
    tensors = _strip(tensors, "wav2vec2.")
    try:
        if WAV2VEC2_MARKER in tensors:
            tensors = _old_weight_norm(tensors)
            config = wav2vec2_config(tensors)
            kind, module = "wav2vec2", Wav2Vec2Model(config)
        elif WHISPER_MARKER in tensors or "encoder.embed_positions.weight" in tensors:
            tensors = {k: v for k, v in _strip(tensors, "model.").items() if not k.startswith("decoder.")}
            config = whisper_config(tensors)
            kind, module = "whisper3", WhisperAudioEncoder(config)
        else:
            raise AudioEncoderError(f"not an audio encoder: expected wav2vec2 ({WAV2VEC2_MARKER}) or Whisper "
                                    f"({WHISPER_MARKER}) tensors")
    except AudioEncoderError as exc:
        raise AudioEncoderError(f"{name}: {exc}") from None
    return AudioEncoderModel(kind, _build(module, tensors, name, dtype), config, **devices)


def load_audio_encoder(path: str | Path, dtype: torch.dtype = torch.float32, **devices: Any) -> AudioEncoderModel:
    """The audio encoder in the weight file `path`."""
    from comfy_core.checkpoint.errors import CheckpointError
    from comfy_core.checkpoint.reader import load_tensor_file

    path = Path(path)
    try:
        tensors, _metadata = load_tensor_file(path)
    except CheckpointError as exc:
        raise AudioEncoderError(f"{path.name}: not a readable weight file ({exc})") from None
    return audio_encoder_from_state_dict(tensors, path.name, dtype, **devices)

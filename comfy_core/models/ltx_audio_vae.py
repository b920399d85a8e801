"""LTX-2's audio VAE: stereo waveform <-> log-mel spectrogram <-> latent `[B, 8, T, 16]`, plus its vocoder.

Module and buffer names are ComfyUI's (`comfy/ldm/lightricks/vae/audio_vae.py`,
`causal_audio_autoencoder.py`): the checkpoint's `audio_vae.*` tensors live under `autoencoder.`
(`encoder.*`, `decoder.*`, `per_channel_statistics.{mean,std}-of-means`) and `vocoder.*` under
`vocoder.`; the architecture comes from the file's metadata (`config` JSON, `audio_vae` and
`vocoder` sections), never guessed from tensor data.

- Front end (as ComfyUI computes it, `comfy/audio.py`): band-limited sinc resampling to the
  model's rate (torchaudio's `sinc_interp_hann`: 6 zero crossings, rolloff 0.99), a centred
  Hann-window STFT magnitude (`n_fft`, `hop`, reflect padding), a Slaney-scale mel filterbank with
  area normalisation (0 Hz .. Nyquist), `log(clamp(mel, 1e-5))`, laid out `[B, C, frames, mels]`.
- Autoencoder: an LDM-style encoder / decoder (ResNet blocks, optional attention) whose 2-D
  convolutions are causal along time (`causality_axis` "height": all padding before the frame),
  with per-pixel RMS norm; the encoder's posterior mean is the latent (time / 4, mels / 4), and the
  decoder's output is cropped or zero-padded to `4 T - 3` frames (causal) x `mel_bins`.
- Latent statistics: per (channel, frequency) mean and std over the flattened `c * f` axis
  (ComfyUI's `AudioLatentNormalizer`): encode normalises, decode de-normalises.
- Vocoder: `comfy_core.models.ltx_vocoder` (HiFi-GAN, BigVGAN v2, LTX-2.3's bandwidth extension).

Numerics are tested against diffusers' `AutoencoderKLLTX2Audio` and `LTX2Vocoder(WithBWE)`
(tests/comfy_core/test_ltx_audio_vae.py); written here, not copied.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.ltx_vocoder import vocoder_from_config, vocoder_output_rate

LATENT_DOWNSAMPLE_FACTOR = 4
CAUSALITY_AXES = ("none", "width", "height", "width-compatibility")


class AudioVAEConfigError(ValueError):
    """The file's metadata does not describe an LTX audio VAE (no config, a missing section, an
    unknown option)."""


class AudioVAEInputError(ValueError):
    """A waveform or latent the audio VAE cannot take (channel count, rank, latent width)."""


# --- the front end (comfy/audio.py's resample and MelSpectrogram) ---

def sinc_resample(waveform: torch.Tensor, rate: int, target: int, zero_crossings: int = 6,
                  rolloff: float = 0.99) -> torch.Tensor:
    """Band-limited resampling along the last axis by a Hann-windowed sinc kernel (Smith's
    bandlimited interpolation as torchaudio's `sinc_interp_hann` does it): the rates reduced by
    their gcd, the cutoff `rolloff * min(rate, target)`, output length `ceil(S * target / rate)`."""
    if rate <= 0 or target <= 0 or int(rate) != rate or int(target) != target:
        raise AudioVAEInputError(f"resample: sample rates must be positive integers, got {rate} -> {target}")
    if rate == target:
        return waveform
    if not waveform.is_floating_point():
        raise AudioVAEInputError(f"resample: the waveform must be floating point, got {waveform.dtype}")
    divisor = math.gcd(int(rate), int(target))
    orig, new = int(rate) // divisor, int(target) // divisor
    cutoff = min(orig, new) * rolloff
    width = math.ceil(zero_crossings * orig / cutoff)
    kw = {"dtype": waveform.dtype, "device": waveform.device}
    offsets = torch.arange(-width, width + orig, **kw)[None, None] / orig       # [1, 1, taps]
    phases = -torch.arange(0, new, **kw)[:, None, None] / new                   # [new, 1, 1]
    t = ((phases + offsets) * cutoff).clamp(-zero_crossings, zero_crossings)
    window = torch.cos(t * math.pi / zero_crossings / 2) ** 2
    t = t * math.pi
    kernel = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t) * window * (cutoff / orig)  # [new, 1, taps]
    shape, length = waveform.shape, waveform.shape[-1]
    flat = F.pad(waveform.reshape(-1, 1, length), (width, width + orig))
    out = F.conv1d(flat, kernel, stride=orig)                                   # [N, new, frames]
    out = out.transpose(1, 2).reshape(flat.shape[0], -1)
    keep = (new * length + orig - 1) // orig
    return out[:, :keep].reshape(*shape[:-1], keep)


def _hz_to_mel(freq: float) -> float:
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above."""
    if freq >= 1000.0:
        return 15.0 + math.log(freq / 1000.0) / (math.log(6.4) / 27.0)
    return freq / (200.0 / 3)


def mel_filterbank(sample_rate: int, n_fft: int, mels: int, f_min: float = 0.0,
                   f_max: float | None = None) -> torch.Tensor:
    """Slaney triangular filters with area normalisation, `[n_fft // 2 + 1, mels]`."""
    f_max = sample_rate // 2 if f_max is None else f_max
    bins = torch.linspace(0, sample_rate // 2, n_fft // 2 + 1)
    points = torch.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), mels + 2)
    freqs = points * (200.0 / 3)
    high = points >= 15.0
    freqs[high] = 1000.0 * torch.exp((math.log(6.4) / 27.0) * (points[high] - 15.0))
    gaps = freqs[1:] - freqs[:-1]
    slopes = freqs[None, :] - bins[:, None]                                     # [bins, mels + 2]
    rising = -slopes[:, :-2] / gaps[:-1]
    falling = slopes[:, 2:] / gaps[1:]
    bank = torch.minimum(rising, falling).clamp_min(0)
    return bank * (2.0 / (freqs[2:] - freqs[:-2]))[None, :]


def log_mel(waveform: torch.Tensor, sample_rate: int, n_fft: int, hop: int, mels: int) -> torch.Tensor:
    """`[B, C, S]` -> `[B, C, S // hop + 1, mels]`: centred Hann STFT magnitude, Slaney mel, log."""
    batch_shape, length = waveform.shape[:-1], waveform.shape[-1]
    window = torch.hann_window(n_fft, device=waveform.device, dtype=waveform.dtype)
    spec = torch.stft(waveform.reshape(-1, length), n_fft, hop, n_fft, window, center=True, pad_mode="reflect",
                      normalized=False, onesided=True, return_complex=True).abs()   # [N, bins, frames]
    bank = mel_filterbank(sample_rate, n_fft, mels, 0.0, sample_rate / 2.0).to(spec)
    mel = (spec.transpose(-1, -2) @ bank)                                        # [N, frames, mels]
    mel = torch.log(torch.clamp(mel, min=1e-5))
    return mel.reshape(*batch_shape, *mel.shape[-2:])


# --- the autoencoder ---

class PixelNorm(nn.Module):
    """Per-location RMS norm over channels: `x / sqrt(mean(x^2) + eps)` (no parameters)."""

    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.sqrt(torch.mean(x * x, dim=1, keepdim=True) + self.eps)


def _norm(channels: int, kind: str) -> nn.Module:
    if kind == "group":
        return nn.GroupNorm(32, channels, eps=1e-6, affine=True)
    if kind == "pixel":
        return PixelNorm(1e-6)
    raise AudioVAEConfigError(f"audio VAE: unknown norm_type {kind!r} (expected 'group' or 'pixel')")


def _axis(value: Any) -> str:
    axis = "none" if value is None else str(value).lower()
    if axis not in CAUSALITY_AXES:
        raise AudioVAEConfigError(f"audio VAE: unknown causality_axis {value!r} (expected one of {CAUSALITY_AXES})")
    return axis


class CausalConv2d(nn.Module):
    """A 2-D convolution padded by hand: along the causal axis all padding goes before the first
    element (an output frame sees only frames up to its own), the other axis is padded evenly."""

    def __init__(self, cin: int, cout: int, kernel: int, axis: str) -> None:
        super().__init__()
        extra = kernel - 1
        even = (extra // 2, extra - extra // 2)
        if axis == "none":
            self.padding = (*even, *even)
        elif axis in ("width", "width-compatibility"):
            self.padding = (extra, 0, *even)
        else:  # height: time is the height axis of [B, C, time, mels]
            self.padding = (*even, extra, 0)
        self.conv = nn.Conv2d(cin, cout, kernel, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, self.padding))


class ResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, norm: str, axis: str) -> None:
        super().__init__()
        if axis != "none" and norm == "group":
            raise AudioVAEConfigError("audio VAE: a causal ResNet block with GroupNorm is not supported")
        self.norm1 = _norm(cin, norm)
        self.conv1 = CausalConv2d(cin, cout, 3, axis)
        self.norm2 = _norm(cout, norm)
        self.conv2 = CausalConv2d(cout, cout, 3, axis)
        self.nin_shortcut = CausalConv2d(cin, cout, 1, axis) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.nin_shortcut is None else self.nin_shortcut(x)) + h


class AttnBlock(nn.Module):
    """Single-head self-attention over all (time, mel) positions, 1x1 convolutions for q, k, v, out."""

    def __init__(self, channels: int, norm: str) -> None:
        super().__init__()
        self.norm = _norm(channels, norm)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(channels, channels, 1) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        b, c, height, width = h.shape
        q, k, v = (conv(h).reshape(b, c, height * width).transpose(1, 2) for conv in (self.q, self.k, self.v))
        weights = torch.softmax(q @ k.transpose(1, 2) * c ** -0.5, dim=-1)        # [B, hw, hw]
        out = (weights @ v).transpose(1, 2).reshape(b, c, height, width)
        return x + self.proj_out(out)


def _attention(channels: int, kind: str, norm: str) -> nn.Module:
    if kind == "vanilla":
        return AttnBlock(channels, norm)
    if kind == "none":
        return nn.Identity()
    raise AudioVAEConfigError(f"audio VAE: unsupported attn_type {kind!r} (expected 'vanilla' or 'none')")


class Downsample(nn.Module):
    """Stride-2 3x3 convolution after a pad that keeps the causal axis causal."""

    PADS = {"none": (0, 1, 0, 1), "width": (2, 0, 0, 1), "height": (0, 1, 2, 0), "width-compatibility": (1, 0, 0, 1)}

    def __init__(self, channels: int, axis: str) -> None:
        super().__init__()
        self.pad = self.PADS[axis]
        self.conv = nn.Conv2d(channels, channels, 3, stride=2, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, self.pad))


class Upsample(nn.Module):
    """Nearest x2, causal 3x3 convolution, then the first element of the causal axis dropped, so
    `n` frames become `2 n - 1` and decoding inverts the encoder's causal padding."""

    def __init__(self, channels: int, axis: str) -> None:
        super().__init__()
        self.axis = axis
        self.conv = CausalConv2d(channels, channels, 3, axis)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        if self.axis == "height":
            return x[:, :, 1:]
        if self.axis == "width":
            return x[:, :, :, 1:]
        return x


@dataclass(frozen=True)
class AutoencoderConfig:
    """One side's settings as the checkpoint's `ddconfig` / `encoder` / `decoder` dicts name them."""

    ch: int
    out_ch: int
    ch_mult: tuple[int, ...]
    num_res_blocks: int
    attn_resolutions: tuple[int, ...]
    in_channels: int
    resolution: int
    z_channels: int
    double_z: bool
    attn_type: str
    mid_block_add_attention: bool
    norm_type: str
    causality_axis: str
    mel_bins: int
    resamp_with_conv: bool

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "AutoencoderConfig":
        missing = [key for key in ("ch", "out_ch", "num_res_blocks", "in_channels", "resolution", "z_channels")
                   if key not in raw]
        if missing:
            raise AudioVAEConfigError(f"audio VAE: the autoencoder config lacks {missing}")
        if not raw.get("resamp_with_conv", True):
            raise AudioVAEConfigError("audio VAE: average-pool downsampling (resamp_with_conv false) is not supported")
        return cls(ch=int(raw["ch"]), out_ch=int(raw["out_ch"]), ch_mult=tuple(int(m) for m in raw.get("ch_mult", (1, 2, 4, 8))),
                   num_res_blocks=int(raw["num_res_blocks"]),
                   attn_resolutions=tuple(int(r) for r in raw.get("attn_resolutions") or ()),
                   in_channels=int(raw["in_channels"]), resolution=int(raw["resolution"]),
                   z_channels=int(raw["z_channels"]), double_z=bool(raw.get("double_z", True)),
                   attn_type=str(raw.get("attn_type", "vanilla")).lower(),
                   mid_block_add_attention=bool(raw.get("mid_block_add_attention", True)),
                   norm_type=str(raw.get("norm_type", "group")), causality_axis=_axis(raw.get("causality_axis", "width")),
                   mel_bins=int(raw.get("mel_bins", 64)), resamp_with_conv=True)


class Encoder(nn.Module):
    """Log-mel `[B, in_channels, frames, mels]` -> moments `[B, 2 z, frames', mels']`."""

    def __init__(self, config: AutoencoderConfig) -> None:
        super().__init__()
        c, axis, norm = config, config.causality_axis, config.norm_type
        self.in_channels = c.in_channels
        self.conv_in = CausalConv2d(c.in_channels, c.ch, 3, axis)
        self.down = nn.ModuleList()
        channels, resolution = c.ch, c.resolution
        for level, mult in enumerate(c.ch_mult):
            stage = nn.Module()
            stage.block, stage.attn = nn.ModuleList(), nn.ModuleList()
            for _ in range(c.num_res_blocks):
                stage.block.append(ResnetBlock(channels, c.ch * mult, norm, axis))
                channels = c.ch * mult
                if resolution in c.attn_resolutions:
                    stage.attn.append(_attention(channels, c.attn_type, norm))
            if level != len(c.ch_mult) - 1:
                stage.downsample = Downsample(channels, axis)
                resolution //= 2
            self.down.append(stage)
        self.mid = _middle(channels, c)
        self.norm_out = _norm(channels, norm)
        self.conv_out = CausalConv2d(channels, 2 * c.z_channels if c.double_z else c.z_channels, 3, axis)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_in(x)
        for stage in self.down:
            for i, block in enumerate(stage.block):
                x = block(x)
                if len(stage.attn):
                    x = stage.attn[i](x)
            if hasattr(stage, "downsample"):
                x = stage.downsample(x)
        x = self.mid.block_2(self.mid.attn_1(self.mid.block_1(x)))
        return self.conv_out(F.silu(self.norm_out(x)))


def _middle(channels: int, c: AutoencoderConfig) -> nn.Module:
    mid = nn.Module()
    mid.block_1 = ResnetBlock(channels, channels, c.norm_type, c.causality_axis)
    mid.attn_1 = _attention(channels, c.attn_type, c.norm_type) if c.mid_block_add_attention else nn.Identity()
    mid.block_2 = ResnetBlock(channels, channels, c.norm_type, c.causality_axis)
    return mid


class Decoder(nn.Module):
    """Latent `[B, z, T, F]` -> log-mel `[B, out_ch, frames, mels]` cropped / padded to a target."""

    def __init__(self, config: AutoencoderConfig) -> None:
        super().__init__()
        c, axis, norm = config, config.causality_axis, config.norm_type
        self.out_ch, self.z_channels = c.out_ch, c.z_channels
        channels = c.ch * c.ch_mult[-1]
        resolution = c.resolution // 2 ** (len(c.ch_mult) - 1)
        self.conv_in = CausalConv2d(c.z_channels, channels, 3, axis)
        self.mid = _middle(channels, c)
        stages: list[nn.Module] = []
        for level in reversed(range(len(c.ch_mult))):
            stage = nn.Module()
            stage.block, stage.attn = nn.ModuleList(), nn.ModuleList()
            for _ in range(c.num_res_blocks + 1):
                stage.block.append(ResnetBlock(channels, c.ch * c.ch_mult[level], norm, axis))
                channels = c.ch * c.ch_mult[level]
                if resolution in c.attn_resolutions:
                    stage.attn.append(_attention(channels, c.attn_type, norm))
            if level != 0:
                stage.upsample = Upsample(channels, axis)
                resolution *= 2
            stages.insert(0, stage)
        self.up = nn.ModuleList(stages)
        self.norm_out = _norm(channels, norm)
        self.conv_out = CausalConv2d(channels, c.out_ch, 3, axis)

    def forward(self, z: torch.Tensor, frames: int, mels: int) -> torch.Tensor:
        x = self.conv_in(z)
        x = self.mid.block_2(self.mid.attn_1(self.mid.block_1(x)))
        for stage in reversed(self.up):
            for i, block in enumerate(stage.block):
                x = block(x)
                if len(stage.attn):
                    x = stage.attn[i](x)
            if hasattr(stage, "upsample"):
                x = stage.upsample(x)
        x = self.conv_out(F.silu(self.norm_out(x)))[:, :self.out_ch, :frames, :mels]
        # the decoded length can fall short of the target (e.g. non-causal); zero-fill as ComfyUI does
        return F.pad(x, (0, mels - x.shape[3], 0, frames - x.shape[2]))


class LatentStatistics(nn.Module):
    """ComfyUI's `per_channel_statistics`: mean and std per flattened (channel, frequency) slot."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.register_buffer("std-of-means", torch.ones(width))
        self.register_buffer("mean-of-means", torch.zeros(width))

    def _patched(self, latent: torch.Tensor) -> torch.Tensor:
        b, c, t, f = latent.shape
        width = self.get_buffer("std-of-means").numel()
        if c * f != width:
            raise AudioVAEInputError(f"audio VAE: a latent of {c} channels x {f} frequency bins does not match "
                                     f"the file's {width} latent statistics")
        return latent.permute(0, 2, 1, 3).reshape(b, t, c * f)                 # [B, T, c * f]

    def normalize(self, latent: torch.Tensor) -> torch.Tensor:
        b, c, t, f = latent.shape
        x = (self._patched(latent) - self.get_buffer("mean-of-means").to(latent)) / self.get_buffer("std-of-means").to(latent)
        return x.reshape(b, t, c, f).permute(0, 2, 1, 3)

    def un_normalize(self, latent: torch.Tensor) -> torch.Tensor:
        b, c, t, f = latent.shape
        x = self._patched(latent) * self.get_buffer("std-of-means").to(latent) + self.get_buffer("mean-of-means").to(latent)
        return x.reshape(b, t, c, f).permute(0, 2, 1, 3)


class CausalAudioAutoencoder(nn.Module):
    """ComfyUI's `autoencoder`: encoder, decoder, latent statistics and the mel settings."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        params = dict(config.get("model", {}).get("params", {}))
        variables = dict(config.get("variables", {}))
        self.sampling_rate = int(variables.get("sampling_rate", params.get("sampling_rate", config.get("sampling_rate", 16000))))
        encoder_raw = params.get("encoder", params.get("ddconfig"))
        if not encoder_raw:
            raise AudioVAEConfigError("audio VAE: the config has no model.params.ddconfig (or encoder) section")
        decoder_raw = params.get("decoder", encoder_raw)
        stft = params.get("preprocessing", {}).get("stft", {})
        self.mel_hop_length = int(stft.get("hop_length", 160))
        self.n_fft = int(stft.get("filter_length", 1024))
        self.encoder_config = AutoencoderConfig.from_dict(encoder_raw)
        self.decoder_config = AutoencoderConfig.from_dict(decoder_raw)
        self.mel_bins = self.encoder_config.mel_bins
        self.causality_axis = self.encoder_config.causality_axis
        self.is_causal = self.causality_axis == "height"
        self.encoder = Encoder(self.encoder_config)
        self.decoder = Decoder(self.decoder_config)
        # ComfyUI sizes the statistics for the published model (8 channels x 16 bins).
        self.per_channel_statistics = LatentStatistics(
            self.decoder_config.z_channels * (self.mel_bins // LATENT_DOWNSAMPLE_FACTOR))


def parse_metadata(metadata: Mapping[str, Any] | None) -> tuple[dict, dict]:
    """The `audio_vae` and `vocoder` sections of the safetensors metadata's `config` JSON."""
    if not metadata or "config" not in metadata:
        raise AudioVAEConfigError("audio VAE: the file has no 'config' metadata (LTX-2 checkpoints carry the "
                                  "audio VAE's and vocoder's configuration there)")
    raw = metadata["config"]
    try:
        config = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (ValueError, TypeError) as exc:
        raise AudioVAEConfigError(f"audio VAE: the 'config' metadata is not JSON: {exc}") from exc
    for section in ("audio_vae", "vocoder"):
        if not isinstance(config.get(section), Mapping):
            raise AudioVAEConfigError(f"audio VAE: the 'config' metadata has no {section!r} section")
    return dict(config["audio_vae"]), dict(config["vocoder"])


class LTXAudioVAE(nn.Module):
    """ComfyUI's `AudioVAE`: `encode(waveform, rate)` -> normalised latent, `decode(latent)` -> waveform."""

    def __init__(self, metadata: Mapping[str, Any]) -> None:
        super().__init__()
        audio_config, vocoder_config = parse_metadata(metadata)
        self.autoencoder = CausalAudioAutoencoder(audio_config)
        self.vocoder = vocoder_from_config(vocoder_config)

    # ComfyUI's AudioVAE properties
    @property
    def sample_rate(self) -> int:
        return self.autoencoder.sampling_rate

    @property
    def mel_hop_length(self) -> int:
        return self.autoencoder.mel_hop_length

    @property
    def mel_bins(self) -> int:
        return self.autoencoder.mel_bins

    @property
    def latent_channels(self) -> int:
        return self.autoencoder.decoder_config.z_channels

    @property
    def latent_frequency_bins(self) -> int:
        return self.mel_bins // LATENT_DOWNSAMPLE_FACTOR

    @property
    def latents_per_second(self) -> float:
        return self.sample_rate / self.mel_hop_length / LATENT_DOWNSAMPLE_FACTOR

    @property
    def output_sample_rate(self) -> int:
        return vocoder_output_rate(self.vocoder, self.sample_rate, self.mel_hop_length)

    def num_of_latents_from_frames(self, frames: int, frame_rate: float) -> int:
        """Latent frames covering `frames` video frames at `frame_rate` (rounded to nearest)."""
        return round(float(frames) / frame_rate * self.latents_per_second)

    def _weights(self, module: nn.Module) -> tuple[torch.device, torch.dtype]:
        for tensor in (*module.parameters(), *module.buffers()):
            if tensor.is_floating_point():
                return tensor.device, tensor.dtype
        return torch.device("cpu"), torch.float32

    def waveform_to_mel(self, waveform: torch.Tensor, rate: int) -> torch.Tensor:
        """`[B, C, S]` at `rate` -> log-mel `[B, C, frames, mel_bins]` at the model's rate."""
        waveform = sinc_resample(waveform, rate, self.sample_rate)
        return log_mel(waveform, self.sample_rate, self.autoencoder.n_fft, self.mel_hop_length, self.mel_bins)

    def encode(self, waveform: torch.Tensor, sample_rate: int = 44100) -> torch.Tensor:
        """`[B, C, S]` (mono is copied to every input channel) -> latent `[B, z, T, mels / 4]`."""
        expected = self.autoencoder.encoder.in_channels
        if waveform.ndim != 3:
            raise AudioVAEInputError(f"audio VAE encode: expected a waveform [B, C, S], got {tuple(waveform.shape)}")
        if waveform.shape[1] != expected:
            if waveform.shape[1] != 1:
                raise AudioVAEInputError(f"audio VAE encode: input audio must have {expected} channels "
                                         f"(or 1), got {waveform.shape[1]}")
            waveform = waveform.expand(-1, expected, -1)
        mel = self.waveform_to_mel(waveform.float(), sample_rate)
        device, dtype = self._weights(self.autoencoder)
        moments = self.autoencoder.encoder(mel.to(device=device, dtype=dtype))
        mean = moments[:, :self.latent_channels] if self.autoencoder.encoder_config.double_z else moments
        return self.autoencoder.per_channel_statistics.normalize(mean)

    def decoded_frames(self, latent_frames: int) -> int:
        """Mel frames the decoder returns for `latent_frames`: `4 T`, less 3 when causal."""
        frames = latent_frames * LATENT_DOWNSAMPLE_FACTOR
        return frames - (LATENT_DOWNSAMPLE_FACTOR - 1) if self.autoencoder.causality_axis != "none" else frames

    def decode_mel(self, latent: torch.Tensor) -> torch.Tensor:
        """Normalised latent `[B, z, T, F]` -> log-mel `[B, out_ch, decoded_frames(T), mel_bins]`."""
        if latent.ndim != 4 or latent.shape[1] != self.latent_channels:
            raise AudioVAEInputError(f"audio VAE decode: expected a latent [B, {self.latent_channels}, T, "
                                     f"{self.latent_frequency_bins}], got {tuple(latent.shape)}")
        device, dtype = self._weights(self.autoencoder)
        latent = self.autoencoder.per_channel_statistics.un_normalize(latent.to(device=device, dtype=dtype))
        return self.autoencoder.decoder(latent, self.decoded_frames(latent.shape[2]), self.mel_bins)

    def run_vocoder(self, mel: torch.Tensor) -> torch.Tensor:
        """Log-mel `[B, C, frames, mels]` -> waveform `[B, C', S]` at `output_sample_rate`."""
        channels = self.autoencoder.decoder.out_ch
        x = mel.transpose(2, 3)                                                   # [B, C, mels, frames]
        if channels == 1:
            x = x.squeeze(1)
        elif channels != 2:
            raise AudioVAEConfigError(f"audio VAE: unsupported decoder output channels {channels} (1 or 2)")
        device, dtype = self._weights(self.vocoder)
        return self.vocoder(x.to(device=device, dtype=dtype))

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """Normalised latent `[B, z, T, F]` -> waveform `[B, C, S]`."""
        return self.run_vocoder(self.decode_mel(latent))


def ltx_audio_vae_from_state_dict(sd: Mapping[str, torch.Tensor], metadata: Mapping[str, Any] | None,
                                  dtype: torch.dtype | None = None) -> LTXAudioVAE:
    """Build from a file's tensors (`audio_vae.*` and `vocoder.*`, or already `autoencoder.*`) and metadata.

    Missing weights are an error; the anti-alias and resampling filters (computed buffers that
    some files carry and some do not) are taken from the file when present."""
    model = LTXAudioVAE(metadata or {})
    state = {}
    for key, value in sd.items():
        if key.startswith("audio_vae."):
            state["autoencoder." + key[len("audio_vae."):]] = value
        elif key.startswith(("autoencoder.", "vocoder.")):
            state[key] = value
    expected = model.state_dict()
    missing = [k for k in expected if k not in state and not _computed_buffer(k)]
    if missing:
        raise AudioVAEConfigError(f"audio VAE: the file lacks {len(missing)} weights the config needs, "
                                  f"e.g. {missing[:5]}")
    wrong = [f"{k} {tuple(state[k].shape)} != {tuple(expected[k].shape)}" for k in expected
             if k in state and state[k].shape != expected[k].shape]
    if wrong:
        raise AudioVAEConfigError(f"audio VAE: weights of the wrong shape for the config: {wrong[:5]}")
    model.load_state_dict({k: v for k, v in state.items() if k in expected}, strict=False)
    if dtype is not None:
        model.to(dtype)
    return model.eval()


def _computed_buffer(key: str) -> bool:
    return key.endswith((".upsample.filter", ".lowpass.filter"))


def is_ltx_audio_vae(keys: Any) -> bool:
    """ComfyUI's detection: a vocoder's first residual convolution (plain, or inside the BWE vocoder)."""
    names = set(keys)
    return ("vocoder.resblocks.0.convs1.0.weight" in names
            or "vocoder.vocoder.resblocks.0.convs1.0.weight" in names)


def load_ltx_audio_vae(path: Any, dtype: torch.dtype | None = None) -> LTXAudioVAE:
    """An LTX audio VAE from a safetensors file (a whole LTX-2 checkpoint or the audio VAE alone):
    only its `audio_vae.*` / `vocoder.*` tensors are read, with the file's `config` metadata."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            metadata = handle.metadata() or {}
            keys = [k for k in handle.keys() if k.startswith(("audio_vae.", "autoencoder.", "vocoder."))]
            if not is_ltx_audio_vae(keys):
                raise AudioVAEConfigError("the file holds no LTX audio vocoder (vocoder.resblocks.0.convs1.0.weight "
                                          "or vocoder.vocoder.resblocks.0.convs1.0.weight)")
            sd = {k: handle.get_tensor(k) for k in keys}
    except (SafetensorError, OSError) as exc:
        raise AudioVAEConfigError(f"not a readable safetensors file: {exc}") from None
    return ltx_audio_vae_from_state_dict(sd, metadata, dtype)

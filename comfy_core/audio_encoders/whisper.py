"""Whisper's audio encoder (Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak
Supervision"), large-v3 geometry, as ComfyUI's audio encoder loader runs it for Wan's audio-driven
models (`comfy/audio_encoders/whisper.py`, read, not copied). Tensor names are transformers'
`WhisperEncoder`'s (a `whisper_large_v3_fp16` file holds them under `model.encoder.`; the decoder,
if present, is not used).

Front end (`log_mel`): the clip (channels averaged) cut or zero-padded to the encoder's window
(30 s: 480 000 samples at 16 kHz, in general `2 * hop * n_ctx`), a centred periodic-Hann STFT
(n_fft 400, hop 160, reflect padding) as power, Slaney mel filters (0..8 kHz, area-normalised),
the last frame dropped, `log10(max(mel, 1e-10))` floored at 8 below the maximum, `(x + 4) / 4`.
The maximum is over the whole batch, as ComfyUI takes it (transformers' extractor takes it per
clip; the two agree for one clip). Encoder: two GELU convolutions (the second of stride 2),
learned positions, pre-norm layers (the key projection without bias), a final LayerNorm.
Output: the last hidden state `[B, n_ctx, D]` and every hidden state (inputs of each layer, then
the final normed output: `layers + 1` entries).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import attention
from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.models.ltx_audio_vae import mel_filterbank

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
F_MAX = 8000.0


@dataclass(frozen=True)
class WhisperConfig:
    n_mels: int = 128
    n_ctx: int = 1500
    width: int = 1280
    heads: int = 20
    layers: int = 32
    ff_dim: int = 5120

    @property
    def window_samples(self) -> int:
        """Samples the encoder sees: two mel frames per position, one frame per hop."""
        return 2 * HOP * self.n_ctx


def log_mel(audio: torch.Tensor, n_mels: int, samples: int) -> torch.Tensor:
    """`[B, C, S]` -> `[B, n_mels, samples // HOP]`, Whisper's normalised log-mel spectrogram."""
    x = audio.float().mean(dim=1)
    if x.shape[1] > samples:
        x = x[:, :samples]
    elif x.shape[1] < samples:
        x = F.pad(x, (0, samples - x.shape[1]))
    window = torch.hann_window(N_FFT, periodic=True, device=x.device, dtype=x.dtype)
    spec = torch.stft(x, N_FFT, HOP, N_FFT, window, center=True, pad_mode="reflect", normalized=False,
                      onesided=True, return_complex=True).abs() ** 2                # [B, 201, frames]
    bank = mel_filterbank(SAMPLE_RATE, N_FFT, n_mels, 0.0, F_MAX).to(spec)           # [201, n_mels]
    mel = (bank.transpose(0, 1) @ spec)[:, :, :-1]                                  # [B, n_mels, frames - 1]
    mel = torch.clamp(mel, min=1e-10).log10()
    mel = torch.maximum(mel, mel.max() - 8.0)
    return (mel + 4.0) / 4.0


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(width, width)
        self.k_proj = nn.Linear(width, width, bias=False)
        self.v_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(attention(self.q_proj(x), self.k_proj(x), self.v_proj(x), self.heads))


class EncoderLayer(nn.Module):
    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config.width, config.heads)
        self.self_attn_layer_norm = nn.LayerNorm(config.width)
        self.fc1 = nn.Linear(config.width, config.ff_dim)
        self.fc2 = nn.Linear(config.ff_dim, config.width)
        self.final_layer_norm = nn.LayerNorm(config.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class WhisperEncoder(nn.Module):
    """`forward(mel [B, n_mels, 2 * n_ctx])` -> (`[B, n_ctx, width]`, all hidden states), in
    float32 whatever the weights are stored in (ComfyUI's manual cast), one part at a time."""

    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(config.n_mels, config.width, 3, padding=1)
        self.conv2 = nn.Conv1d(config.width, config.width, 3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(config.n_ctx, config.width)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))
        self.layer_norm = nn.LayerNorm(config.width)

    def forward(self, mel: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        x = F.gelu(compute_in_float32(self.conv1, mel))
        x = F.gelu(compute_in_float32(self.conv2, x)).transpose(1, 2)            # [B, n_ctx, width]
        x = x + self.embed_positions.weight[: x.shape[1]].float()
        states: list[torch.Tensor] = []
        for layer in self.layers:
            states.append(x)
            x = compute_in_float32(layer, x)
        x = compute_in_float32(self.layer_norm, x)
        states.append(x)
        return x, tuple(states)


class WhisperAudioEncoder(nn.Module):
    """`forward(audio [B, C, S] at 16 kHz)` -> the encoder's outputs for the clip's first window."""

    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = WhisperEncoder(config)

    def forward(self, audio: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        mel = log_mel(audio, self.config.n_mels, self.config.window_samples)
        return self.encoder(mel)

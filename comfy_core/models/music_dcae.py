"""ACE-Step 1's music VAE: a deep-compression autoencoder (DC-AE, Chen et al. 2024) over the
log-mel image of the stereo clip, and its vocoder (`music_vocoder.py`). ComfyUI 0.3.64's
`comfy/ldm/ace/vae/autoencoder_dc.py` and `music_dcae_pipeline.py` (`MusicDCAE`, the `vae.`
weights of `ace_step_v1_3.5b.safetensors`: `dcae.encoder/decoder.*`, `vocoder.*`); written here
from these descriptions.

DC-AE levels (widths from the weights; ACE's 128, 256, 512, 1024): residual blocks
`x + RMS(conv2(SiLU(conv1(x))))` or EfficientViT blocks (multi-scale ReLU linear attention, then
a GLU MBConv, both residual), joined by a stride-2 convolution down (plus the mean of the
pixel-unshuffled input over channel groups) and a nearest x2 + convolution up (plus the channel-
repeated pixel-shuffled input). The encoder ends with `conv_out(x) + mean over channel groups`, the
decoder starts with `conv_in(z) + z repeated over channels` and ends RMS-norm, ReLU, `conv_out`.
RMS norms over channels carry a bias (eps 1e-5).

EfficientViT attention (Cai et al. 2023, Sana's `SanaMultiscaleLinearAttention`): `q, k, v`
(channel linears) concatenated, plus that through a depthwise 5x5 and a grouped 1x1 convolution;
the result read as heads of `3 x 32` channels (each head's query, key and value are its first,
second and third 32 channels, as the reference lays them out), `out_i = sum_j v_j (k_j . q_i) /
(sum_j k_j . q_i + 1e-15)` with ReLU'd q and k, in fp32; `to_out`, RMS norm, residual.

The pipeline: encode: audio `[B, 2, S]` at 44.1 kHz padded to a multiple of 4096 samples, the log
mel of each channel `[B, 2, 128, S/512]`, mapped from [-11, 3] to [-1, 1], the encoder, then
`(z + 1.9091) * 0.1786` -> `[B, 8, 16, S/4096]`; decode inverts each step, the vocoder turning each
channel's mel into samples.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.music_vocoder import Vocoder, VocoderConfig, shape_names, weight_norm_names
from comfy_core.models.weight_shapes import count_numbered, numbered_children, shape_reader

HEAD_DIM = 32
MIN_MEL, MAX_MEL = -11.0, 3.0
SCALE, SHIFT = 0.1786, -1.9091
SAMPLES_PER_COLUMN = 4096  # 512 samples a mel frame, 8 frames a latent column
MARKER = "vocoder.backbone.channel_layers.0.0.bias"  # ComfyUI's test for this VAE (comfy/sd.py)


class MusicDCAEConfigError(ValueError):
    """A music DCAE state dict whose names or shapes do not make the network."""


class MusicDCAEInputError(ValueError):
    """Audio or latents the music DCAE cannot take."""


def _rms(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """RMS norm with weight and bias over axis 1 of `[B, C, H, W]`."""
    h = F.rms_norm(x.movedim(1, -1), (x.shape[1],), norm.weight.to(x), eps=1e-5) + norm.bias.to(x)
    return h.movedim(-1, 1)


class ChannelNorm(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _rms(x, self)


class ResBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm = ChannelNorm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm(self.conv2(F.silu(self.conv1(x))))


class MultiscaleProjection(nn.Module):
    def __init__(self, channels: int, heads: int, kernel: int) -> None:
        super().__init__()
        self.proj_in = nn.Conv2d(channels, channels, kernel, padding=kernel // 2, groups=channels, bias=False)
        self.proj_out = nn.Conv2d(channels, channels, 1, groups=3 * heads, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj_out(self.proj_in(x))


class LinearAttention(nn.Module):
    def __init__(self, channels: int, kernels: tuple[int, ...]) -> None:
        super().__init__()
        heads = channels // HEAD_DIM
        inner = heads * HEAD_DIM
        self.to_q = nn.Linear(channels, inner, bias=False)
        self.to_k = nn.Linear(channels, inner, bias=False)
        self.to_v = nn.Linear(channels, inner, bias=False)
        self.to_qkv_multiscale = nn.ModuleList(MultiscaleProjection(3 * inner, heads, k) for k in kernels)
        self.to_out = nn.Linear(inner * (1 + len(kernels)), channels, bias=False)
        self.norm_out = ChannelNorm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        last = x.movedim(1, -1)
        qkv = torch.cat([self.to_q(last), self.to_k(last), self.to_v(last)], dim=-1).movedim(-1, 1)
        scales = torch.cat([qkv] + [branch(qkv) for branch in self.to_qkv_multiscale], dim=1)
        heads = scales.float().reshape(b, -1, 3 * HEAD_DIM, h * w)  # [B, n, 3*32, N]
        q, k, v = F.relu(heads[:, :, :HEAD_DIM]), F.relu(heads[:, :, HEAD_DIM:2 * HEAD_DIM]), heads[:, :, 2 * HEAD_DIM:]
        kv = torch.einsum("bndj,bnej->bnde", v, k)  # sum_j v_j k_j^T: [B, n, 32, 32]
        numerator = torch.einsum("bnde,bnei->bndi", kv, q)
        denominator = torch.einsum("bnej,bnei->bni", k, q)[:, :, None]
        out = (numerator / (denominator + 1e-15)).to(x.dtype).reshape(b, -1, h, w)
        out = self.to_out(out.movedim(1, -1)).movedim(-1, 1)
        return x + self.norm_out(out)


class GLUMBConv(nn.Module):
    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.conv_inverted = nn.Conv2d(channels, 2 * hidden, 1)
        self.conv_depth = nn.Conv2d(2 * hidden, 2 * hidden, 3, padding=1, groups=2 * hidden)
        self.conv_point = nn.Conv2d(hidden, channels, 1, bias=False)
        self.norm = ChannelNorm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.conv_depth(F.silu(self.conv_inverted(x))).chunk(2, dim=1)
        return x + self.norm(self.conv_point(value * F.silu(gate)))


class EfficientViTBlock(nn.Module):
    def __init__(self, channels: int, kernels: tuple[int, ...], hidden: int) -> None:
        super().__init__()
        self.attn = LinearAttention(channels, kernels)
        self.conv_out = GLUMBConv(channels, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_out(self.attn(x))


class Down(nn.Module):
    """Stride-2 convolution plus the input pixel-unshuffled and averaged over channel groups."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.group = cin * 4 // cout
        self.conv = nn.Conv2d(cin, cout, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = F.pixel_unshuffle(x, 2).unflatten(1, (-1, self.group)).mean(dim=2)
        return self.conv(x) + shortcut


class Up(nn.Module):
    """Nearest x2 and a convolution, plus the input repeated over channels and pixel-shuffled."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.repeats = cout * 4 // cin
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = F.pixel_shuffle(x.repeat_interleave(self.repeats, dim=1), 2)
        return self.conv(F.interpolate(x, scale_factor=2, mode="nearest")) + shortcut


@dataclass(frozen=True)
class Level:
    """One level: width, its blocks ("res" or "vit" with the attention kernels and MLP width)."""

    width: int
    blocks: tuple[tuple[str, tuple[int, ...], int], ...]


def _read_level(tensors: Mapping[str, Any], head: str, width: int, indices: list[int]) -> Level:
    blocks = []
    for j in indices:
        base = f"{head}{j}."
        if base + "attn.to_q.weight" in tensors:
            n = len(numbered_children(tensors, base + "attn.to_qkv_multiscale."))
            kernels = tuple(int(tensors[f"{base}attn.to_qkv_multiscale.{m}.proj_in.weight"].shape[-1])
                            for m in range(n))
            hidden = int(tensors[base + "conv_out.conv_point.weight"].shape[1])
            blocks.append(("vit", kernels, hidden))
        elif base + "conv1.weight" in tensors:
            blocks.append(("res", (), 0))
        else:
            raise MusicDCAEConfigError(f"music DCAE: {head}{j} is neither a residual nor an EfficientViT block")
    return Level(width, tuple(blocks))


@dataclass(frozen=True)
class MusicDCAEConfig:
    in_channels: int
    latent_channels: int
    encoder: tuple[Level, ...]
    decoder: tuple[Level, ...]
    vocoder: VocoderConfig

    @property
    def downscale(self) -> int:
        return SAMPLES_PER_COLUMN

    @property
    def embed_dim(self) -> int:
        return self.latent_channels

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "MusicDCAEConfig":
        """From names and shapes under `prefix` (`dcae.*`, `vocoder.*`; header entries will do)."""
        tensors = shape_names(tensors)
        shape = shape_reader(tensors, prefix, MusicDCAEConfigError, "music DCAE")
        width0, in_channels, _, _ = shape("dcae.encoder.conv_in.weight")
        latent, _, _, _ = shape("dcae.encoder.conv_out.weight")
        levels = count_numbered(tensors, prefix, "dcae.encoder.down_blocks", MusicDCAEConfigError, "music DCAE")
        encoder, width = [], width0
        for i in range(levels):
            head = f"{prefix}dcae.encoder.down_blocks.{i}."
            indices = sorted(numbered_children(tensors, head))
            if i < levels - 1:  # the last child steps down
                blocks, down = indices[:-1], indices[-1]
                encoder.append(_read_level(tensors, head, width, blocks))
                width = int(tensors[f"{head}{down}.conv.weight"].shape[0])
            else:
                encoder.append(_read_level(tensors, head, width, indices))
        ups = count_numbered(tensors, prefix, "dcae.decoder.up_blocks", MusicDCAEConfigError, "music DCAE")
        decoder = []
        for i in range(ups):
            head = f"{prefix}dcae.decoder.up_blocks.{i}."
            indices = sorted(numbered_children(tensors, head))
            if i < ups - 1:
                width_i = int(tensors[f"{head}0.conv.weight"].shape[0])
                decoder.append(_read_level(tensors, head, width_i, indices[1:]))
            else:
                width_i = int(shape("dcae.decoder.conv_in.weight")[0])
                decoder.append(_read_level(tensors, head, width_i, indices))
        if levels == 0 or ups == 0:
            raise MusicDCAEConfigError(f"music DCAE: {prefix}dcae has no encoder / decoder levels")
        vocoder = VocoderConfig.detect_from_weights(tensors, prefix + "vocoder.")
        return cls(in_channels=in_channels, latent_channels=latent, encoder=tuple(encoder), decoder=tuple(decoder),
                   vocoder=vocoder)


def _blocks(level: Level) -> list[nn.Module]:
    return [ResBlock(level.width) if kind == "res" else EfficientViTBlock(level.width, kernels, hidden)
            for kind, kernels, hidden in level.blocks]


class Encoder(nn.Module):
    def __init__(self, config: MusicDCAEConfig) -> None:
        super().__init__()
        levels = config.encoder
        self.conv_in = nn.Conv2d(config.in_channels, levels[0].width, 3, padding=1)
        self.down_blocks = nn.ModuleList(
            nn.Sequential(*_blocks(level), *([Down(level.width, levels[i + 1].width)] if i < len(levels) - 1 else []))
            for i, level in enumerate(levels))
        self.conv_out = nn.Conv2d(levels[-1].width, config.latent_channels, 3, padding=1)
        self.group = levels[-1].width // config.latent_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for block in self.down_blocks:
            h = block(h)
        return self.conv_out(h) + h.unflatten(1, (-1, self.group)).mean(dim=2)


class Decoder(nn.Module):
    def __init__(self, config: MusicDCAEConfig) -> None:
        super().__init__()
        levels = config.decoder
        self.conv_in = nn.Conv2d(config.latent_channels, levels[-1].width, 3, padding=1)
        self.repeats = levels[-1].width // config.latent_channels
        self.up_blocks = nn.ModuleList(
            nn.Sequential(*([Up(levels[i + 1].width, level.width)] if i < len(levels) - 1 else []), *_blocks(level))
            for i, level in enumerate(levels))
        self.norm_out = ChannelNorm(levels[0].width)
        self.conv_out = nn.Conv2d(levels[0].width, config.in_channels, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(z) + z.repeat_interleave(self.repeats, dim=1)
        for block in reversed(self.up_blocks):
            h = block(h)
        return self.conv_out(F.relu(self.norm_out(h)))


class DCAE(nn.Module):
    def __init__(self, config: MusicDCAEConfig) -> None:
        super().__init__()
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)


class MusicDCAE(nn.Module):
    """`dcae` + `vocoder` and the pipeline (module doc). ComfyUI's class name."""

    def __init__(self, config: MusicDCAEConfig) -> None:
        super().__init__()
        self.config = config
        self.dcae = DCAE(config)
        self.vocoder = Vocoder(config.vocoder)

    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        """`[B, C, S]` at 44.1 kHz -> `[B, 8, 16, ceil(S / 4096)]`."""
        if audio.ndim != 3 or audio.shape[1] != self.config.in_channels:
            raise MusicDCAEInputError(f"music DCAE encode: expected audio [B, {self.config.in_channels}, S], "
                                      f"got {tuple(audio.shape)}")
        pad = (-audio.shape[-1]) % SAMPLES_PER_COLUMN
        if pad:
            audio = F.pad(audio, (0, pad))
        b, c, s = audio.shape
        mel = self.vocoder.mel_transform(audio.reshape(b * c, s)).reshape(b, c, -1, s // 512)
        mel = ((mel - MIN_MEL) / (MAX_MEL - MIN_MEL) - 0.5) / 0.5
        dtype = next(self.dcae.parameters()).dtype
        z = torch.cat([self.dcae.encoder(m[None].to(dtype)) for m in mel])
        return (z - SHIFT) * SCALE

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """`[B, 8, 16, T]` -> `[B, C, T * 4096]` at 44.1 kHz."""
        if latent.ndim != 4 or latent.shape[1] != self.config.latent_channels:
            raise MusicDCAEInputError(f"music DCAE decode: expected a latent [B, {self.config.latent_channels}, "
                                      f"rows, T], got {tuple(latent.shape)}")
        waves = []
        for z in latent / SCALE + SHIFT:
            mel = self.dcae.decoder(z[None])[0]  # [C, 128, F]
            mel = (mel * 0.5 + 0.5) * (MAX_MEL - MIN_MEL) + MIN_MEL
            waves.append(self.vocoder.decode(mel)[:, 0])  # [C, F * 512]
        return torch.stack(waves)


def is_music_dcae(state: Mapping[str, Any]) -> bool:
    return MARKER in state


def music_dcae_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Older weight-norm names renamed (`weight_norm_names`); the mel buffers, when a file carries
    them, dropped (computed here)."""
    renamed = weight_norm_names(state)
    return {k: v for k, v in renamed.items() if not k.startswith("vocoder.mel_transform.")}


__all__ = ["MARKER", "MusicDCAE", "MusicDCAEConfig", "MusicDCAEConfigError", "MusicDCAEInputError",
           "is_music_dcae", "music_dcae_state_dict"]

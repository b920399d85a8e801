"""MiniMax H3's stereo audio VAE: a DAC waveform encoder, an attention projection to the latent
and a BigVGAN decoder, at 32 kHz with 800 samples a latent frame (40 Hz).

After Comfy-Org/ComfyUI comfy/ldm/minimax/audio_vae.py (`MiniMaxH3AudioVAE`; its CUDA kernels
in audio_vae_kernels.py compute the same Snake and 2x FIR resampling as the plain torch path
written here) and the way comfy/sd.py builds it (a state dict holding
`pre_block.attn.zero_k_bias`); DAC (Kumar et al. 2023, "High-Fidelity Audio Compression with
Improved RVQGAN") and BigVGAN (Lee et al. 2023, "BigVGAN: A Universal Neural Vocoder with
Large-Scale Training"), written here from that behaviour.

- Encoder (per stereo channel, mono): `Conv1d(1, d, 7)`, five blocks (three residual units with
  Snake, dilations 1, 3, 9; Snake; a strided conv of kernel 2 x stride), Snake, `Conv1d(., D, 3)`.
- `pre_block`: `proj(norm3(x)) + attn(norm1(x))` where the attention is causal, its q/k/v biases
  are `q_bias`, `zero_k_bias`, `v_bias`, its heads are averaged and the head width pooled
  (adaptive average) to the 32 latent channels before `attn.proj`; then `x + mlp(norm2(x))`, a
  GeGLU (tanh GELU) MLP with its own LayerNorm. `mean_proj` gives the posterior mean (used as
  is); `logs_proj` is in the file but unused.
- Decoder: `dec_in_proj`, BigVGAN (`conv_pre`, seven transposed-conv upsamplers 5, 5, 2, 2, 2, 2,
  2 each followed by the mean of three AMP residual blocks with anti-aliased SnakeBeta
  activations (2x up, activation, 2x down through the file's Kaiser-sinc filters),
  `activation_post`, `conv_post` without bias), clamped to [-1, 1].
- Latent `[B, 32, 2, T]` (channels, stereo, frames), normalised by the file's `latents_mean` /
  `latents_std`.

`MiniMaxH3AudioVaePatcher` is the VAE object (ComfyUI's attributes for this VAE); this module
registers its state-dict kind in `comfy_core.patching.vae.STATE_DICT_KINDS`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import attention_heads
from comfy_core.models.ltx_audio_vae import AudioVAEInputError
from comfy_core.models.vae import VAEConfigError
from comfy_core.patching.audio_vae import AudioVaePatcher
from comfy_core.patching.vae import STATE_DICT_KINDS, VaePatcher

MARKER = "pre_block.attn.zero_k_bias"  # ComfyUI's test
SAMPLE_RATE = 32000
# What the weights cannot show (ComfyUI's constants for this VAE).
UPSAMPLE_RATES = (5, 5, 2, 2, 2, 2, 2)
RESIDUAL_DILATIONS, AMP_DILATIONS, ATTENTION_HEADS = (1, 3, 9), (1, 3, 5), 8


class MiniMaxH3AudioVAEError(VAEConfigError):
    """MiniMax H3 audio VAE weights that do not fit the architecture."""


class MiniMaxH3AudioInputError(MiniMaxH3AudioVAEError, AudioVAEInputError):
    """A waveform or latent this VAE cannot take (the audio nodes report it on their input)."""


def is_minimax_h3_audio_vae(names: Iterable[str]) -> bool:
    return MARKER in set(names)


@dataclass(frozen=True)
class MiniMaxH3AudioVAEConfig:
    encoder_dim: int = 64
    encoder_rates: tuple[int, ...] = (2, 4, 4, 5, 5)
    latent_width: int = 2048
    latent_channels: int = 32
    mlp_width: int = 64
    decoder_dim: int = 1024
    upsample_kernels: tuple[int, ...] = (9, 9, 4, 4, 4, 4, 4)
    resblock_kernels: tuple[int, ...] = (3, 7, 11)

    @property
    def hop(self) -> int:
        return math.prod(self.encoder_rates)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "MiniMaxH3AudioVAEConfig":
        def shape(name: str) -> tuple[int, ...]:
            if prefix + name not in tensors:
                raise MiniMaxH3AudioVAEError(f"MiniMax H3 audio VAE: missing tensor {prefix + name!r}")
            return tuple(tensors[prefix + name].shape)

        rates = []
        while f"{prefix}encoder.block.{len(rates) + 1}.block.4.weight" in tensors:
            kernel = shape(f"encoder.block.{len(rates) + 1}.block.4.weight")[2]
            rates.append(kernel // 2)
        ups = []
        while f"{prefix}decoder.ups.{len(ups)}.0.weight" in tensors:
            ups.append(shape(f"decoder.ups.{len(ups)}.0.weight")[2])
        if len(ups) != len(UPSAMPLE_RATES):
            raise MiniMaxH3AudioVAEError(f"MiniMax H3 audio VAE: {len(ups)} decoder upsamplers, the architecture "
                                         f"has {len(UPSAMPLE_RATES)} ({UPSAMPLE_RATES})")
        if math.prod(rates) != math.prod(UPSAMPLE_RATES):
            raise MiniMaxH3AudioVAEError(f"MiniMax H3 audio VAE: the encoder downsamples {math.prod(rates)}x, the "
                                         f"decoder upsamples {math.prod(UPSAMPLE_RATES)}x")
        kernels = []
        while f"{prefix}decoder.resblocks.{len(kernels)}.convs1.0.weight" in tensors and len(kernels) < 64:
            kernels.append(shape(f"decoder.resblocks.{len(kernels)}.convs1.0.weight")[2])
        if not kernels or len(kernels) % len(ups):
            raise MiniMaxH3AudioVAEError(f"MiniMax H3 audio VAE: {len(kernels)} AMP blocks for {len(ups)} levels")
        per_level = len(kernels) // len(ups)
        latent_width = shape(f"encoder.block.{len(rates) + 2}.weight")[0]
        if latent_width % ATTENTION_HEADS:
            raise MiniMaxH3AudioVAEError(f"MiniMax H3 audio VAE: latent width {latent_width} is not a multiple of "
                                         f"the {ATTENTION_HEADS} attention heads")
        config = cls(encoder_dim=shape("encoder.block.0.weight")[0], encoder_rates=tuple(rates),
                     latent_width=latent_width, latent_channels=shape("mean_proj.weight")[0],
                     mlp_width=shape("pre_block.mlp.w0.weight")[0], decoder_dim=shape("decoder.conv_pre.weight")[0],
                     upsample_kernels=tuple(ups), resblock_kernels=tuple(kernels[:per_level]))
        for name in ("latents_mean", "latents_std"):
            if shape(name) != (config.latent_channels,):
                raise MiniMaxH3AudioVAEError(f"MiniMax H3 audio VAE: {name} has shape {list(shape(name))}, "
                                             f"expected [{config.latent_channels}]")
        return config


def snake(x: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """x + sin^2(alpha x) / beta (Ziyin et al. 2020), beta guarded by 1e-9."""
    return x + torch.sin(alpha * x) ** 2 / (beta + 1e-9)


class Snake1d(nn.Module):
    """Snake with per-channel `alpha` [1, C, 1] (beta = alpha): the encoder's."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return snake(x, self.alpha, self.alpha)


class SnakeBeta(nn.Module):
    """Snake with separate `alpha`, `beta` [C] stored as logarithms: the decoder's."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return snake(x, self.alpha.exp().view(1, -1, 1), self.beta.exp().view(1, -1, 1))


class UpSample1d(nn.Module):
    """2x upsampling by the 12-tap filter: edge-replicated by 5, transposed conv (stride 2) x 2, 15
    samples cut at each end."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("filter", torch.zeros(1, 1, 12))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[1]
        x = F.pad(x, (5, 5), mode="replicate")
        x = F.conv_transpose1d(x, self.filter.to(x.dtype).expand(c, -1, -1), stride=2, groups=c) * 2
        return x[..., 15:-15]


class LowPassFilter1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("filter", torch.zeros(1, 1, 12))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[1]
        return F.conv1d(F.pad(x, (5, 6), mode="replicate"), self.filter.to(x.dtype).expand(c, -1, -1), stride=2,
                        groups=c)


class DownSample1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lowpass = LowPassFilter1d()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lowpass(x)


class Activation1d(nn.Module):
    """Anti-aliased activation: 2x up, SnakeBeta, 2x down."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.act = SnakeBeta(channels)
        self.upsample = UpSample1d()
        self.downsample = DownSample1d()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.downsample(self.act(self.upsample(x)))


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.block = nn.Sequential(Snake1d(dim), nn.Conv1d(dim, dim, 7, dilation=dilation, padding=3 * dilation),
                                   Snake1d(dim), nn.Conv1d(dim, dim, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        cut = (x.shape[-1] - y.shape[-1]) // 2
        return y + (x[..., cut:x.shape[-1] - cut] if cut > 0 else x)


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, stride: int) -> None:
        super().__init__()
        half = dim // 2
        self.block = nn.Sequential(*(ResidualUnit(half, d) for d in RESIDUAL_DILATIONS), Snake1d(half),
                                   nn.Conv1d(half, dim, 2 * stride, stride=stride, padding=math.ceil(stride / 2)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class Encoder(nn.Module):
    def __init__(self, config: MiniMaxH3AudioVAEConfig) -> None:
        super().__init__()
        width = config.encoder_dim
        layers: list[nn.Module] = [nn.Conv1d(1, width, 7, padding=3)]
        for stride in config.encoder_rates:
            width *= 2
            layers.append(EncoderBlock(width, stride))
        layers += [Snake1d(width), nn.Conv1d(width, config.latent_width, 3, padding=1)]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class GeGluMlp(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.w0 = nn.Linear(width, hidden)
        self.w1 = nn.Linear(width, hidden)
        self.w2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        return self.w2(F.gelu(self.w0(x), approximate="tanh") * self.w1(x))


class CausalAttention(nn.Module):
    def __init__(self, width: int, out_width: int) -> None:
        super().__init__()
        self.out_width = out_width
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(width))
        self.v_bias = nn.Parameter(torch.zeros(width))
        self.register_buffer("zero_k_bias", torch.zeros(width))
        self.proj = nn.Linear(out_width, out_width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        bias = torch.cat([self.q_bias, self.zero_k_bias, self.v_bias]).to(x.dtype)
        q, k, v = F.linear(x, self.qkv.weight, bias).view(b, n, 3, ATTENTION_HEADS, c // ATTENTION_HEADS) \
            .permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, N, d]
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        out = attention_heads(q, k, v, causal).mean(dim=1)  # heads averaged: [B, N, d]
        return self.proj(F.adaptive_avg_pool1d(out, self.out_width))


class AttnProjection(nn.Module):
    def __init__(self, config: MiniMaxH3AudioVAEConfig) -> None:
        super().__init__()
        width, out = config.latent_width, config.latent_channels
        self.norm1 = nn.LayerNorm(width)
        self.attn = CausalAttention(width, out)
        self.proj = nn.Linear(width, out)
        self.norm3 = nn.LayerNorm(width)
        self.norm2 = nn.LayerNorm(out)
        self.mlp = GeGluMlp(out, config.mlp_width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(self.norm3(x)) + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class AMPBlock1(nn.Module):
    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(nn.Conv1d(channels, channels, kernel, dilation=d, padding=(kernel - 1) * d // 2)
                                    for d in AMP_DILATIONS)
        self.convs2 = nn.ModuleList(nn.Conv1d(channels, channels, kernel, padding=(kernel - 1) // 2)
                                    for _ in AMP_DILATIONS)
        self.activations = nn.ModuleList(Activation1d(channels) for _ in range(2 * len(AMP_DILATIONS)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, (c1, c2) in enumerate(zip(self.convs1, self.convs2)):
            x = x + c2(self.activations[2 * i + 1](c1(self.activations[2 * i](x))))
        return x


class BigVGAN(nn.Module):
    def __init__(self, config: MiniMaxH3AudioVAEConfig) -> None:
        super().__init__()
        width = config.decoder_dim
        self.conv_pre = nn.Conv1d(config.latent_width, width, 7, padding=3)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        for i, (rate, kernel) in enumerate(zip(UPSAMPLE_RATES, config.upsample_kernels)):
            cin, cout = width // 2 ** i, width // 2 ** (i + 1)
            self.ups.append(nn.ModuleList([nn.ConvTranspose1d(cin, cout, kernel, rate, padding=(kernel - rate) // 2)]))
            self.resblocks.extend(AMPBlock1(cout, k) for k in config.resblock_kernels)
        final = width // 2 ** len(UPSAMPLE_RATES)
        self.activation_post = Activation1d(final)
        self.conv_post = nn.Conv1d(final, 1, 7, padding=3, bias=False)
        self.kernels = len(config.resblock_kernels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(x)
        for i, up in enumerate(self.ups):
            x = up[0](x)
            blocks = self.resblocks[i * self.kernels:(i + 1) * self.kernels]
            x = sum(block(x) for block in blocks) / self.kernels
        return self.conv_post(self.activation_post(x)).clamp(-1.0, 1.0)


class MiniMaxH3AudioVAE(nn.Module):
    """See the module docstring: `encode` stereo waveforms [B, 2, L] at 32 kHz -> normalised latents
    [B, 32, 2, T] (L right-padded with zeros to a multiple of 800); `decode` back to [B, 2, 800 T]."""

    sample_rate = SAMPLE_RATE
    output_sample_rate = SAMPLE_RATE

    def __init__(self, config: MiniMaxH3AudioVAEConfig) -> None:
        super().__init__()
        self.config = config
        self.hop_length = self.samples_per_latent = config.hop
        self.latents_per_second = SAMPLE_RATE // config.hop
        self.latent_channels = config.latent_channels
        self.encoder = Encoder(config)
        self.pre_block = AttnProjection(config)
        self.mean_proj = nn.Conv1d(config.latent_channels, config.latent_channels, 1)
        self.logs_proj = nn.Conv1d(config.latent_channels, config.latent_channels, 1)  # unused: the mean is the latent
        self.dec_in_proj = nn.Conv1d(config.latent_channels, config.latent_width, 1)
        self.decoder = BigVGAN(config)
        self.register_buffer("latents_mean", torch.zeros(config.latent_channels))
        self.register_buffer("latents_std", torch.ones(config.latent_channels))

    def encode(self, waveform: torch.Tensor) -> torch.Tensor:
        if waveform.ndim != 3:
            raise MiniMaxH3AudioInputError(f"MiniMax H3 audio VAE encode: expected waveforms [B, channels, samples], "
                                           f"got {tuple(waveform.shape)}")
        b, s, length = waveform.shape
        x = F.pad(waveform, (0, (-length) % self.hop_length)).reshape(b * s, 1, -1)
        x = self.pre_block(self.encoder(x).transpose(1, 2)).transpose(1, 2)  # [B*S, 32, T]
        z = self.mean_proj(x)
        z = (z - self.latents_mean.to(z.dtype).view(1, -1, 1)) / self.latents_std.to(z.dtype).view(1, -1, 1)
        return z.reshape(b, s, z.shape[1], z.shape[2]).permute(0, 2, 1, 3)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        if z.ndim != 4 or z.shape[1] != self.latent_channels:
            raise MiniMaxH3AudioInputError(f"MiniMax H3 audio VAE decode: expected a latent "
                                           f"[B, {self.latent_channels}, channels, T], got {tuple(z.shape)}")
        b, c, s, t = z.shape
        z = z.permute(0, 2, 1, 3).reshape(b * s, c, t)
        z = z * self.latents_std.to(z.dtype).view(1, -1, 1) + self.latents_mean.to(z.dtype).view(1, -1, 1)
        return self.decoder(self.dec_in_proj(z)).reshape(b, s, -1)


def audio_vae_from_state_dict(sd: Mapping[str, torch.Tensor]) -> MiniMaxH3AudioVAE:
    """The VAE of a state dict in ComfyUI's names, float32 (its only working dtype)."""
    config = MiniMaxH3AudioVAEConfig.detect_from_weights(sd)
    with torch.device("meta"):
        model = MiniMaxH3AudioVAE(config)
    try:
        model.load_state_dict({k: v.to(torch.float32) for k, v in sd.items()}, strict=True, assign=True)
    except RuntimeError as exc:
        raise MiniMaxH3AudioVAEError(f"MiniMax H3 audio VAE: {exc}") from None
    return model.eval()


class MiniMaxH3AudioVaePatcher(AudioVaePatcher):
    """The VAE object for `MiniMaxH3AudioVAE`, answering as ComfyUI's `comfy.sd.VAE` does for it:
    `encode(waveform [B, S, C] at 32 kHz)` -> `[B, 32, 2, T]` (the waveform first cropped, centred,
    to a multiple of 800 samples and to 2 channels, a mono one repeated), `decode` ->
    `[B, 800 T, 2]` at 32 kHz; `latent_dim` 2, ratios 800; float32."""

    audio_sample_rate = SAMPLE_RATE
    output_channels = 2
    pad_channel_value = "replicate"
    upscale_ratio = 800
    downscale_ratio = 800

    def __init__(self, model: nn.Module | Mapping[str, torch.Tensor] | None = None,
                 load_device: torch.device | str | None = None, offload_device: torch.device | str | None = None,
                 *, sd: Mapping[str, torch.Tensor] | None = None, device: torch.device | str | None = None,
                 config: Any = None, dtype: torch.dtype | None = None, metadata: Mapping[str, str] | None = None,
                 cache_patched_weights: bool = True) -> None:
        if config is not None:
            raise MiniMaxH3AudioVAEError("comfy.sd.VAE(config=...) with a MiniMax H3 audio VAE state dict: the "
                                         "architecture is read from the weights")
        if isinstance(model, Mapping):
            model, sd = None, model
        if model is None:
            if sd is None:
                raise TypeError("MiniMaxH3AudioVaePatcher: give the VAE or its state dict (sd=...)")
            model = audio_vae_from_state_dict(sd)
        if not isinstance(model, MiniMaxH3AudioVAE):
            raise TypeError(f"MiniMaxH3AudioVaePatcher: expected a MiniMaxH3AudioVAE, got {type(model).__name__}")
        VaePatcher.__init__(self, model, load_device if load_device is not None else device, offload_device,
                            cache_patched_weights=cache_patched_weights)

    @property
    def latent_channels(self) -> int:
        return int(self.model.latent_channels)

    @property
    def latent_dim(self) -> int:
        return 2

    @property
    def audio_sample_rate_output(self) -> int:
        return SAMPLE_RATE

    @property
    def autoencoder(self) -> Any:
        return self.model

    def memory_used_encode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        """ComfyUI's estimate: waveform [B, 2, samples]."""
        size = torch.empty((), dtype=dtype).element_size()
        return int((900 * shape[2] + 105_000_000) * size * 1.03)

    def memory_used_decode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        size = torch.empty((), dtype=dtype).element_size()
        return int(max(42_000_000, 220 * shape[-1] * 800 + 20_000_000) * size * 1.03)

    def encode(self, audio: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Waveform [B, S, C] at 32 kHz -> latent [B, 32, 2, T] (float32)."""
        if audio.ndim != 3:
            raise MiniMaxH3AudioInputError(f"MiniMax H3 audio VAE encode: expected a waveform [B, S, C], got "
                                           f"{tuple(audio.shape)}")
        samples = audio.shape[1]
        keep = samples // self.downscale_ratio * self.downscale_ratio
        if keep == 0:
            raise MiniMaxH3AudioInputError(f"MiniMax H3 audio VAE encode: {samples} samples, fewer than one latent "
                                           f"frame ({self.downscale_ratio})")
        audio = audio.narrow(1, (samples - keep) // 2, keep)  # ComfyUI's centred crop to whole latent frames
        if audio.shape[-1] > self.output_channels:
            audio = audio[..., :self.output_channels]
        elif audio.shape[-1] < self.output_channels:
            audio = F.pad(audio, (0, self.output_channels - audio.shape[-1]), mode="replicate")
        with torch.no_grad(), self.applied() as vae:
            return vae.encode(audio.movedim(-1, 1).to(self.load_device, torch.float32)).to(self.offload_device)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Latent [B, 32, 2, T] (a 5-D one's first slice of axis 2, as ComfyUI) -> waveform
        [B, 800 T, 2] (float32)."""
        if latent.ndim == 5:
            latent = latent[:, :, 0]
        with torch.no_grad(), self.applied() as vae:
            out = vae.decode(latent.to(self.load_device, torch.float32))
        return out.to(self.offload_device).movedim(1, -1)

    def decode_tiled(self, samples: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        """The whole latent at once (this VAE has no tiled decode of its own)."""
        return self.decode(samples)


STATE_DICT_KINDS.append((is_minimax_h3_audio_vae, MiniMaxH3AudioVaePatcher))

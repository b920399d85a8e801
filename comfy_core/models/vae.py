"""The KL-regularised autoencoder of latent diffusion (`AutoencoderKL`), in the LDM layout.

Esser, Rombach & Ommer 2021 ("Taming Transformers", the encoder/decoder) with the KL-regularised
bottleneck of Rombach et al. 2022 ("High-Resolution Image Synthesis with Latent Diffusion
Models", sec. 3). Parameter names follow `ldm/modules/diffusionmodules/model.py` and
`ldm/models/autoencoder.py` (`encoder.down.N.block.M`, `mid.attn_1.q/k/v/proj_out` as 1x1
convolutions, `quant_conv`, `post_quant_conv`, `decoder.up.N.upsample`), so the checkpoint's
`first_stage_model.*` tensors load unchanged. Written here from that description.

The SD3 and Flux.1 autoencoders (Esser et al. 2024, "Scaling Rectified Flow Transformers", sec.
5.2.1; BFL's `flux/modules/autoencoder.py`) are the same network with 16 latent channels and no
quantisation convolutions (ComfyUI builds them as an `AutoencodingEngine` whose regulariser
takes the moments straight from the encoder, `comfy/sd.py: VAE`): `VAEConfig.use_quant_conv`
is read from the weights (`quant_conv.weight` present or not), so `ae.safetensors` (bare
`encoder.*`/`decoder.*`), SD3.5's `first_stage_model.*` and diffusers' layouts load as they are.

Pixel conventions are ComfyUI's (`comfy/sd.py: VAE`): `encode` takes IMAGE `[B, H, W, C]` in
0..1, maps it to -1..1 and returns the posterior **mean** (no sampling); `decode` returns
`clamp((x + 1) / 2, 0, 1)` as `[B, H, W, 3]`. Latents are the raw first-stage space: the
family's scale factor (0.18215 for SD1/SD2, 0.13025 for SDXL) is applied by the sampler through
the latent format, as in ComfyUI, so LATENT values are interchangeable with ComfyUI's.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import attention
from comfy_core.models.weight_shapes import shape_reader

log = logging.getLogger(__name__)


class VAEConfigError(ValueError):
    """The VAE weights are incomplete or inconsistent, or the input has the wrong shape."""


@dataclass(frozen=True)
class VAEConfig:
    ch: int = 128
    ch_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    z_channels: int = 4
    embed_dim: int = 4
    in_channels: int = 3
    out_ch: int = 3
    # The 1x1 `quant_conv` / `post_quant_conv` around the bottleneck (SD1/SD2/SDXL); SD3 and
    # Flux have neither, and then `embed_dim == z_channels`.
    use_quant_conv: bool = True
    # The decoder's base width when it differs from the encoder's (BFL's FLUX.2 small decoder:
    # the full encoder and a narrower decoder with the same level multipliers); None: `ch`.
    decoder_ch: int | None = None

    @property
    def decoder_width(self) -> int:
        return self.ch if self.decoder_ch is None else self.decoder_ch

    def __post_init__(self) -> None:
        if not self.use_quant_conv and self.embed_dim != self.z_channels:
            raise VAEConfigError(f"VAE without quantisation convolutions: embed_dim ({self.embed_dim}) must "
                                 f"equal z_channels ({self.z_channels})")

    @property
    def downscale(self) -> int:
        return 2 ** (len(self.ch_mult) - 1)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "first_stage_model.") -> "VAEConfig":
        """Widths, levels, res blocks, latent channels and the presence of the quantisation
        convolutions of the autoencoder under `prefix`, from names and shapes.

        Raises `VAEConfigError` for missing or inconsistent tensors (also when only one of
        `quant_conv` / `post_quant_conv` is there)."""
        shape = shape_reader(tensors, prefix, VAEConfigError, "VAE")

        conv_in = shape("encoder.conv_in.weight")
        ch, in_channels = conv_in[0], conv_in[1]
        pattern = re.compile(re.escape(prefix) + r"encoder\.down\.(\d+)\.block\.(\d+)\.")
        found: dict[int, set[int]] = {}
        for name in tensors:
            m = pattern.match(name)
            if m:
                found.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
        if not found:
            raise VAEConfigError(f"VAE under {prefix!r} has no encoder.down blocks")
        levels = max(found) + 1
        num_res_blocks = len(found[0])
        ch_mult = []
        for level in range(levels):
            if found.get(level) != set(range(num_res_blocks)):
                raise VAEConfigError(f"VAE under {prefix!r}: encoder.down.{level} has blocks "
                                     f"{sorted(found.get(level, ()))}, expected 0..{num_res_blocks - 1}")
            width = shape(f"encoder.down.{level}.block.{num_res_blocks - 1}.conv2.weight")[0]
            ch_mult.append(width // ch)
        z_channels = shape("encoder.conv_out.weight")[0] // 2
        out_ch = shape("decoder.conv_out.weight")[0]
        has_quant = f"{prefix}quant_conv.weight" in tensors
        if has_quant != (f"{prefix}post_quant_conv.weight" in tensors):
            present, absent = ("quant_conv", "post_quant_conv") if has_quant else ("post_quant_conv", "quant_conv")
            raise VAEConfigError(f"VAE under {prefix!r} has {present}.weight but no {absent}.weight")
        if has_quant:
            embed_dim = shape("quant_conv.weight")[0] // 2
            post = shape("post_quant_conv.weight")
            if tuple(post[:2]) != (z_channels, embed_dim):
                raise VAEConfigError(f"VAE under {prefix!r}: post_quant_conv.weight is {tuple(post)}, expected "
                                     f"({z_channels}, {embed_dim}, 1, 1)")
        else:
            embed_dim = z_channels
        decoder_out, decoder_in = shape("decoder.conv_in.weight")[:2]
        if decoder_in != z_channels:
            raise VAEConfigError(f"VAE under {prefix!r}: decoder.conv_in takes {decoder_in} channels, the encoder "
                                 f"gives {z_channels}")
        # The decoder's width from its first convolution (its deepest level), the encoder's level
        # multipliers assumed, as ComfyUI reads it (`decoder_ddconfig`).
        if decoder_out % ch_mult[-1]:
            raise VAEConfigError(f"VAE under {prefix!r}: decoder.conv_in gives {decoder_out} channels, not a "
                                 f"multiple of the deepest level's multiplier {ch_mult[-1]}")
        decoder_ch = decoder_out // ch_mult[-1]
        return cls(ch=ch, ch_mult=tuple(ch_mult), num_res_blocks=num_res_blocks, z_channels=z_channels,
                   embed_dim=embed_dim, in_channels=in_channels, out_ch=out_ch, use_quant_conv=has_quant,
                   decoder_ch=None if decoder_ch == ch else decoder_ch)


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(32, channels, eps=1e-6)


class VAEResBlock(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.norm1 = _norm(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = _norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.nin_shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        skip = self.nin_shortcut(x) if hasattr(self, "nin_shortcut") else x
        return skip + h


class AttnBlock(nn.Module):
    """Single-head self-attention over all pixels, with 1x1-convolution projections."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = _norm(channels)
        self.q = nn.Conv2d(channels, channels, 1)
        self.k = nn.Conv2d(channels, channels, 1)
        self.v = nn.Conv2d(channels, channels, 1)
        self.proj_out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        n = self.norm(x)
        # Contiguous [B, HW, C], as ComfyUI's `pytorch_attention` makes them: a strided view keeps
        # SDPA on its math kernel on the CPU (an HW x HW score matrix: 1 GiB at 1024x1024 pixels).
        q, k, v = (p(n).flatten(2).transpose(1, 2).contiguous() for p in (self.q, self.k, self.v))  # [B, HW, C]
        # Contiguous, as ComfyUI's VAE attention hands it on: a channels-last view into the 1x1
        # proj_out takes other CPU kernels that round differently (see SpatialTransformer).
        out = attention(q, k, v, 1).transpose(1, 2).reshape(b, c, h, w).contiguous()
        return x + self.proj_out(out)


class _Downsample(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # LDM pads right/bottom only, then convolves without padding.
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class _Upsample(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class _Mid(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.block_1 = VAEResBlock(channels, channels)
        self.attn_1 = AttnBlock(channels)
        self.block_2 = VAEResBlock(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block_2(self.attn_1(self.block_1(x)))


class _Level(nn.Module):
    def __init__(self, blocks: list[nn.Module], resample: nn.Module | None, name: str) -> None:
        super().__init__()
        self.block = nn.ModuleList(blocks)
        if resample is not None:
            self.add_module(name, resample)


class Encoder(nn.Module):
    def __init__(self, config: VAEConfig) -> None:
        super().__init__()
        chans = [config.ch * m for m in config.ch_mult]
        self.conv_in = nn.Conv2d(config.in_channels, config.ch, 3, padding=1)
        self.down = nn.ModuleList()
        cin = config.ch
        for i, cout in enumerate(chans):
            blocks: list[nn.Module] = []
            for _ in range(config.num_res_blocks):
                blocks.append(VAEResBlock(cin, cout))
                cin = cout
            last = i == len(chans) - 1
            self.down.append(_Level(blocks, None if last else _Downsample(cin), "downsample"))
        self.mid = _Mid(cin)
        self.norm_out = _norm(cin)
        self.conv_out = nn.Conv2d(cin, 2 * config.z_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for level in self.down:
            for block in level.block:
                h = block(h)
            if hasattr(level, "downsample"):
                h = level.downsample(h)
        h = self.mid(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class Decoder(nn.Module):
    def __init__(self, config: VAEConfig) -> None:
        super().__init__()
        chans = [config.decoder_width * m for m in config.ch_mult]
        cin = chans[-1]
        self.conv_in = nn.Conv2d(config.z_channels, cin, 3, padding=1)
        self.mid = _Mid(cin)
        levels: list[nn.Module] = [nn.Module()] * len(chans)
        for i in reversed(range(len(chans))):
            blocks: list[nn.Module] = []
            for _ in range(config.num_res_blocks + 1):
                blocks.append(VAEResBlock(cin, chans[i]))
                cin = chans[i]
            levels[i] = _Level(blocks, _Upsample(cin) if i else None, "upsample")
        # Indexed by level (up.0 is the full-resolution level), run from the deepest.
        self.up = nn.ModuleList(levels)
        self.norm_out = _norm(cin)
        self.conv_out = nn.Conv2d(cin, config.out_ch, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.mid(self.conv_in(z))
        for level in reversed(self.up):
            for block in level.block:
                h = block(h)
            if hasattr(level, "upsample"):
                h = level.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class AutoencoderKL(nn.Module):
    """Encoder, decoder and (when `config.use_quant_conv`) the 1x1 (post-)quantisation
    convolutions of the KL autoencoder."""

    def __init__(self, config: VAEConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        if config.use_quant_conv:
            self.quant_conv = nn.Conv2d(2 * config.z_channels, 2 * config.embed_dim, 1)
            self.post_quant_conv = nn.Conv2d(config.embed_dim, config.z_channels, 1)

    @property
    def downscale_ratio(self) -> int:
        return self.config.downscale

    @property
    def latent_channels(self) -> int:
        return self.config.embed_dim

    def _dtype(self) -> torch.dtype:
        first = self.quant_conv if self.config.use_quant_conv else self.encoder.conv_in
        return first.weight.dtype

    def encode_moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, 3, H, W] in -1..1 -> (mean, logvar) each [B, embed_dim, H/f, W/f]."""
        moments = self.encoder(x.to(self._dtype()))  # [B, 2 * z_channels, H/f, W/f]
        if self.config.use_quant_conv:
            moments = self.quant_conv(moments)  # [B, 2 * embed_dim, H/f, W/f]
        mean, logvar = moments.chunk(2, dim=1)
        return mean, logvar

    def decode_raw(self, z: torch.Tensor) -> torch.Tensor:
        """z [B, embed_dim, h, w] -> x [B, 3, h*f, w*f] in about -1..1 (unclamped)."""
        z = z.to(self._dtype())
        if self.config.use_quant_conv:
            z = self.post_quant_conv(z)  # [B, z_channels, h, w]
        return self.decoder(z)

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        """IMAGE [B, H, W, C] in 0..1 -> latent mean [B, embed_dim, H/f, W/f] (float32).

        As ComfyUI does, a size that is not a multiple of the downscale factor is centre-cropped
        to the nearest multiple below it, and channels beyond the first three (alpha) are dropped.
        """
        if pixels.ndim != 4 or pixels.shape[-1] < 3:
            raise VAEConfigError(f"VAE.encode: expected pixels [B, H, W, C>=3], got {tuple(pixels.shape)}")
        f = self.downscale_ratio
        h, w = (pixels.shape[1] // f) * f, (pixels.shape[2] // f) * f
        if h == 0 or w == 0:
            raise VAEConfigError(f"VAE.encode: image {pixels.shape[2]}x{pixels.shape[1]} is smaller than {f}x{f}")
        if (h, w) != tuple(pixels.shape[1:3]):
            y0, x0 = (pixels.shape[1] % f) // 2, (pixels.shape[2] % f) // 2
            log.debug("VAE.encode: cropping %sx%s to %sx%s", pixels.shape[2], pixels.shape[1], w, h)
            pixels = pixels[:, y0:y0 + h, x0:x0 + w, :]
        x = pixels[..., :3].movedim(-1, 1) * 2.0 - 1.0  # [B, 3, H, W]
        mean, _ = self.encode_moments(x)
        return mean.float()

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """latent [B, embed_dim, h, w] -> IMAGE [B, h*f, w*f, 3] in 0..1 (float32)."""
        if latent.ndim != 4 or latent.shape[1] != self.config.embed_dim:
            raise VAEConfigError(
                f"VAE.decode: expected a latent [B, {self.config.embed_dim}, h, w], got {tuple(latent.shape)}")
        x = self.decode_raw(latent).float()
        return ((x + 1.0) / 2.0).clamp(0.0, 1.0).movedim(1, -1)

"""The Mage-VAE (Microsoft Mage, Mage-Flow's codec): a symmetric one-step diffusion codec, 16x down,
128 latent channels (anchored to Flux.2's VAE space: no packing, no normalisation, used raw).

- encode: the `DConvEncoder` predicts at t = 0 from a zero latent, conditioned on the image through
  a 16x16 patch embedding and two plain DiCo blocks; its 256 output channels are the posterior
  (mean, log-variance), the mean taken (deterministic, as ComfyUI);
- decode: the CoD decoder (three GroupNorm ResNet blocks with two 32x32-windowed self-attentions)
  turns the latent into per-patch conditioning features; the `DConvDenoiser` predicts the image at
  t = 0 from zero noise: DiCo blocks (depthwise-conv blocks with channel attention and adaLN from
  the timestep) over a bottleneck patch embedding, then a per-pixel MLP head inside each 16x16
  patch (DCT position features, adaLN residual MLPs from the patch's features, an RMS-normed
  linear to RGB).

Written here after the structure of ComfyUI's `comfy/ldm/mage_flow/vae.py` (module names and
arguments; the state-dict names are ComfyUI's `dconv_encoder.*` / `decoder_model.*`) and upstream's
release layout (Comfy-Org/Mage-Flow's `mage_flow_vae_bf16.safetensors`: `student.dconv_encoder.*` for
the encoder, `pipeline.*` for the decoder, plus `pipeline.y_embedder.encoder.*`, the Flux.2 anchor
encoder used in training only, not loaded): `vae_view` presents either under ComfyUI's names.
Widths and depths are read from the weights (`MageVAEConfig.detect_from_weights`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.vae import VAEConfigError

MARKER = "dconv_encoder.patch_cond_embed.weight"  # ComfyUI's names
RELEASE_ENCODER, RELEASE_DECODER = "student.dconv_encoder.", "pipeline."
RELEASE_DROPPED = "pipeline.y_embedder.encoder."  # the Flux.2 anchor encoder (training only)


@dataclass(frozen=True)
class MageVAEConfig:
    z_ch: int = 128
    patch_size: int = 16
    hidden: int = 384  # the encoder's and the denoiser's DiCo width
    head: int = 768  # the encoder's image-pathway width
    head_blocks: int = 2
    encoder_blocks: int = 21
    mlp_ratio: float = 4.0
    hidden_x: int = 32  # the per-pixel head's width
    cond_blocks: int = 21
    res_blocks: int = 3
    bottleneck: int = 128

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "MageVAEConfig":
        """Widths and depths from the shapes under `prefix` (ComfyUI's names); raises
        `VAEConfigError` naming a missing key."""
        def shape(key: str) -> tuple[int, ...]:
            try:
                return tuple(tensors[prefix + key].shape)
            except KeyError:
                raise VAEConfigError(f"Mage-VAE: key {prefix + key!r} is missing") from None

        def count(group: str) -> int:
            n = 0
            while f"{prefix}{group}.{n}.conv1.weight" in tensors or f"{prefix}{group}.{n}.in_ln.weight" in tensors:
                n += 1
            return n

        head, _, patch, _ = shape("dconv_encoder.patch_cond_embed.weight")
        hidden, z_ch = shape("dconv_encoder.z_proj.weight")[:2]
        ffn = shape("dconv_encoder.blocks.0.conv4.weight")[0]
        hidden_x = shape("decoder_model.x_embedder.embedder.0.weight")[0]
        bottleneck = shape("decoder_model.s_embedder.proj1.weight")[0]
        config = cls(z_ch=z_ch, patch_size=patch, hidden=hidden, head=head,
                     head_blocks=count("dconv_encoder.head_blocks"), encoder_blocks=count("dconv_encoder.blocks"),
                     mlp_ratio=ffn / hidden, hidden_x=hidden_x, cond_blocks=count("decoder_model.blocks"),
                     res_blocks=count("decoder_model.dec_net.res_blocks"), bottleneck=bottleneck)
        if shape("dconv_encoder.proj_out.weight")[0] != 2 * z_ch or shape("decoder_model.y_embedder.decoder.conv_in."
                                                                           "weight")[:2] != (hidden, bottleneck):
            raise VAEConfigError(f"Mage-VAE: inconsistent widths under {prefix!r} ({config})")
        return config


def is_mage_vae(names: Any) -> str | None:
    """"comfy" (ComfyUI's names), "release" (upstream's layout) or None."""
    if MARKER in names:
        return "comfy"
    if RELEASE_ENCODER + "patch_cond_embed.weight" in names and RELEASE_DECODER + "s_embedder.proj1.weight" in names:
        return "release"
    return None


def release_names(names: Any) -> dict[str, str]:
    """{ComfyUI's name: the release's name} for a release-layout file (the anchor encoder left out)."""
    out = {}
    for name in names:
        if name.startswith(RELEASE_ENCODER):
            out["dconv_encoder." + name[len(RELEASE_ENCODER):]] = name
        elif name.startswith(RELEASE_DECODER) and not name.startswith(RELEASE_DROPPED):
            out["decoder_model." + name[len(RELEASE_DECODER):]] = name
    return out


# --- blocks -------------------------------------------------------------------------------------------

def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x `[B, C, H, W]` with per-sample `[B, C]` shift / scale."""
    return x * (1 + scale[:, :, None, None]) + shift[:, :, None, None]


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of `[B, C, H, W]`."""

    def __init__(self, channels: int, affine: bool = True) -> None:
        super().__init__(channels, eps=1e-6, elementwise_affine=affine)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def _sinusoid(t: torch.Tensor, dim: int = 256, max_period: float = 10000.0) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.reshape(-1, 1).float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)  # [B, dim]


class TimestepEmbedder(nn.Module):
    """`mlp`: 256 sinusoids (cos first) -> width -> SiLU -> width."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(256, width), nn.SiLU(), nn.Linear(width, width))

    def forward(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.mlp(_sinusoid(t).to(dtype))


class _DiCoBody(nn.Module):
    """The DiCo block's convolutions: 1x1, 3x3 depthwise + GELU, channel attention, 1x1; the FFN."""

    def __init__(self, width: int, mlp_ratio: float, affine: bool) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 1)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, groups=width)
        self.conv3 = nn.Conv2d(width, width, 1)
        self.ca = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(width, width, 1), nn.Sigmoid())
        ffn = int(mlp_ratio * width)
        self.conv4 = nn.Conv2d(width, ffn, 1)
        self.conv5 = nn.Conv2d(ffn, width, 1)
        self.norm1 = LayerNorm2d(width, affine)
        self.norm2 = LayerNorm2d(width, affine)

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv2(self.conv1(x)))
        return self.conv3(x * self.ca(x))

    def ffn(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv5(F.gelu(self.conv4(x)))


class DiCoBlock(_DiCoBody):
    """With adaLN (`adaLN_modulation.1`: shift / scale / gate twice) from the timestep vector."""

    def __init__(self, width: int, mlp_ratio: float) -> None:
        super().__init__(width, mlp_ratio, affine=False)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 6 * width))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        s1, sc1, g1, s2, sc2, g2 = self.adaLN_modulation(c).chunk(6, dim=1)  # [B, C] each
        x = x + g1[:, :, None, None] * self.mix(_modulate(self.norm1(x), s1, sc1))
        return x + g2[:, :, None, None] * self.ffn(_modulate(self.norm2(x), s2, sc2))


class EncoderDiCoBlock(_DiCoBody):
    """Without adaLN, affine norms (the encoder's image pathway)."""

    def __init__(self, width: int, mlp_ratio: float) -> None:
        super().__init__(width, mlp_ratio, affine=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mix(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class DConvEncoder(nn.Module):
    def __init__(self, config: MageVAEConfig) -> None:
        super().__init__()
        c = config
        self.z_ch, self.patch_size = c.z_ch, c.patch_size
        self.patch_cond_embed = nn.Conv2d(3, c.head, c.patch_size, stride=c.patch_size)
        self.head_blocks = nn.ModuleList(EncoderDiCoBlock(c.head, c.mlp_ratio) for _ in range(c.head_blocks))
        self.proj_down = nn.Conv2d(c.head, c.hidden, 1)
        self.z_proj = nn.Conv2d(c.z_ch, c.hidden, 1)
        self.fuse_proj = nn.Conv2d(2 * c.hidden, c.hidden, 1)
        self.t_embedder = TimestepEmbedder(c.hidden)
        self.blocks = nn.ModuleList(DiCoBlock(c.hidden, c.mlp_ratio) for _ in range(c.encoder_blocks))
        self.norm_out = LayerNorm2d(c.hidden)
        self.proj_out = nn.Conv2d(c.hidden, 2 * c.z_ch, 1)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        """image `[B, 3, H, W]` in -1..1 -> (mean, logvar) `[B, 2 z, H/p, W/p]` (one step at t = 0)."""
        cond = self.patch_cond_embed(image)
        for block in self.head_blocks:
            cond = block(cond)
        cond = self.proj_down(cond)  # [B, hidden, h, w]
        z_t = torch.zeros(image.shape[0], self.z_ch, *cond.shape[2:], dtype=image.dtype, device=image.device)
        s = self.fuse_proj(torch.cat([cond, self.z_proj(z_t)], dim=1))
        c = self.t_embedder(torch.zeros(image.shape[0], device=image.device), image.dtype)
        for block in self.blocks:
            s = block(s, c)
        return self.proj_out(self.norm_out(s))


class ResnetBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(32, width, eps=1e-6)
        self.conv1 = nn.Conv2d(width, width, 3, padding=1)
        self.norm2 = nn.GroupNorm(32, width, eps=1e-6)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        return x + self.conv2(F.silu(self.norm2(h)))


class WindowAttention(nn.Module):
    """Single-head self-attention inside `window x window` tiles (the map replicate-padded to a
    multiple of the window), 1x1-conv q / k / v / out."""

    def __init__(self, width: int, window: int = 32) -> None:
        super().__init__()
        self.window = window
        self.norm = nn.GroupNorm(32, width, eps=1e-6)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(width, width, 1) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        b, c, height, width = h.shape
        d = self.window
        pad_h, pad_w = (-height) % d, (-width) % d

        def tiles(t: torch.Tensor) -> torch.Tensor:  # [B, C, H, W] -> [B * n, 1, d*d, C]
            if pad_h or pad_w:
                t = F.pad(t, (0, pad_w, 0, pad_h), mode="replicate")
            nh, nw = t.shape[2] // d, t.shape[3] // d
            return t.reshape(b, c, nh, d, nw, d).permute(0, 2, 4, 3, 5, 1).reshape(b * nh * nw, 1, d * d, c)

        out = F.scaled_dot_product_attention(tiles(self.q(h)), tiles(self.k(h)), tiles(self.v(h)))
        nh, nw = (height + pad_h) // d, (width + pad_w) // d
        out = out.reshape(b, nh, nw, d, d, c).permute(0, 5, 1, 3, 2, 4).reshape(b, c, nh * d, nw * d)
        return x + self.proj_out(out[:, :, :height, :width])


class CoDDecoder(nn.Module):
    """Latent -> the denoiser's per-patch conditioning (`block`: ResNet, attention, ResNet,
    attention, ResNet)."""

    def __init__(self, width: int, z_ch: int) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(z_ch, width, 3, padding=1)
        self.block = nn.Sequential(ResnetBlock(width), WindowAttention(width), ResnetBlock(width),
                                   WindowAttention(width), ResnetBlock(width))
        self.norm_out = nn.GroupNorm(32, width, eps=1e-6)
        self.conv_out = nn.Conv2d(width, width, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.conv_out(F.silu(self.norm_out(self.block(self.conv_in(z)))))


class YEmbedder(nn.Module):
    def __init__(self, width: int, z_ch: int) -> None:
        super().__init__()
        self.decoder = CoDDecoder(width, z_ch)


class BottleneckPatchEmbed(nn.Module):
    def __init__(self, patch: int, bottleneck: int, width: int) -> None:
        super().__init__()
        self.proj1 = nn.Conv2d(3, bottleneck, patch, stride=patch, bias=False)
        self.proj2 = nn.Conv2d(bottleneck + width, width, 1)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return self.proj2(torch.cat([self.proj1(x), cond], dim=1))


class NerfEmbedder(nn.Module):
    """Pixel features + 8x8 DCT-style position features of the pixel in its patch -> width."""

    def __init__(self, in_channels: int, width: int, max_freqs: int = 8) -> None:
        super().__init__()
        self.max_freqs = max_freqs
        self.embedder = nn.Sequential(nn.Linear(in_channels + max_freqs ** 2, width))

    def positions(self, patch: int, device: Any, dtype: torch.dtype) -> torch.Tensor:
        pos = torch.linspace(0, 1, patch, device=device, dtype=dtype)
        pos_y, pos_x = torch.meshgrid(pos, pos, indexing="ij")
        freqs = torch.linspace(0, self.max_freqs, self.max_freqs, device=device, dtype=dtype)
        fx, fy = freqs[None, :, None], freqs[None, None, :]
        dct = (torch.cos(pos_x.reshape(-1, 1, 1) * fx * math.pi) * torch.cos(pos_y.reshape(-1, 1, 1) * fy * math.pi)
               / (1 + fx * fy))
        return dct.reshape(1, patch * patch, self.max_freqs ** 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, p2, _ = x.shape
        dct = self.positions(int(round(p2 ** 0.5)), x.device, x.dtype).expand(n, -1, -1)
        return self.embedder(torch.cat([x, dct], dim=-1))


class MLPResBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.in_ln = nn.LayerNorm(width, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 3 * width))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.adaLN_modulation(y).chunk(3, dim=-1)
        return x + gate * self.mlp(self.in_ln(x) * (1 + scale) + shift)


class SimpleMLPAdaLN(nn.Module):
    def __init__(self, width_x: int, width: int, patch: int, res_blocks: int) -> None:
        super().__init__()
        self.patch = patch
        self.cond_embed = nn.Linear(width, patch * patch * width_x)
        self.input_proj = nn.Linear(width_x, width_x)
        self.res_blocks = nn.ModuleList(MLPResBlock(width_x) for _ in range(res_blocks))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """x `[N, p*p, wx]` (pixels of N patches), c `[N, width]` (the patches' features)."""
        x = self.input_proj(x)
        c = self.cond_embed(c).reshape(c.shape[0], self.patch * self.patch, -1)
        for block in self.res_blocks:
            x = block(x, c)
        return x


class NerfFinalLayer(nn.Module):
    def __init__(self, width: int, out_channels: int) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(width, eps=1e-6)
        self.linear = nn.Linear(width, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm(x))


class DConvDenoiser(nn.Module):
    def __init__(self, config: MageVAEConfig) -> None:
        super().__init__()
        c = config
        self.patch_size, self.hidden = c.patch_size, c.hidden
        self.t_embedder = TimestepEmbedder(c.hidden)
        self.y_embedder_x = nn.Conv2d(c.hidden, c.hidden_x * c.patch_size ** 2, 1)
        self.x_embedder = NerfEmbedder(3 + c.hidden_x, c.hidden_x)
        self.s_embedder = BottleneckPatchEmbed(c.patch_size, c.bottleneck, c.hidden)
        self.blocks = nn.ModuleList(DiCoBlock(c.hidden, c.mlp_ratio) for _ in range(c.cond_blocks))
        self.dec_net = SimpleMLPAdaLN(c.hidden_x, c.hidden, c.patch_size, c.res_blocks)
        self.final_layer = NerfFinalLayer(c.hidden_x, 3)
        self.y_embedder = YEmbedder(c.hidden, c.bottleneck)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """latent `[B, z, h, w]` -> image `[B, 3, h*p, w*p]` in about -1..1 (one step from zero noise
        at t = 0)."""
        p = self.patch_size
        b, _, h, w = z.shape
        cond = self.y_embedder.decoder(z)  # [B, hidden, h, w]
        noise = torch.zeros(b, 3, h * p, w * p, dtype=cond.dtype, device=cond.device)
        t = self.t_embedder(torch.zeros(b, device=z.device), cond.dtype)
        s = self.s_embedder(noise, cond)
        for block in self.blocks:
            s = block(s, t)
        length = h * w
        s = s.permute(0, 2, 3, 1).reshape(b * length, self.hidden)  # one row per patch
        pixels = F.unfold(noise, kernel_size=p, stride=p)  # [B, 3 p², L] channel-major
        x = torch.cat([pixels, self.y_embedder_x(cond).flatten(2)], dim=1)  # [B, (3 + wx) p², L]
        x = x.reshape(b, -1, p * p, length).permute(0, 3, 2, 1).flatten(0, 1)  # [B L, p², 3 + wx]
        x = self.final_layer(self.dec_net(self.x_embedder(x), s))  # [B L, p², 3]
        x = x.transpose(1, 2).reshape(b, length, -1).transpose(1, 2)  # [B, 3 p², L]
        return F.fold(x.contiguous(), (h * p, w * p), kernel_size=p, stride=p)


class MageVAE(nn.Module):
    """The codec (see the module docstring), VaePatcher's VAE interface."""

    latent_dim = 2

    def __init__(self, config: MageVAEConfig | None = None) -> None:
        super().__init__()
        self.config = config or MageVAEConfig()
        self.dconv_encoder = DConvEncoder(self.config)
        self.decoder_model = DConvDenoiser(self.config)

    @property
    def downscale_ratio(self) -> int:
        return self.config.patch_size

    @property
    def latent_channels(self) -> int:
        return self.config.z_ch

    def _dtype(self) -> torch.dtype:
        return self.dconv_encoder.proj_out.weight.dtype

    def encode_raw(self, x: torch.Tensor) -> torch.Tensor:
        """x `[B, 3, H, W]` in -1..1 -> the posterior mean `[B, z, H/16, W/16]`."""
        return self.dconv_encoder(x.to(self._dtype()))[:, :self.config.z_ch]

    def decode_raw(self, z: torch.Tensor) -> torch.Tensor:
        return self.decoder_model(z.to(self._dtype()))

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        """IMAGE `[B, H, W, C]` in 0..1 -> latent `[B, 128, H/16, W/16]` (float32); sizes that are
        not multiples of 16 centre-cropped, alpha dropped (as the other image VAEs here)."""
        if pixels.ndim != 4 or pixels.shape[-1] < 3:
            raise VAEConfigError(f"VAE.encode: expected pixels [B, H, W, C>=3], got {tuple(pixels.shape)}")
        f = self.downscale_ratio
        h, w = (pixels.shape[1] // f) * f, (pixels.shape[2] // f) * f
        if h == 0 or w == 0:
            raise VAEConfigError(f"VAE.encode: image {pixels.shape[2]}x{pixels.shape[1]} is smaller than {f}x{f}")
        y0, x0 = (pixels.shape[1] - h) // 2, (pixels.shape[2] - w) // 2
        pixels = pixels[:, y0:y0 + h, x0:x0 + w, :3]
        return self.encode_raw(pixels.movedim(-1, 1) * 2.0 - 1.0).float()

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """latent `[B, 128, h, w]` -> IMAGE `[B, 16h, 16w, 3]` in 0..1 (float32)."""
        if latent.ndim != 4 or latent.shape[1] != self.latent_channels:
            raise VAEConfigError(f"VAE.decode: expected a Mage-VAE latent [B, {self.latent_channels}, h, w], got "
                                 f"{tuple(latent.shape)}")
        return ((self.decode_raw(latent).float() + 1.0) / 2.0).clamp(0.0, 1.0).movedim(1, -1)


__all__ = ["MARKER", "MageVAE", "MageVAEConfig", "is_mage_vae", "release_names"]

"""Stable Video Diffusion's autoencoder: the image encoder with a temporal decoder.

Blattmann et al. 2023 ("Stable Video Diffusion", sec. 4: the decoder is fine-tuned with
temporal layers so that decoded frames do not flicker). Behaviour and names follow ComfyUI's
`comfy/ldm/modules/temporal_ae.py` (`VideoDecoder` in its default "conv-only" time mode) inside
`comfy/ldm/models/autoencoder.py: AutoencodingEngine`, which load SGM's `first_stage_model.*`
tensors unchanged:

- every decoder ResnetBlock is a `VideoVAEResBlock`: the image block per frame, then a
  `time_stack` ResBlock of `(3, 1, 1)` 3-D convolutions over frames (no timestep input), blended
  as `sigmoid(mix_factor) * temporal + (1 - sigmoid(mix_factor)) * spatial` (note the order:
  the reverse of the UNet's `AlphaBlender`);
- the output convolution is an `AE3DConv`: the 2-D `conv_out` then `conv_out.time_mix_conv`, a
  3-D convolution over frames; the middle attention stays the image one;
- the engine has no `quant_conv` / `post_quant_conv`; encoding takes the mean half of the
  encoder's moments (the regulariser's mode), as the image VAE does.

A decoded batch is one video: all its rows are the frames the temporal layers see together
(ComfyUI decodes in chunks whose size depends on free memory; on the CPU that is the whole batch).
The encoder is `comfy_core.models.vae.Encoder`; pixel conventions are `AutoencoderKL`'s.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.vae import AttnBlock, AutoencoderKL, Encoder, VAEConfig, VAEConfigError, VAEResBlock
from comfy_core.models.video_blocks import TemporalResBlock, from_video, to_video
from comfy_core.models.weight_shapes import shape_reader

KERNEL = (3, 1, 1)


def video_vae_config(tensors: Mapping[str, Any], prefix: str = "first_stage_model.") -> VAEConfig:
    """Widths, levels and res blocks of a temporal-decoder VAE under `prefix` (names and shapes).

    Raises `VAEConfigError` when it is not one (no `decoder.mid.block_1.mix_factor`) or is incomplete."""
    shape = shape_reader(tensors, prefix, VAEConfigError, "video VAE")
    shape("decoder.mid.block_1.mix_factor")
    conv_in = shape("encoder.conv_in.weight")
    ch, in_channels = conv_in[0], conv_in[1]
    pattern = re.compile(re.escape(prefix) + r"encoder\.down\.(\d+)\.block\.(\d+)\.")
    found: dict[int, set[int]] = {}
    for name in tensors:
        m = pattern.match(name)
        if m:
            found.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    if not found:
        raise VAEConfigError(f"video VAE under {prefix!r} has no encoder.down blocks")
    num_res_blocks = len(found[0])
    ch_mult = []
    for level in range(max(found) + 1):
        if found.get(level) != set(range(num_res_blocks)):
            raise VAEConfigError(f"video VAE under {prefix!r}: encoder.down.{level} has blocks "
                                 f"{sorted(found.get(level, ()))}, expected 0..{num_res_blocks - 1}")
        ch_mult.append(shape(f"encoder.down.{level}.block.{num_res_blocks - 1}.conv2.weight")[0] // ch)
    z_channels = shape("encoder.conv_out.weight")[0] // 2
    return VAEConfig(ch=ch, ch_mult=tuple(ch_mult), num_res_blocks=num_res_blocks, z_channels=z_channels,
                     embed_dim=z_channels, in_channels=in_channels, out_ch=shape("decoder.conv_out.weight")[0])


class VideoVAEResBlock(VAEResBlock):
    """The image ResnetBlock per frame, blended with a temporal ResBlock over frames."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(cin, cout)
        self.time_stack = TemporalResBlock(cout, None, KERNEL)
        self.mix_factor = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor, frames: int = 1) -> torch.Tensor:  # type: ignore[override]
        spatial = to_video(super().forward(x), frames)  # [B, C, T, H, W]
        temporal = self.time_stack(spatial)
        alpha = torch.sigmoid(self.mix_factor).to(spatial.dtype)
        return from_video(alpha * temporal + (1.0 - alpha) * spatial)


class AE3DConv(nn.Conv2d):
    """A 2-D convolution per frame, then a 3-D convolution over frames (`time_mix_conv`)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(cin, cout, 3, padding=1)
        self.time_mix_conv = nn.Conv3d(cout, cout, KERNEL, padding=tuple(k // 2 for k in KERNEL))

    def forward(self, x: torch.Tensor, frames: int = 1) -> torch.Tensor:  # type: ignore[override]
        return from_video(self.time_mix_conv(to_video(super().forward(x), frames)))


class _VideoMid(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.block_1 = VideoVAEResBlock(channels, channels)
        self.attn_1 = AttnBlock(channels)
        self.block_2 = VideoVAEResBlock(channels, channels)

    def forward(self, x: torch.Tensor, frames: int) -> torch.Tensor:
        return self.block_2(self.attn_1(self.block_1(x, frames)), frames)


class _Upsample(nn.Module):
    """Nearest 2x then a 3x3 convolution (parameter `conv`), as the image decoder's."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class _VideoLevel(nn.Module):
    def __init__(self, blocks: list[nn.Module], upsample: nn.Module | None) -> None:
        super().__init__()
        self.block = nn.ModuleList(blocks)
        if upsample is not None:
            self.upsample = upsample


class VideoDecoder(nn.Module):
    """The image decoder with temporal ResBlocks and a temporal output convolution."""

    def __init__(self, config: VAEConfig) -> None:
        super().__init__()
        chans = [config.ch * m for m in config.ch_mult]
        cin = chans[-1]
        self.conv_in = nn.Conv2d(config.z_channels, cin, 3, padding=1)
        self.mid = _VideoMid(cin)
        levels: list[nn.Module] = [nn.Module()] * len(chans)
        for i in reversed(range(len(chans))):
            blocks: list[nn.Module] = []
            for _ in range(config.num_res_blocks + 1):
                blocks.append(VideoVAEResBlock(cin, chans[i]))
                cin = chans[i]
            levels[i] = _VideoLevel(blocks, _Upsample(cin) if i else None)
        self.up = nn.ModuleList(levels)  # up.0 is the full-resolution level, run last
        self.norm_out = nn.GroupNorm(32, cin, eps=1e-6)
        self.conv_out = AE3DConv(cin, config.out_ch)

    def forward(self, z: torch.Tensor, frames: int | None = None) -> torch.Tensor:
        """z [T, z_channels, h, w] (one video, or B*T rows with `frames=T`) -> [T, out_ch, H, W]."""
        frames = z.shape[0] if frames is None else frames
        h = self.mid(self.conv_in(z), frames)
        for level in reversed(self.up):
            for block in level.block:
                h = block(h, frames)
            if hasattr(level, "upsample"):
                h = level.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)), frames)


class VideoAutoencoder(AutoencoderKL):
    """SVD's first stage: `AutoencoderKL`'s interface (`encode`, `decode`, `encode_moments`,
    `decode_raw`, `config`) over `encoder` + `VideoDecoder`, without quantisation convolutions."""

    def __init__(self, config: VAEConfig) -> None:
        if config.embed_dim != config.z_channels:
            raise VAEConfigError(f"video VAE: no quantisation convolutions, so embed_dim ({config.embed_dim}) "
                                 f"must equal z_channels ({config.z_channels})")
        nn.Module.__init__(self)  # AutoencoderKL's own modules (quant convs) do not exist here
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = VideoDecoder(config)

    def _dtype(self) -> torch.dtype:
        return self.encoder.conv_in.weight.dtype

    def encode_moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, 3, H, W] in -1..1 -> (mean, logvar) each [B, z, H/f, W/f]."""
        mean, logvar = self.encoder(x.to(self._dtype())).chunk(2, dim=1)
        return mean, logvar

    def decode_raw(self, z: torch.Tensor) -> torch.Tensor:
        """z [T, z, h, w], the frames of one video -> x [T, 3, h*f, w*f] in about -1..1."""
        return self.decoder(z.to(self._dtype()))

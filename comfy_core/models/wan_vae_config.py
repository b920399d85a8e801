"""The architecture of a Wan video VAE (2.1 or 2.2), read from tensor names and shapes.

ComfyUI (`comfy/sd.py: VAE`) recognises a Wan VAE by `decoder.middle.0.residual.0.gamma` and the
Wan 2.2 one by `decoder.upsamples.0.upsamples.0.residual.2.weight` (its residual up blocks), then
builds fixed configurations (2.1: base width 96, 16 latent channels; 2.2: encoder 160, decoder
256, 48 latent channels, 2x2 patches). Here every number is read from the weights instead, so
the tiny test files and any width build through the same path:

- base width and input channels from `encoder.conv1.weight` `[dim, 3 * p * p, 3, 3, 3]` (the
  patch size `p` follows: 1 for 2.1, 2 for 2.2; `4 * p * p` is an RGBA VAE, Qwen-Image-Layered's,
  diffusers' `AutoencoderKLQwenImage(input_channels=4)`), latent channels from `conv2.weight`;
- levels, residual blocks per level, widths and which downsamples are temporal from the encoder's
  blocks (`encoder.downsamples.N` flat in 2.1, `encoder.downsamples.L.downsamples.N` in 2.2;
  a `time_conv` makes a resample temporal); the decoder mirrors the encoder, its width from
  `decoder.conv1.weight`. A file whose decoder does not fit fails to load with the tensor named.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from comfy_core.models.vae import VAEConfigError
from comfy_core.models.weight_shapes import numbered_children, shape_reader

# ComfyUI's markers (comfy/sd.py: VAE): any Wan VAE; and Wan 2.2's residual up blocks.
WAN_MARKER = "decoder.middle.0.residual.0.gamma"
WAN22_MARKER = "decoder.upsamples.0.upsamples.0.residual.2.weight"


@dataclass(frozen=True)
class WanVAEConfig:
    """Defaults: Wan 2.1's VAE (`wan_2.1_vae.safetensors`); `WAN22_VAE` is Wan 2.2's."""

    dim: int = 96
    decoder_dim: int = 96
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temporal_downsample: tuple[bool, ...] = (False, True, True)
    patch_size: int = 1
    # Wan 2.2: residual down/up blocks with parameter-free average/duplicate shortcuts.
    residual: bool = False
    # Pixel channels: 3 (RGB) or 4 (RGBA: Qwen-Image-Layered's VAE encodes and decodes alpha).
    rgb_channels: int = 3
    # Frames each 3x3 convolution spans (ComfyUI's `temporal_kernel`): 3, or 1 in Qwen-Image 2.1's
    # image VAE (the Wan 2.2 layout with `[out, in, 1, 3, 3]` kernels, images only).
    temporal_kernel: int = 3

    def __post_init__(self) -> None:
        if len(self.temporal_downsample) != len(self.dim_mult) - 1:
            raise VAEConfigError(f"Wan VAE: {len(self.dim_mult)} levels need {len(self.dim_mult) - 1} "
                                 f"temporal_downsample flags, got {len(self.temporal_downsample)}")
        if (self.patch_size < 1 or self.num_res_blocks < 1 or min(self.dim_mult) < 1 or self.rgb_channels not in (3, 4)
                or self.temporal_kernel not in (1, 3)):
            raise VAEConfigError(f"Wan VAE: invalid configuration {self}")

    @property
    def spatial_ratio(self) -> int:
        """Pixels per latent pixel along each side (8 for 2.1, 16 for 2.2)."""
        return 2 ** (len(self.dim_mult) - 1) * self.patch_size

    @property
    def temporal_ratio(self) -> int:
        """Frames per latent frame after the first (4)."""
        return 2 ** sum(self.temporal_downsample)

    @property
    def image_channels(self) -> int:
        """Channels the encoder takes and the decoder gives after (un)patchifying RGB (RGBA)."""
        return self.rgb_channels * self.patch_size * self.patch_size

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "WanVAEConfig":
        """The configuration of the Wan VAE under `prefix` (original names), from names and shapes.

        Raises `VAEConfigError` when it is not a Wan VAE or its encoder is incomplete."""
        shape = shape_reader(tensors, prefix, VAEConfigError, "Wan VAE")
        shape(WAN_MARKER)
        conv1 = shape("encoder.conv1.weight")
        dim, in_channels = conv1[0], conv1[1]
        if len(conv1) != 5:
            raise VAEConfigError(f"Wan VAE: encoder.conv1 must be a 3-D convolution, got shape {conv1}")
        temporal_kernel = conv1[2]
        for rgb in (3, 4):  # RGB first: 12 is Wan 2.2's 3 x 2 x 2, never RGBA
            patch = math.isqrt(in_channels // rgb)
            if patch and rgb * patch * patch == in_channels:
                break
        else:
            raise VAEConfigError(f"Wan VAE: encoder.conv1 takes {in_channels} channels, not 3 * p * p (RGB) or "
                                 f"4 * p * p (RGBA)")
        z_dim = shape("conv2.weight")[0]
        residual = f"{prefix}{WAN22_MARKER}" in tensors
        levels = _encoder_levels(tensors, prefix, residual)
        widths = [blocks[-1] for blocks, _ in levels]
        counts = {len(blocks) for blocks, _ in levels}
        if len(counts) != 1:
            raise VAEConfigError(f"Wan VAE: encoder levels have different numbers of residual blocks {sorted(counts)}")
        if any(width % dim for width in widths):
            raise VAEConfigError(f"Wan VAE: encoder widths {widths} are not multiples of the base width {dim}")
        dim_mult = tuple(width // dim for width in widths)
        decoder_in = shape("decoder.conv1.weight")[0]
        if decoder_in % dim_mult[-1]:
            raise VAEConfigError(f"Wan VAE: decoder.conv1 has {decoder_in} channels, not a multiple of {dim_mult[-1]}")
        return cls(dim=dim, decoder_dim=decoder_in // dim_mult[-1], z_dim=z_dim, dim_mult=dim_mult,
                   num_res_blocks=counts.pop(), temporal_downsample=tuple(t for _, t in levels[:-1]),
                   patch_size=patch, residual=residual, rgb_channels=rgb, temporal_kernel=temporal_kernel)


WAN21_VAE = WanVAEConfig()
WAN22_VAE = WanVAEConfig(dim=160, decoder_dim=256, z_dim=48, patch_size=2, residual=True)


def _classify(tensors: Mapping[str, Any], base: str, index: int, names: set[str]) -> tuple[str, Any]:
    """("res", out width) | ("resample", temporal?) for block `base.index`."""
    if "residual.2.weight" in names:
        return "res", tuple(tensors[f"{base}.{index}.residual.2.weight"].shape)[0]
    if "resample.1.weight" in names:
        return "resample", "time_conv.weight" in names
    if "to_qkv.weight" in names:
        raise VAEConfigError(f"Wan VAE: attention inside the encoder levels ({base}.{index}) is not supported")
    raise VAEConfigError(f"Wan VAE: unrecognised encoder block {base}.{index} ({sorted(names)[:3]})")


def _encoder_levels(tensors: Mapping[str, Any], prefix: str, residual: bool) -> list[tuple[list[int], bool | None]]:
    """[(residual block widths, temporal downsample after it or None for the last level)]."""
    base = f"{prefix}encoder.downsamples"
    if residual:
        groups = [(f"{base}.{level}.downsamples", numbered_children(tensors, f"{base}.{level}.downsamples."))
                  for level in sorted(numbered_children(tensors, base + "."))]
    else:
        groups = [(base, numbered_children(tensors, base + "."))]
    levels: list[tuple[list[int], bool | None]] = []
    for group_base, children in groups:
        if not children or sorted(children) != list(range(len(children))):
            raise VAEConfigError(f"Wan VAE: {group_base} blocks are missing or not numbered 0..N "
                                 f"({sorted(children)})")
        widths: list[int] = []
        for index in sorted(children):
            kind, value = _classify(tensors, group_base, index, children[index])
            if kind == "res":
                widths.append(value)
            else:
                if not widths:
                    raise VAEConfigError(f"Wan VAE: {group_base}.{index} resamples a level without residual blocks")
                levels.append((widths, value))
                widths = []
        if widths:
            levels.append((widths, None))
    if not levels or levels[-1][1] is not None:
        raise VAEConfigError(f"Wan VAE under {prefix!r}: the encoder's last level must not downsample")
    if any(t is None for _, t in levels[:-1]):
        raise VAEConfigError(f"Wan VAE under {prefix!r}: only the last encoder level may omit its downsample")
    return levels

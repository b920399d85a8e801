"""The TAESD decoder ("Tiny AutoEncoder for Stable Diffusion", madebyollin/taesd): a small
convolutional decoder trained to map SD latents to images, used for live previews; and its encoder
and the pair (`TAESDEncoder`, `TAESD`), which packs build.

Architecture and state-dict names as in the published `taesd_decoder.*` / `taesdxl_decoder.*`
(4 latent channels) and `taesd3_decoder.*` / `taef1_decoder.*` (16, for SD3 and Flux.1) files
(read from ComfyUI's `comfy/taesd/taesd.py` and madebyollin's `taesd.py`; written here):
a plain `nn.Sequential` whose indices are the key prefixes,

    0 clamp (tanh(x / 3) * 3)   1 conv(latent, w)   2 ReLU   3-5 Block x3
    6 upsample x2   7 conv(w, w, no bias)   8-10 Block x3
    11 upsample x2  12 conv(w, w, no bias)  13-15 Block x3
    16 upsample x2  17 conv(w, w, no bias)  18 Block        19 conv(w, 3)

with 3x3 convolutions (padding 1), width w = 64 in the real files (a loaded file's latent
channels and width are read from its `1.weight`, so one class serves all four), and `Block` =
`ReLU(conv(ReLU(conv(ReLU(conv(x))))) + x)` (keys `N.conv.0`, `N.conv.2`, `N.conv.4`; the skip is
the identity since every block keeps the width). The output is an image in [0, 1] (three 8x
upsamplings: a [B, C, h, w] latent gives [B, 3, 8h, 8w]); `decode` maps it to [-1, 1] as ComfyUI's
`TAESD.decode` does. Inputs are the diffusion model's latents (scaled, `LatentFormat.process_in`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from comfy_core.checkpoint.meta_build import meta_build

TAESD_WIDTH = 64  # channels of the published decoders


class TAESDError(ValueError):
    """A file that is not a TAESD decoder (names the file and what is wrong)."""


class Clamp(nn.Module):
    """Soft clamp of the latent to (-3, 3)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x / 3) * 3


def _conv(n_in: int, n_out: int, bias: bool = True) -> nn.Conv2d:
    return nn.Conv2d(n_in, n_out, 3, padding=1, bias=bias)


def conv(n_in: int, n_out: int, **kwargs: Any) -> nn.Conv2d:
    """A 3x3 convolution with padding 1 (ComfyUI's `comfy.taesd.taesd.conv`; kwargs to Conv2d)."""
    return nn.Conv2d(n_in, n_out, 3, padding=1, **kwargs)


class Block(nn.Module):
    """Three 3x3 convolutions with ReLUs between, plus the input (a residual block).

    `Block(width)`, or `Block(n_in, n_out)` as ComfyUI's: a width change goes through a 1x1
    convolution on the skip path (`skip`); an unchanged width keeps the identity."""

    def __init__(self, n_in: int, n_out: int | None = None) -> None:
        super().__init__()
        n_out = n_in if n_out is None else n_out
        self.conv = nn.Sequential(_conv(n_in, n_out), nn.ReLU(), _conv(n_out, n_out), nn.ReLU(),
                                  _conv(n_out, n_out))
        self.skip = nn.Conv2d(n_in, n_out, 1, bias=False) if n_in != n_out else nn.Identity()
        self.fuse = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fuse(self.conv(x) + self.skip(x))


class TAESDDecoder(nn.Sequential):
    """[B, latent_channels, h, w] model-space latent -> [B, 3, 8h, 8w] image in [0, 1]."""

    def __init__(self, latent_channels: int = 4, width: int = TAESD_WIDTH) -> None:
        layers: list[nn.Module] = [Clamp(), _conv(latent_channels, width), nn.ReLU()]
        for _stage in range(3):
            layers += [Block(width), Block(width), Block(width), nn.Upsample(scale_factor=2),
                       _conv(width, width, bias=False)]
        layers += [Block(width), _conv(width, 3)]
        super().__init__(*layers)
        self.latent_channels = latent_channels
        self.width = width

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """Model-space latent -> image in [-1, 1] ([B, 3, 8h, 8w]), as ComfyUI's `TAESD.decode`
        (whose latent shift 0 and scale 1 are the identity when only a decoder is loaded)."""
        return self(latent).sub(0.5).mul(2)


class TAESDEncoder(nn.Sequential):
    """[B, 3, 8h, 8w] image in [0, 1] -> [B, latent_channels, h, w] model-space latent: the
    published `taesd_encoder.*` layout (indices are the key prefixes): conv(3, w), Block, then
    three times a stride-2 conv (no bias) and three Blocks, then conv(w, latent_channels)."""

    def __init__(self, latent_channels: int = 4, width: int = TAESD_WIDTH) -> None:
        layers: list[nn.Module] = [_conv(3, width), Block(width)]
        for _stage in range(3):
            layers += [nn.Conv2d(width, width, 3, stride=2, padding=1, bias=False),
                       Block(width), Block(width), Block(width)]
        layers += [_conv(width, latent_channels)]
        super().__init__(*layers)
        self.latent_channels = latent_channels
        self.width = width


class TAESD(nn.Module):
    """The TAESD encoder and decoder together (ComfyUI's `comfy.taesd.taesd.TAESD`): `encode` maps an
    image in [-1, 1] to a model-space latent, `decode` back; `vae_scale` / `vae_shift` (1 and 0,
    parameters so a file may set them) map the tiny autoencoder's space onto the model's.
    `encoder_path` / `decoder_path`: the published files, read into the two halves."""

    latent_magnitude = 3
    latent_shift = 0.5

    def __init__(self, encoder_path: str | os.PathLike | None = None, decoder_path: str | os.PathLike | None = None,
                 latent_channels: int = 4) -> None:
        super().__init__()
        self.taesd_encoder = (load_taesd_encoder(encoder_path) if encoder_path is not None
                              else TAESDEncoder(latent_channels))
        self.taesd_decoder = (load_taesd_decoder(decoder_path) if decoder_path is not None
                              else TAESDDecoder(latent_channels))
        for half, path in ((self.taesd_encoder, encoder_path), (self.taesd_decoder, decoder_path)):
            if half.latent_channels != latent_channels:
                raise TAESDError(f"{path}: a TAESD file for {half.latent_channels} latent channels, "
                                 f"asked for {latent_channels}")
        self.vae_scale = nn.Parameter(torch.tensor(1.0))
        self.vae_shift = nn.Parameter(torch.tensor(0.0))

    @staticmethod
    def scale_latents(x: torch.Tensor) -> torch.Tensor:
        """Raw latents -> [0, 1] (for storing them as an image)."""
        return x.div(2 * TAESD.latent_magnitude).add(TAESD.latent_shift).clamp(0, 1)

    @staticmethod
    def unscale_latents(x: torch.Tensor) -> torch.Tensor:
        """[0, 1] -> raw latents."""
        return x.sub(TAESD.latent_shift).mul(2 * TAESD.latent_magnitude)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return self.taesd_decoder((x - self.vae_shift) * self.vae_scale).sub(0.5).mul(2)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.taesd_encoder(x * 0.5 + 0.5) / self.vae_scale + self.vae_shift


def _read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix in (".safetensors", ".sft"):
        from comfy_core.checkpoint.reader import load_tensor_file

        return load_tensor_file(path)[0]
    loaded = torch.load(str(path), map_location="cpu", weights_only=True)
    if isinstance(loaded, dict) and isinstance(loaded.get("state_dict"), dict):
        loaded = loaded["state_dict"]
    if not isinstance(loaded, dict):
        raise TAESDError(f"{path}: expected a state dict, found {type(loaded).__name__}")
    return loaded


def _load_half(path: Path, state: dict[str, torch.Tensor], half: type, latent_channels: int, width: int,
               device: torch.device | str | None) -> Any:
    """A TAESD encoder or decoder of the file's sizes holding `state`, frozen, in fp32 on `device`
    (fp32 whatever the file holds, as ComfyUI loads into an fp32 module; the halves are small)."""
    with meta_build():
        module = half(latent_channels=latent_channels, width=width)
    try:
        module.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise TAESDError(f"{path}: does not match the {half.__name__} layout: {exc}") from exc
    module.requires_grad_(False).eval()
    return module.to(device=device, dtype=torch.float32)


def load_taesd_encoder(path: str | os.PathLike, device: torch.device | str | None = None) -> TAESDEncoder:
    """A TAESD encoder from a `taesd_encoder.*` (or `taesdxl_` / `taesd3_` / `taef1_`) file, with
    the width and latent channels the file has, in fp32 on `device` (default: the CPU)."""
    path = Path(path)
    state = _read_state_dict(path)
    first, last = state.get("0.weight"), state.get("14.weight")
    if first is None or last is None or first.ndim != 4 or last.ndim != 4:
        raise TAESDError(f"{path}: not a TAESD encoder (no 4-d '0.weight' / '14.weight'; keys start {sorted(state)[:3]})")
    return _load_half(path, state, TAESDEncoder, int(last.shape[0]), int(first.shape[0]), device)


def load_taesd_decoder(path: str | os.PathLike, device: torch.device | str | None = None) -> TAESDDecoder:
    """A TAESD decoder from a `taesd_decoder.*` / `taesdxl_decoder.*` / `taesd3_decoder.*` /
    `taef1_decoder.*` file (.safetensors or a torch pickle such as the published `.pth`), with
    the latent channels and width the file has, in fp32 on `device` (default: the CPU)."""
    path = Path(path)
    state = _read_state_dict(path)
    first = state.get("1.weight")
    if first is None or first.ndim != 4:
        raise TAESDError(f"{path}: not a TAESD decoder (no 4-d '1.weight'; keys start {sorted(state)[:3]})")
    return _load_half(path, state, TAESDDecoder, int(first.shape[1]), int(first.shape[0]), device)

"""Which dtype and device each component is loaded in.

Defaults follow ComfyUI on the same hardware: on the CPU the UNet and VAE run in float32 and the
text encoders store float16 weights (computing in float32 inside the encoder); on CUDA the UNet
runs in float16, the VAE in bfloat16 where supported (SD VAEs overflow in float16) else float32.
Explicit choices (the `--force-fp16`, `--bf16-unet`, `--fp16-vae`, `--fp32-vae`, `--fp32-text-enc`
style options of the command line) override the defaults; nothing is chosen from a global.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

UNET = "unet"
VAE = "vae"
TEXT = "text"
COMPONENTS = (UNET, VAE, TEXT)


class DtypePolicyError(ValueError):
    """An impossible dtype request (unknown component, non-floating dtype)."""


@dataclass(frozen=True)
class DtypePolicy:
    """Per-component dtype overrides; None means the device default (see the module docstring)."""

    device: str = "cpu"
    unet: torch.dtype | None = None
    vae: torch.dtype | None = None
    text: torch.dtype | None = None

    def __post_init__(self) -> None:
        for name in COMPONENTS:
            value = getattr(self, name)
            if value is not None and not (isinstance(value, torch.dtype) and value.is_floating_point):
                raise DtypePolicyError(f"DtypePolicy.{name}: expected a floating torch.dtype or None, got {value!r}")

    @classmethod
    def from_flags(cls, device: str = "cpu", *, force_fp16: bool = False, force_fp32: bool = False,
                   bf16_unet: bool = False, fp16_unet: bool = False, fp16_vae: bool = False,
                   bf16_vae: bool = False, fp32_vae: bool = False, fp32_text_enc: bool = False,
                   fp16_text_enc: bool = False) -> "DtypePolicy":
        """The policy for ComfyUI-style command-line flags."""
        if force_fp16 and force_fp32:
            raise DtypePolicyError("--force-fp16 and --force-fp32 cannot both be set")
        unet = torch.float16 if (force_fp16 or fp16_unet) else torch.bfloat16 if bf16_unet else \
            torch.float32 if force_fp32 else None
        vae = torch.float16 if fp16_vae else torch.bfloat16 if bf16_vae else \
            torch.float32 if (fp32_vae or force_fp32) else None
        text = torch.float32 if (fp32_text_enc or force_fp32) else torch.float16 if fp16_text_enc else None
        return cls(device=device, unet=unet, vae=vae, text=text)

    def dtype_for(self, component: str) -> torch.dtype:
        if component not in COMPONENTS:
            raise DtypePolicyError(f"unknown component {component!r}; expected one of {COMPONENTS}")
        chosen = getattr(self, component)
        if chosen is not None:
            return chosen
        cuda = torch.device(self.device).type == "cuda"
        if component == UNET:
            return torch.float16 if cuda else torch.float32
        if component == VAE:
            return torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float32
        return torch.float16

"""ComfyUI's `comfy.ldm.genmo` (Genmo's Mochi 1: the asymmetric joint DiT `AsymmDiTJoint` and its
video VAE), a family this engine does not implement: the network classes are importable,
subclassable stand-ins (compat/unsupported_networks.py), so a pack's
`isinstance(model, comfy.ldm.genmo.joint_model.asymm_models_joint.AsymmDiTJoint)` is a plain False
for every network loaded here (ComfyUI_Patches_ll's cache patches ask so of every model), and
building one raises `UnsupportedNetworkError`. The modulation helpers are today's ComfyUI's maths
(`comfy/ldm/genmo/joint_model/asymm_models_joint.py`), written here."""
from __future__ import annotations

from typing import Any

import torch

from compat.unsupported_networks import UnsupportedNetwork


def modulated_rmsnorm(x: torch.Tensor, scale: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMS-normalise `x` [B, N, D] over D, then scale by `1 + scale` [B, D] per sample."""
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return normed * (1 + scale.unsqueeze(1))


def residual_tanh_gated_rmsnorm(x: torch.Tensor, x_res: torch.Tensor, gate: torch.Tensor,
                                eps: float = 1e-6) -> torch.Tensor:
    """`x + tanh(gate) * rms_norm(x_res)`, the gate [B, D] per sample."""
    normed = x_res * torch.rsqrt(x_res.pow(2).mean(-1, keepdim=True) + eps)
    return x + normed * torch.tanh(gate).unsqueeze(1)


class _Mochi(UnsupportedNetwork):
    family = "Mochi (Genmo)"


class AsymmetricAttention(_Mochi):
    """Mochi's joint attention (not implemented here)."""


class AsymmetricJointBlock(_Mochi):
    """Mochi's joint block (not implemented here)."""


class FinalLayer(_Mochi):
    """Mochi's output layer (not implemented here)."""


class AsymmDiTJoint(_Mochi):
    """Mochi's DiT (not implemented here)."""


class VideoVAE(_Mochi):
    """Mochi's video VAE (not implemented here)."""


class Encoder(_Mochi):
    """Mochi's VAE encoder (not implemented here)."""


class Decoder(_Mochi):
    """Mochi's VAE decoder (not implemented here)."""


class LatentDistribution:
    """The VAE encoder's Gaussian: `sample()` draws from it, `mode()` is the mean."""

    def __init__(self, mean: torch.Tensor, logvar: torch.Tensor) -> None:
        self.mean, self.logvar = mean, logvar

    def sample(self, temperature: float = 1.0, generator: Any = None, noise: Any = None) -> torch.Tensor:
        if temperature == 0.0:
            return self.mean
        if noise is None:
            noise = torch.randn(self.mean.shape, device=self.mean.device, dtype=self.mean.dtype, generator=generator)
        return noise * torch.exp(self.logvar * 0.5) * temperature + self.mean

    def mode(self) -> torch.Tensor:
        return self.mean


__all__ = ["AsymmDiTJoint", "AsymmetricAttention", "AsymmetricJointBlock", "Decoder", "Encoder", "FinalLayer",
           "LatentDistribution", "VideoVAE", "modulated_rmsnorm", "residual_tanh_gated_rmsnorm"]

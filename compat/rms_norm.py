"""ComfyUI's `comfy.rmsnorm`: root-mean-square layer normalisation (Zhang & Sennrich 2019,
"Root Mean Square Layer Normalization", arXiv 1910.07467) over the last dimension, with an
optional weight cast to the input's dtype and device. `RMSNorm` is torch's module, as there."""
from __future__ import annotations

import torch

RMSNorm = torch.nn.RMSNorm


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """`x / sqrt(mean(x^2) + eps)` over the last dimension [..., C], times `weight` [C] if given."""
    if weight is None:
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), eps=eps)
    return torch.nn.functional.rms_norm(x, tuple(weight.shape), weight=weight.to(dtype=x.dtype, device=x.device),
                                        eps=eps)

"""ComfyUI's `comfy.ldm.aura.mmdit` (AuraFlow's MMDiT), a family this engine does not implement:
its network classes are importable, subclassable stand-ins (compat/unsupported_networks.py), so
packs that import or subclass them at start-up (RES4LYF) load; building one raises
`UnsupportedNetworkError`. The two helpers are ComfyUI's maths."""
from __future__ import annotations

from typing import Any

from compat.unsupported_networks import UnsupportedNetwork


def modulate(x: Any, shift: Any, scale: Any) -> Any:
    """adaLN modulation: `x * (1 + scale) + shift`, the per-sample vectors over the token axis."""
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def find_multiple(n: int, k: int) -> int:
    """The least multiple of `k` that is >= `n`."""
    return n if n % k == 0 else n + k - (n % k)


class _Aura(UnsupportedNetwork):
    family = "AuraFlow"


class MLP(_Aura):
    """AuraFlow's feed-forward (not implemented here)."""


class MultiHeadLayerNorm(_Aura):
    """AuraFlow's per-head layer norm (not implemented here)."""


class SingleAttention(_Aura):
    """AuraFlow's single-stream attention (not implemented here)."""


class DoubleAttention(_Aura):
    """AuraFlow's joint (text + image) attention (not implemented here)."""


class MMDiTBlock(_Aura):
    """AuraFlow's joint block (not implemented here)."""


class DiTBlock(_Aura):
    """AuraFlow's single-stream block (not implemented here)."""


class TimestepEmbedder(_Aura):
    """AuraFlow's timestep embedder (not implemented here)."""


class MMDiT(_Aura):
    """AuraFlow's MMDiT (not implemented here)."""

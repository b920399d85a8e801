"""ComfyUI's `comfy.ldm.aura.mmdit` (AuraFlow's MMDiT): the family is not implemented here. Its
classes exist so packs that import or subclass them load (RES4LYF); building one raises
`UnsupportedNetworkError` (compat/unsupported_networks.py). The two helpers are ComfyUI's maths."""
from __future__ import annotations

from typing import Any

from compat.unsupported_networks import stand_ins


def modulate(x: Any, shift: Any, scale: Any) -> Any:
    """adaLN modulation: `x * (1 + scale) + shift`, the per-sample vectors over the token axis."""
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def find_multiple(n: int, k: int) -> int:
    """The least multiple of `k` that is >= `n`."""
    return n if n % k == 0 else n + k - (n % k)


globals().update(stand_ins(__name__, "AuraFlow", ("MLP", "MultiHeadLayerNorm", "SingleAttention", "DoubleAttention",
                                                  "MMDiTBlock", "DiTBlock", "TimestepEmbedder", "MMDiT")))

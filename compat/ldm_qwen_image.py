"""ComfyUI's `comfy.ldm.qwen_image.model.apply_rotary_emb`, for packs that run their own Qwen-Image
attention (nunchaku's `models/qwenimage.py` rotates its joint queries and keys with it).

Behaviour of ComfyUI's comfy/ldm/qwen_image/model.py: rotary position embedding (Su et al. 2021,
"RoFormer", eq. 34) applied pairwise with the rotation matrices `EmbedND` builds: each consecutive
pair `(x0, x1)` of a head's channels becomes `(m00 x0 + m01 x1, m10 x0 + m11 x1)` with
`m = freqs_cis[..., :, :]` = `[[cos, -sin], [sin, cos]]`. An empty sequence is returned as it is.
"""
from __future__ import annotations

import torch


def apply_rotary_emb(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """`x` [B, L, H, D] (any leading shape whose second axis is the sequence) rotated by `freqs_cis`
    [.., L, .., D/2, 2, 2]; computed with torch's type promotion of `x` and `freqs_cis` (ComfyUI's
    caller casts the table to `x`'s dtype), shaped as `x`."""
    if x.shape[1] == 0:
        return x
    pairs = x.reshape(*x.shape[:-1], -1, 1, 2)  # [..., D/2, 1, 2]
    rotated = freqs_cis[..., 0] * pairs[..., 0] + freqs_cis[..., 1] * pairs[..., 1]  # [..., D/2, 2]
    return rotated.reshape(*x.shape)

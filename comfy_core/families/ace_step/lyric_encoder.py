"""ACE-Step 1's lyric encoder: a Conformer-style encoder (Gulati et al. 2020) in the form ACE-Step
ships it (`models/lyrics_utils/lyric_encoder.py` of ace-step/ACE-Step, after WeNet / CosyVoice),
as ComfyUI 0.3.64 configures it (`comfy/ldm/ace/lyric_encoder.py`, `ConformerEncoder` with its
defaults): no macaron feed-forward and no convolution module, so each layer is

    x = x + MHA_rel(LN_mha(x))      # Transformer-XL relative-position attention (Dai et al. 2019)
    x = x + FF(LN_ff(x))            # Linear -> SiLU -> Linear

after an input stage `LayerNorm(Linear(x)) * sqrt(width)`, and a final `after_norm`. No masks
(ComfyUI passes none: full attention over the lyric tokens). Written here from those equations.

Relative-position attention: the scores are `((q + u) . k_j + (q + v) . R_{i-j}) / sqrt(d_k)` with
`R` the sinusoidal encoding of the relative distance `i - j` (ESPnet's "rel_pos_espnet": positive
distances first, the table spans `-(T-1) .. T-1`) through `linear_pos`, `u` / `v` the learned
`pos_bias_u` / `pos_bias_v`.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def relative_position_table(length: int, width: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
    """`[1, 2*length - 1, width]`: row `k` encodes the distance `length - 1 - k` (from `length - 1`
    down to `-(length - 1)`); sin in the even channels, cos in the odd ones, frequencies
    `10000^(-2i/width)` (Vaswani et al. 2017), computed in fp32."""
    distance = torch.arange(length - 1, -length, -1, dtype=torch.float32, device=device)[:, None]  # [2T-1, 1]
    freq = torch.exp(torch.arange(0, width, 2, dtype=torch.float32, device=device) * (-math.log(10000.0) / width))
    table = torch.zeros(2 * length - 1, width, dtype=torch.float32, device=device)
    table[:, 0::2] = torch.sin(distance * freq)
    table[:, 1::2] = torch.cos(distance * freq)
    return table[None].to(dtype)


class RelPositionAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions (see the module doc)."""

    def __init__(self, width: int, heads: int, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.linear_q = ops.Linear(width, width, dtype=dtype, device=device)
        self.linear_k = ops.Linear(width, width, dtype=dtype, device=device)
        self.linear_v = ops.Linear(width, width, dtype=dtype, device=device)
        self.linear_out = ops.Linear(width, width, dtype=dtype, device=device)
        self.linear_pos = ops.Linear(width, width, bias=False, dtype=dtype, device=device)
        self.pos_bias_u = nn.Parameter(torch.empty(heads, self.head_dim, dtype=dtype, device=device))
        self.pos_bias_v = nn.Parameter(torch.empty(heads, self.head_dim, dtype=dtype, device=device))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim)  # [B, T, H, d]

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """x `[B, T, W]`, pos `[1, 2T-1, W]` -> `[B, T, W]`."""
        b, t, _ = x.shape
        q = self._split(self.linear_q(x))
        k = self._split(self.linear_k(x)).transpose(1, 2)  # [B, H, T, d]
        v = self._split(self.linear_v(x)).transpose(1, 2)
        p = self.linear_pos(pos).view(1, -1, self.heads, self.head_dim).transpose(1, 2)  # [1, H, 2T-1, d]
        q_u = (q + self.pos_bias_u.to(q)).transpose(1, 2)  # [B, H, T, d]
        q_v = (q + self.pos_bias_v.to(q)).transpose(1, 2)
        content = q_u @ k.transpose(-2, -1)  # [B, H, T, T]
        by_distance = q_v @ p.transpose(-2, -1)  # [B, H, T, 2T-1], column k = distance T-1-k
        # score(i, j) takes the distance i - j, i.e. column T - 1 - i + j.
        i = torch.arange(t, device=x.device)[:, None]
        j = torch.arange(t, device=x.device)[None, :]
        column = (t - 1 - i + j).expand(b, self.heads, t, t)
        position = torch.gather(by_distance, -1, column)
        weights = torch.softmax((content + position) / math.sqrt(self.head_dim), dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(b, t, -1)
        return self.linear_out(out)


class FeedForward(nn.Module):
    """`w_2(SiLU(w_1(x)))` (the encoder's "swish" position-wise feed-forward)."""

    def __init__(self, width: int, hidden: int, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.w_1 = ops.Linear(width, hidden, dtype=dtype, device=device)
        self.w_2 = ops.Linear(hidden, width, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(F.silu(self.w_1(x)))


class EncoderLayer(nn.Module):
    """One pre-norm layer: relative-position attention, then the feed-forward, each residual."""

    def __init__(self, width: int, heads: int, hidden: int, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.self_attn = RelPositionAttention(width, heads, ops, dtype=dtype, device=device)
        self.feed_forward = FeedForward(width, hidden, ops, dtype=dtype, device=device)
        self.norm_mha = ops.LayerNorm(width, eps=1e-5, dtype=dtype, device=device)
        self.norm_ff = ops.LayerNorm(width, eps=1e-5, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.norm_mha(x), pos)
        return x + self.feed_forward(self.norm_ff(x))


class InputEmbed(nn.Module):
    """`embed.out`: Linear (0) then LayerNorm (1), the names ComfyUI's `nn.Sequential` gives."""

    def __init__(self, in_width: int, width: int, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.out = nn.Sequential(ops.Linear(in_width, width, dtype=dtype, device=device),
                                 ops.LayerNorm(width, eps=1e-5, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x)


class LyricEncoder(nn.Module):
    """`lyric_encoder.*`: `embed`, `encoders.N`, `after_norm` (see the module doc)."""

    def __init__(self, in_width: int, width: int, heads: int, hidden: int, layers: int, ops: Any,
                 dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.width = width
        self.embed = InputEmbed(in_width, width, ops, dtype=dtype, device=device)
        self.encoders = nn.ModuleList(EncoderLayer(width, heads, hidden, ops, dtype=dtype, device=device)
                                      for _ in range(layers))
        self.after_norm = ops.LayerNorm(width, eps=1e-5, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x `[B, T, in]` (the lyric token embeddings) -> `[B, T, width]`."""
        x = self.embed(x) * math.sqrt(self.width)
        pos = relative_position_table(x.shape[1], self.width, x.dtype, x.device)
        for layer in self.encoders:
            x = layer(x, pos)
        return self.after_norm(x)


__all__ = ["EncoderLayer", "FeedForward", "LyricEncoder", "RelPositionAttention", "relative_position_table"]

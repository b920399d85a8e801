"""MiniMax H3's layers (ComfyUI's `comfy/ldm/minimax/model.py` names; written here): RMS norms, the
timestep embedder, attention with per-head q / k norms and split-half RoPE, the SwiGLU MLP, the
adaLN projections and the per-token modulation over segments, the token refiner's and the DiT's
blocks, the final layer with its PDD head bank, and the denoise mask's per-row values. The network
that composes them is `dit.py`'s `MiniMaxH3Model`."""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.families.minimax_h3.layout import pdd_head_span, pdd_head_weights


class MiniMaxH3InputError(ValueError):
    """An input the MiniMax H3 network cannot take (latent shapes, conditions, timesteps)."""


class RMSNorm(nn.Module):
    """RMS norm with a learned `weight` (ComfyUI's `operations.RMSNorm`)."""

    def __init__(self, dim: int, eps: float, factory: dict[str, Any]) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight=self.weight.to(dtype=x.dtype, device=x.device), eps=self.eps)


class TimeEmbedder(nn.Module):
    """t in [0, 1] -> sinusoidal (cos half first, base 10000) -> Linear, SiLU, Linear (float32)."""

    def __init__(self, freq_dim: int, hidden: int, out: int, ops: Any, device: Any = None) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.proj_in = ops.Linear(freq_dim, hidden, bias=True, dtype=torch.float32, device=device)
        self.proj_out = ops.Linear(hidden, out, bias=True, dtype=torch.float32, device=device)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
        args = t.to(torch.float32)[:, None] * freqs[None]  # [M, half]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return self.proj_out(F.silu(self.proj_in(emb)))


def split_half_rope(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """x [S, heads, D]; angles [S, R] (R = rotated pairs): channels i and i + R of the first 2 R
    rotated by angle i ("rotate half" pairing), the rest unchanged."""
    r = angles.shape[-1]
    cos = torch.cos(angles).to(x.dtype)[:, None, :]
    sin = torch.sin(angles).to(x.dtype)[:, None, :]
    x1, x2, rest = x[..., :r], x[..., r:2 * r], x[..., 2 * r:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


class Attention(nn.Module):
    """Fused bias-free q/k/v, per-head q / k RMS norms, split-half RoPE, bias-free output."""

    def __init__(self, hidden: int, heads: int, head_dim: int, eps: float, gate_compress: bool, ops: Any,
                 factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        inner = heads * head_dim
        self.qkv_proj = ops.Linear(hidden, inner * 3, bias=False, **factory)
        self.q_norm = RMSNorm(head_dim, eps, factory)
        self.k_norm = RMSNorm(head_dim, eps, factory)
        self.out_proj = ops.Linear(inner, hidden, bias=False, **factory)
        # VSA's coarse gate: read by sparse-attention kernels only, never by the dense forward
        self.to_gate_compress = ops.Linear(hidden, inner, bias=False, **factory) if gate_compress else None

    def forward(self, x: torch.Tensor, rope_angles: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        s = x.shape[0]
        q, k, v = self.qkv_proj(x).split(self.heads * self.head_dim, dim=-1)
        q = self.q_norm(q.reshape(s, self.heads, self.head_dim))
        k = self.k_norm(k.reshape(s, self.heads, self.head_dim))
        if rope_angles is not None:
            q, k = split_half_rope(q, rope_angles), split_half_rope(k, rope_angles)
        out = calling.attend(q.reshape(1, s, -1), k.reshape(1, s, -1), v.reshape(1, s, -1), self.heads,
                             transformer_options=transformer_options or {})
        return self.out_proj(out[0])


class MLP(nn.Module):
    """SwiGLU: fc2(silu(gate) * up), gate / up the halves of fc1 (bias-free)."""

    def __init__(self, hidden: int, ffn: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.fc1 = ops.Linear(hidden, ffn * 2, bias=False, **factory)
        self.fc2 = ops.Linear(ffn, hidden, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(F.silu(gate) * up)


class AdalnProj(nn.Module):
    """[M, t_dim] timestep embeddings -> `expand` tables of [M * modalities, hidden] (row m *
    modalities + tag), SiLU first unless the file is curve-form."""

    def __init__(self, t_dim: int, hidden: int, expand: int, modalities: int, apply_silu: bool, ops: Any,
                 factory: dict[str, Any]) -> None:
        super().__init__()
        self.expand, self.modalities, self.hidden, self.apply_silu = expand, modalities, hidden, apply_silu
        self.linear = ops.Linear(t_dim, expand * hidden * modalities, bias=True, **factory)

    def forward(self, t_emb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.linear(F.silu(t_emb) if self.apply_silu else t_emb)
        x = x.reshape(x.shape[0] * self.modalities, self.expand * self.hidden)
        return x.chunk(self.expand, dim=-1)


def _rows(table: torch.Tensor, row: Any, dtype: torch.dtype) -> torch.Tensor:
    # row: an int (a whole segment) or a LongTensor (one row index per token)
    return table[row].to(dtype)


def modulate(h: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, segments: list) -> torch.Tensor:
    """h * (1 + scale[row]) + shift[row], segment by segment (`segments`: (start, stop, row))."""
    out = torch.empty_like(h)
    for a, b, row in segments:
        out[a:b] = h[a:b] * (1.0 + _rows(scale, row, h.dtype)) + _rows(shift, row, h.dtype)
    return out


def gated_residual(x: torch.Tensor, gate: torch.Tensor, update: torch.Tensor, segments: list) -> torch.Tensor:
    """x + gate[row] * update, segment by segment."""
    out = x.clone()
    for a, b, row in segments:
        out[a:b] = x[a:b] + update[a:b] * _rows(gate, row, x.dtype)
    return out


class RefinerBlock(nn.Module):
    """The token refiner's pre-norm block (no modulation, no RoPE)."""

    def __init__(self, config: Any, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        c = config
        self.norm1 = RMSNorm(c.hidden_size, c.norm_eps, factory)
        self.norm2 = RMSNorm(c.hidden_size, c.norm_eps, factory)
        self.attn = Attention(c.hidden_size, c.num_attention_heads, c.attention_head_dim, c.qk_norm_eps, False, ops,
                              factory)
        self.mlp = MLP(c.hidden_size, c.ffn_hidden_size, ops, factory)

    def forward(self, x: torch.Tensor, transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), transformer_options=transformer_options)
        return x + self.mlp(self.norm2(x))


class TokenRefiner(nn.Module):
    def __init__(self, config: Any, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([RefinerBlock(config, ops, factory)
                                     for _ in range(config.token_refiner_num_layers)])
        self.final_norm = RMSNorm(config.hidden_size, config.final_norm_eps, factory)

    def forward(self, x: torch.Tensor, transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, transformer_options=transformer_options)
        return self.final_norm(x)


class DiTBlock(nn.Module):
    def __init__(self, config: Any, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        c = config
        curve = c.adaln_curve_grid is not None
        adaln_factory = {**factory, "dtype": torch.float32} if curve else factory
        self.norm1 = RMSNorm(c.hidden_size, c.norm_eps, factory)
        self.norm2 = RMSNorm(c.hidden_size, c.norm_eps, factory)
        self.attn = Attention(c.hidden_size, c.num_attention_heads, c.attention_head_dim, c.qk_norm_eps,
                              c.gate_compress, ops, factory)
        self.mlp = MLP(c.hidden_size, c.ffn_hidden_size, ops, factory)
        self.adaln_proj = AdalnProj(c.time_embed_dim, c.hidden_size, 6, 3, not curve, ops, adaln_factory)

    def forward(self, x: torch.Tensor, t_emb: torch.Tensor, mod_segments: list, rope_angles: torch.Tensor,
                transformer_options: dict[str, Any] | None = None, attention: Any = None) -> torch.Tensor:
        attention = self.attn if attention is None else attention
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaln_proj(t_emb)
        h = modulate(self.norm1(x), shift_msa, scale_msa, mod_segments)
        x = gated_residual(x, gate_msa, attention(h, rope_angles, transformer_options=transformer_options),
                           mod_segments)
        h = modulate(self.norm2(x), shift_mlp, scale_mlp, mod_segments)
        return gated_residual(x, gate_mlp, self.mlp(h), mod_segments)


class FinalLayer(nn.Module):
    """RMS norm, a 2-table adaLN (one row per timestep), the float32 video / audio heads (a PDD bank
    of `pdd_heads` heads in the distilled files)."""

    def __init__(self, config: Any, ops: Any, factory: dict[str, Any], device: Any) -> None:
        super().__init__()
        c = config
        curve = c.adaln_curve_grid is not None
        self.heads = c.pdd_heads
        self.norm = RMSNorm(c.hidden_size, c.final_norm_eps, factory)
        self.adaln_proj = AdalnProj(c.time_embed_dim, c.hidden_size, 2, 1, not curve, ops,
                                    {**factory, "dtype": torch.float32} if curve else factory)
        self.video_out = ops.Linear(c.hidden_size, c.video_patch_dim * c.pdd_heads, bias=True, dtype=torch.float32,
                                    device=device)
        self.audio_out = ops.Linear(c.hidden_size, c.audio_latents_dim * c.pdd_heads, bias=True, dtype=torch.float32,
                                    device=device)

    def forward(self, x: torch.Tensor, t_emb: torch.Tensor, video_seg: tuple, audio_seg: tuple, sigma: float,
                sample_sigmas: torch.Tensor | None, shifts: tuple[float, float]) -> tuple[torch.Tensor, torch.Tensor]:
        shift, scale = self.adaln_proj(t_emb)

        def mod(seg: tuple) -> torch.Tensor:
            a, b, row = seg
            return (self.norm(x[a:b]) * (1.0 + _rows(scale, row, scale.dtype)) + _rows(shift, row, shift.dtype)
                    ).to(torch.float32)

        if self.heads == 1:
            return self.video_out(mod(video_seg)), self.audio_out(mod(audio_seg))
        if sample_sigmas is None:
            raise MiniMaxH3InputError("MiniMax H3: a PDD head bank needs the sampler's sigma schedule "
                                      "(transformer_options['sample_sigmas'])")
        start, stop = pdd_head_span(sigma, sample_sigmas.detach().float().cpu(), self.heads, shifts[0])
        return (_pdd_head(self.video_out, mod(video_seg), self.heads, start, stop, shifts[0]),
                _pdd_head(self.audio_out, mod(audio_seg), self.heads, start, stop, shifts[1]))


def mask_row_values(mask: torch.Tensor, latent_t: int, lat_h: int, lat_w: int) -> torch.Tensor | None:
    """A [T, H, W] denoise mask (1 = generate) -> its largest value per 2x2-patch row [T * H/2 * W/2],
    the edges replicated to the padded size; None when every row is generated whole."""
    m = F.pad(mask[None], (0, lat_w - mask.shape[-1], 0, lat_h - mask.shape[-2]), mode="replicate")[0]
    values = m.reshape(latent_t, lat_h // 2, 2, lat_w // 2, 2).amax(dim=(2, 4)).reshape(-1)
    return None if bool((values >= 1.0 - 1e-3).all()) else values


def row_index(rows_t: torch.Tensor, t_row: dict[float, int]) -> torch.Tensor:
    """Per-row timestep labels -> their index among the step's distinct timesteps (a LongTensor)."""
    levels = rows_t.unique()
    index = torch.tensor([t_row[float(v)] for v in levels.tolist()], dtype=torch.long)
    return index[torch.searchsorted(levels, rows_t)]


def _pdd_head(head: nn.Module, h: torch.Tensor, heads: int, start: int, stop: int, flow_shift: float) -> torch.Tensor:
    # head 0 is a full head, heads 1.. are offsets from it: W = W0 + sum_j w_j W_j over the step's heads
    w = pdd_head_weights(heads, start, stop, flow_shift).to(h)
    weight = head.weight.to(h).reshape(heads, -1, head.weight.shape[1])  # [n, out, in]
    bias = head.bias.to(h).reshape(heads, -1)
    first = max(start, 1)
    return F.linear(h, weight[0] + torch.einsum("n,noi->oi", w[first - start:], weight[first:stop]),
                    bias[0] + torch.einsum("n,no->o", w[first - start:], bias[first:stop]))

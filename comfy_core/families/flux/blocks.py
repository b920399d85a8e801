"""Flux.1's building blocks: embedders, QK-normed attention, adaLN modulation, the double-stream
(MMDiT) and single-stream (parallel attention + MLP) blocks and the final layer.

Architecture of Black Forest Labs' Flux.1 (`flux/modules/layers.py` of github.com/black-forest-labs/
flux): double-stream blocks after Esser et al. 2024 ("Scaling Rectified Flow Transformers for
High-Resolution Image Synthesis", MMDiT), single-stream blocks with parallel linear layers after
Dehghani et al. 2023 ("Scaling Vision Transformers to 22 Billion Parameters", arXiv 2302.05442),
QK RMS normalisation (Zhang & Sennrich 2019). Names, constructor and forward arguments are those
of ComfyUI's `comfy/ldm/flux/layers.py` (the BFL state-dict layout: `img_mod.lin`, `img_attn.qkv`,
`img_attn.norm.query_norm.scale`, `img_attn.proj`, `img_mlp.0/2`, `linear1/linear2`,
`modulation.lin`, `final_layer.linear`, `final_layer.adaLN_modulation.1`); written here.

Every layer is built from `operations` (default torch's layers, `unet_blocks.TorchOperations`), on
any device (meta included) and never initialised: the loader assigns the weights.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.flux import math as flux_math
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.unet_blocks import timestep_embedding as _sinusoidal


def flux_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe: torch.Tensor | None,
                   mask: torch.Tensor | None, options: dict[str, Any] | None) -> torch.Tensor:
    """Flux's joint attention (RoPE applied, heads merged): q / k / v `[B, H, L, d]` -> `[B, L, H*d]`."""
    return flux_math.run_attention(q, k, v, pe=pe, mask=mask, transformer_options=options)


def patched_self_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe: torch.Tensor | None,
                           mask: torch.Tensor | None, options: dict[str, Any] | None,
                           img_slice: Sequence[int] | None = None,
                           attend: Callable[..., torch.Tensor] = flux_attention) -> torch.Tensor:
    """A joint block's self-attention `attend(q, k, v, pe, mask, options)` with today's ComfyUI's
    Flux patch points: each `transformer_options["patches"]["attn1_patch"]` `(q, k, v, pe=,
    attn_mask=, extra_options=) -> dict` may replace q / k / v (`[B, H, L, d]`), pe and the mask
    before the attention; each `["attn1_output_patch"]` `(attn, extra_options) -> attn` gets the
    result `[B, L, H*d]` before the output projection. `extra_options` is a copy of the options
    with `img_slice` (the image tokens' `[start, end)`) the double block's own or, in the single
    blocks, the one the network set for the stack."""
    patches = (options or {}).get("patches") or {}
    before, after = patches.get("attn1_patch"), patches.get("attn1_output_patch")
    if not before and not after:
        return attend(q, k, v, pe, mask, options)
    extra = dict(options)
    if img_slice is not None:
        extra["img_slice"] = [int(img_slice[0]), int(img_slice[1])]
    for patch in before or ():
        out = patch(q, k, v, pe=pe, attn_mask=mask, extra_options=extra)
        q, k, v = out.get("q", q), out.get("k", k), out.get("v", v)
        pe, mask = out.get("pe", pe), out.get("attn_mask", mask)
    attn = attend(q, k, v, pe, mask, options)
    for patch in after or ():
        attn = patch(attn, extra)
    return attn


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0,
                       time_factor: float = 1000.0) -> torch.Tensor:
    """Sinusoidal embedding of `time_factor * t` (`[B] -> [B, dim]`, cos half first), in `t`'s
    dtype when `t` is floating (BFL's `timestep_embedding`: Flux takes sigma in 0..1 and scales it
    by 1000 here, as it does the distilled guidance value)."""
    embedding = _sinusoidal(time_factor * t, dim, max_period=max_period)  # [B, dim] float32
    if torch.is_floating_point(t):
        embedding = embedding.to(t)
    return embedding


class EmbedND(nn.Module):
    """RoPE over several position axes: each axis `i` of `ids` `[B, L, n_axes]` gets `axes_dim[i]`
    channels of the head; returns `[B, 1, L, dim/2, 2, 2]` (a heads axis to broadcast)."""

    def __init__(self, dim: int, theta: float, axes_dim: Sequence[int]) -> None:
        super().__init__()
        self.dim = dim
        self.theta = theta
        self.axes_dim = list(axes_dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        emb = torch.cat([flux_math.rope(ids[..., i], self.axes_dim[i], self.theta) for i in range(ids.shape[-1])],
                        dim=-3)  # [B, L, dim/2, 2, 2]
        return emb.unsqueeze(1)


class MLPEmbedder(nn.Module):
    """`Linear(in, hidden) -> SiLU -> Linear(hidden, hidden)` (`in_layer`, `out_layer`)."""

    def __init__(self, in_dim: int, hidden_dim: int, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.in_layer = ops.Linear(in_dim, hidden_dim, bias=True, dtype=dtype, device=device)
        self.silu = nn.SiLU()
        self.out_layer = ops.Linear(hidden_dim, hidden_dim, bias=True, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_layer(self.silu(self.in_layer(x)))


class RMSNorm(nn.Module):
    """RMS normalisation over the last axis with a learned `scale` (eps 1e-6), the scale cast to the
    input's dtype and device per call (it may be stored in fp8)."""

    def __init__(self, dim: int, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.empty(dim, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale.to(dtype=x.dtype, device=x.device)
        return F.rms_norm(x, scale.shape, weight=scale, eps=1e-6)


class QKNorm(nn.Module):
    """RMS norms of queries and keys (`query_norm`, `key_norm`), returned in `v`'s dtype."""

    def __init__(self, dim: int, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        self.query_norm = RMSNorm(dim, dtype=dtype, device=device, operations=operations)
        self.key_norm = RMSNorm(dim, dtype=dtype, device=device, operations=operations)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.query_norm(q).to(v), self.key_norm(k).to(v)


class SelfAttention(nn.Module):
    """The weights of one stream's attention (`qkv`, `norm`, `proj`); the blocks run it, since the
    two streams of a double block attend jointly."""

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = False, dtype: Any = None,
                 device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.qkv = ops.Linear(dim, dim * 3, bias=qkv_bias, dtype=dtype, device=device)
        self.norm = QKNorm(head_dim, dtype=dtype, device=device, operations=ops)
        self.proj = ops.Linear(dim, dim, dtype=dtype, device=device)


@dataclass
class ModulationOut:
    """One adaLN modulation: `shift`, `scale`, `gate`, each `[B, 1, C]` (or per-token)."""

    shift: torch.Tensor
    scale: torch.Tensor
    gate: torch.Tensor


class Modulation(nn.Module):
    """`lin(silu(vec))` split into 6 (double: two `ModulationOut`s) or 3 (single) chunks."""

    def __init__(self, dim: int, double: bool, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.is_double = double
        self.multiplier = 6 if double else 3
        self.lin = ops.Linear(dim, self.multiplier * dim, bias=True, dtype=dtype, device=device)

    def forward(self, vec: torch.Tensor) -> tuple[ModulationOut, ModulationOut | None]:
        if vec.ndim == 2:
            vec = vec[:, None, :]  # [B, 1, C]
        out = self.lin(F.silu(vec)).chunk(self.multiplier, dim=-1)
        return ModulationOut(*out[:3]), (ModulationOut(*out[3:]) if self.is_double else None)


def apply_mod(tensor: torch.Tensor, m_mult: torch.Tensor, m_add: torch.Tensor | None = None,
              modulation_dims: Sequence[tuple[int, int, int]] | None = None) -> torch.Tensor:
    """`tensor * m_mult + m_add` (ComfyUI's `apply_mod`). With `modulation_dims`, a list of
    `(start, end, i)`: tokens `start:end` take modulation row `i` (in place on `tensor`, which the
    callers own), as ComfyUI's per-region modulation."""
    if modulation_dims is None:
        if m_add is not None:
            return torch.addcmul(m_add, tensor, m_mult)
        return tensor * m_mult
    for start, end, row in modulation_dims:
        tensor[:, start:end] *= m_mult[:, row]
        if m_add is not None:
            tensor[:, start:end] += m_add[:, row]
    return tensor


def _mlp(hidden_size: int, mlp_hidden_dim: int, ops: Any, factory: dict[str, Any]) -> nn.Sequential:
    return nn.Sequential(ops.Linear(hidden_size, mlp_hidden_dim, bias=True, **factory),
                         nn.GELU(approximate="tanh"),
                         ops.Linear(mlp_hidden_dim, hidden_size, bias=True, **factory))


def _heads(qkv: torch.Tensor, num_heads: int) -> torch.Tensor:
    b, n, _ = qkv.shape
    return qkv.view(b, n, 3, num_heads, -1).permute(2, 0, 3, 1, 4)  # [3, B, H, N, d]


def _clamp_fp16(x: torch.Tensor) -> torch.Tensor:
    # fp16 activations of the released weights overflow; ComfyUI clamps them to finite values.
    if x.dtype == torch.float16:
        return torch.nan_to_num(x, nan=0.0, posinf=65504, neginf=-65504)
    return x


class DoubleStreamBlock(nn.Module):
    """Separate weights for image and text tokens, one joint attention over `[txt, img]`
    (`[img, txt]` with `flipped_img_txt`); each stream: modulated LayerNorm -> attention -> gated
    residual, modulated LayerNorm -> MLP -> gated residual. `modulation=False` (Chroma, as newer
    ComfyUI's `modulation` argument): no `img_mod` / `txt_mod` layers, `vec` is the modulations
    themselves, `((img_mod1, img_mod2), (txt_mod1, txt_mod2))`."""

    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float, qkv_bias: bool = False,
                 flipped_img_txt: bool = False, dtype: Any = None, device: Any = None,
                 operations: Any = None, modulation: bool = True) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        mlp_hidden_dim = int(hidden_size * mlp_ratio)
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.modulation = modulation
        for stream in ("img", "txt"):
            if modulation:
                setattr(self, f"{stream}_mod", Modulation(hidden_size, double=True, operations=ops, **factory))
            setattr(self, f"{stream}_norm1", ops.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6, **factory))
            setattr(self, f"{stream}_attn", SelfAttention(hidden_size, num_heads, qkv_bias=qkv_bias, operations=ops,
                                                          **factory))
            setattr(self, f"{stream}_norm2", ops.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6, **factory))
            setattr(self, f"{stream}_mlp", _mlp(hidden_size, mlp_hidden_dim, ops, factory))
        self.flipped_img_txt = flipped_img_txt

    def _qkv(self, stream: str, x: torch.Tensor, mod: ModulationOut,
             dims: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        attn: SelfAttention = getattr(self, f"{stream}_attn")
        modulated = apply_mod(getattr(self, f"{stream}_norm1")(x), 1 + mod.scale, mod.shift, dims)  # [B, N, C]
        q, k, v = _heads(attn.qkv(modulated), self.num_heads)  # each [B, H, N, d]
        q, k = attn.norm(q, k, v)
        return q, k, v

    def _residuals(self, stream: str, x: torch.Tensor, attn_out: torch.Tensor, mod1: ModulationOut,
                   mod2: ModulationOut, dims: Any) -> torch.Tensor:
        attn: SelfAttention = getattr(self, f"{stream}_attn")
        x = x + apply_mod(attn.proj(attn_out), mod1.gate, None, dims)
        hidden = apply_mod(getattr(self, f"{stream}_norm2")(x), 1 + mod2.scale, mod2.shift, dims)
        return x + apply_mod(getattr(self, f"{stream}_mlp")(hidden), mod2.gate, None, dims)

    def forward(self, img: torch.Tensor, txt: torch.Tensor, vec: torch.Tensor, pe: torch.Tensor | None,
                attn_mask: torch.Tensor | None = None, modulation_dims_img: Any = None,
                modulation_dims_txt: Any = None,
                transformer_options: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        # img [B, Ni, C], txt [B, Nt, C], vec [B, C] (or the modulations), pe [B, 1, Nt+Ni, d/2, 2, 2]
        if self.modulation:
            img_mod1, img_mod2 = self.img_mod(vec)
            txt_mod1, txt_mod2 = self.txt_mod(vec)
        else:
            (img_mod1, img_mod2), (txt_mod1, txt_mod2) = vec
        img_q, img_k, img_v = self._qkv("img", img, img_mod1, modulation_dims_img)
        txt_q, txt_k, txt_v = self._qkv("txt", txt, txt_mod1, modulation_dims_txt)
        first, second = ((img_q, img_k, img_v), (txt_q, txt_k, txt_v))
        if not self.flipped_img_txt:
            first, second = second, first
        image_tokens = (0, img.shape[1]) if self.flipped_img_txt else (txt.shape[1], txt.shape[1] + img.shape[1])
        attn = patched_self_attention(torch.cat((first[0], second[0]), dim=2), torch.cat((first[1], second[1]), dim=2),
                                      torch.cat((first[2], second[2]), dim=2), pe, attn_mask, transformer_options,
                                      image_tokens)  # [B, Nt+Ni, C]
        if self.flipped_img_txt:
            img_attn, txt_attn = attn[:, :img.shape[1]], attn[:, img.shape[1]:]
        else:
            txt_attn, img_attn = attn[:, :txt.shape[1]], attn[:, txt.shape[1]:]
        img = self._residuals("img", img, img_attn, img_mod1, img_mod2, modulation_dims_img)
        txt = self._residuals("txt", txt, txt_attn, txt_mod1, txt_mod2, modulation_dims_txt)
        return img, _clamp_fp16(txt)


class SingleStreamBlock(nn.Module):
    """One stream over `[txt, img]`: `linear1` makes q, k, v and the MLP input in one product,
    `linear2` projects `[attention, gelu(mlp)]` back; one gated residual. `modulation=False`
    (Chroma): no `modulation` layer, the block is fed its modulation (`modulated_forward`)."""

    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float = 4.0, qk_scale: float | None = None,
                 dtype: Any = None, device: Any = None, operations: Any = None, modulation: bool = True) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.hidden_dim = hidden_size
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        head_dim = hidden_size // num_heads
        self.scale = qk_scale or head_dim ** -0.5
        self.mlp_hidden_dim = int(hidden_size * mlp_ratio)
        self.linear1 = ops.Linear(hidden_size, hidden_size * 3 + self.mlp_hidden_dim, **factory)
        self.linear2 = ops.Linear(hidden_size + self.mlp_hidden_dim, hidden_size, **factory)
        self.norm = QKNorm(head_dim, operations=ops, **factory)
        self.pre_norm = ops.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6, **factory)
        self.mlp_act = nn.GELU(approximate="tanh")
        if modulation:
            self.modulation = Modulation(hidden_size, double=False, operations=ops, **factory)

    def forward(self, x: torch.Tensor, vec: torch.Tensor, pe: torch.Tensor | None,
                attn_mask: torch.Tensor | None = None, modulation_dims: Any = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        # x [B, N, C] (text tokens first), vec [B, C]
        mod, _ = self.modulation(vec)
        return self.modulated_forward(x, mod, pe, attn_mask, modulation_dims, transformer_options)

    def modulated_forward(self, x: torch.Tensor, mod: Any, pe: torch.Tensor | None,
                          attn_mask: torch.Tensor | None = None, modulation_dims: Any = None,
                          transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        """The block given its modulation (`shift`, `scale`, `gate`): Flux computes it from `vec`,
        Chroma's approximator hands it over."""
        modulated = apply_mod(self.pre_norm(x), 1 + mod.scale, mod.shift, modulation_dims)
        qkv, mlp = torch.split(self.linear1(modulated), [3 * self.hidden_size, self.mlp_hidden_dim], dim=-1)
        q, k, v = _heads(qkv, self.num_heads)  # each [B, H, N, d]
        q, k = self.norm(q, k, v)
        attn = patched_self_attention(q, k, v, pe, attn_mask, transformer_options)
        output = self.linear2(torch.cat((attn, self.mlp_act(mlp)), 2))  # [B, N, C]
        return _clamp_fp16(x + apply_mod(output, mod.gate, None, modulation_dims))


class LastLayer(nn.Module):
    """Modulated final LayerNorm (`adaLN_modulation.1` gives shift then scale) and the projection
    to `patch_size**2 * out_channels` per token (Flux passes patch_size 1 and the patched width).
    `modulation=False` (Chroma): no `adaLN_modulation`, the layer is given shift and scale
    (`modulated_forward`)."""

    def __init__(self, hidden_size: int, patch_size: int, out_channels: int, dtype: Any = None,
                 device: Any = None, operations: Any = None, modulation: bool = True) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.norm_final = ops.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6, **factory)
        self.linear = ops.Linear(hidden_size, patch_size * patch_size * out_channels, bias=True, **factory)
        if modulation:
            self.adaLN_modulation = nn.Sequential(nn.SiLU(),
                                                  ops.Linear(hidden_size, 2 * hidden_size, bias=True, **factory))

    def forward(self, x: torch.Tensor, vec: torch.Tensor, modulation_dims: Any = None) -> torch.Tensor:
        if vec.ndim == 2:
            vec = vec[:, None, :]  # [B, 1, C]
        shift, scale = self.adaLN_modulation(vec).chunk(2, dim=-1)
        return self.modulated_forward(x, shift, scale, modulation_dims)

    def modulated_forward(self, x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor,
                          modulation_dims: Any = None) -> torch.Tensor:
        """x `[B, N, C]`, shift / scale `[B, 1, C]` -> `[B, N, out]` (Chroma hands them over)."""
        return self.linear(apply_mod(self.norm_final(x), 1 + scale, shift, modulation_dims))

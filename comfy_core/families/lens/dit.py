"""Lens's diffusion transformer and `LensConfig` read from weights.

Architecture of Microsoft's Lens (3.8 B, 2026; Lens and the distilled Lens-Turbo), as ComfyUI's
`comfy/ldm/lens/model.py` (`LensTransformer2DModel`) describes it; written here from that
description, in ComfyUI's module names (the released files' names):

- the latent: Flux.2's 128-channel latent (the VAE's 32 channels in 2x2 patches), one token per
  latent pixel -> `img_in`; the output `proj_out` gives 128 channels per token again;
- the text: the tapped GPT-OSS 20B states `[B, T, L * 2880]` (L = 4 taps: blocks 5, 11, 17, 23,
  from CLIPLoader type "lens": `clip.py`), each tap RMS-normed by its own `txt_norm.i` (eps 1e-5),
  concatenated per token -> `txt_in`;
- the time: Flux's sinusoid of `1000 sigma` (cos half first, 256 wide) -> `time_text_embed.
  timestep_embedder` (Linear, SiLU, Linear) = `temb`;
- 48 dual-stream blocks: per stream `*_mod` (SiLU, Linear to 6 widths: shift / scale / gate for the
  attention, then for the MLP), RMSNorms (eps 1e-6) `(1 + scale) norm(x) + shift`, one joint
  attention over `[image, text]` with per-stream fused `img_qkv` / `txt_qkv`, per-head RMS-normed
  q / k (eps 1e-5, `norm_q` / `norm_k`, `norm_added_q` / `norm_added_k`), Flux's RoPE over 3 axes
  (8 / 28 / 28 of a 64-wide head, base 10000): image row / column centred (`-(n - n//2) .. n//2 - 1`),
  the text at `max(h//2, w//2) + j` on every axis; per-stream outputs `to_out.0` / `to_add_out`,
  gated residuals, SwiGLU MLPs (`w2(silu(w1 x) * w3 x)`, 8/3 width); masked text keys (the token
  mask) get float32's minimum as their bias;
- the output: `norm_out` (LayerNorm without affine, eps 1e-6, then `(1 + scale) x + shift` with
  (scale, shift) = `linear(silu(temb))`: scale first, unlike Flux) -> `proj_out`.

Block patches as ComfyUI's: `patches_replace["dit"][("double_block", i)]` (args `img`, `txt`, `vec`,
`pe`, `attn_mask`, `transformer_options`; the original block under `original_block`), `patches
["double_block"]` after each block, `patches["post_input"]` after the input projections, and
ControlNet-style `control["input"][i]` added to the first image tokens.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.attention.rope import apply_rope
from comfy_core.families.flux.blocks import EmbedND, timestep_embedding
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.swiglu import SwiGLUFeedForward
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered

ROPE_THETA = 10000.0
TIME_DIM = 256
PATCH = 2


class LensConfigError(ValueError):
    """The Lens weights are incomplete or inconsistent, or the parameters are impossible."""


class LensInputError(ValueError):
    """Inputs the Lens network cannot take."""


def rope_axes(head_dim: int) -> tuple[int, int, int]:
    """The head's split over (frame, row, column): ComfyUI's 8 / 28 / 28 for 64 channels, scaled
    alike for other widths (an eighth for the frame, the rest halved)."""
    first = head_dim // 8
    rest = (head_dim - first) // 2
    if first % 2 or rest % 2 or first + 2 * rest != head_dim:
        raise LensConfigError(f"Lens: a head of {head_dim} channels cannot be split into even RoPE axes")
    return (first, rest, rest)


@dataclass(frozen=True)
class LensConfig:
    """The network's structure (the released Lens's: 1536 wide, 24 heads of 64, 48 blocks, 128
    channels in and out, 4 taps of a 2880-wide GPT-OSS 20B)."""

    inner_dim: int = 1536
    head_dim: int = 64
    layers: int = 48
    in_channels: int = 128
    out_channels: int = 32  # per patch position: proj_out gives patch^2 of them
    patch: int = PATCH
    mlp_dim: int = 4096
    enc_dim: int = 2880
    taps: int = 4
    multi_layer: bool = True
    rms_norm: bool = True

    def __post_init__(self) -> None:
        if self.inner_dim % self.head_dim:
            raise LensConfigError(f"Lens: width {self.inner_dim} is not a multiple of the head width {self.head_dim}")
        rope_axes(self.head_dim)

    @property
    def heads(self) -> int:
        return self.inner_dim // self.head_dim

    @property
    def context_width(self) -> int:
        return self.enc_dim * self.taps

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "LensConfig | None":
        """The config of the Lens network under `prefix` (ComfyUI's names), None when absent."""
        def shape(name: str) -> tuple[int, ...] | None:
            entry = tensors.get(prefix + name) if hasattr(tensors, "get") else None
            if entry is None:
                return None
            return tuple(int(d) for d in entry.shape)

        img_in, proj_out = shape("img_in.weight"), shape("proj_out.weight")
        if img_in is None or proj_out is None:
            return None
        layers = count_numbered(tensors, prefix, "transformer_blocks", LensConfigError, "Lens")
        norm_q, w1 = shape("transformer_blocks.0.attn.norm_q.weight"), shape("transformer_blocks.0.img_mlp.w1.weight")
        if layers == 0 or norm_q is None or w1 is None:
            raise LensConfigError(f"Lens weights under {prefix!r} lack their blocks (transformer_blocks.0.*)")
        multi = shape("txt_norm.0.weight") is not None
        if multi:
            taps = count_numbered(tensors, prefix, "txt_norm", LensConfigError, "Lens")
            enc = shape("txt_norm.0.weight")[0]
        else:
            norm = shape("txt_norm.weight")
            if norm is None:
                raise LensConfigError(f"Lens weights under {prefix!r} lack txt_norm")
            taps, enc = 1, norm[0]
        if proj_out[0] % (PATCH * PATCH):
            raise LensConfigError(f"Lens: proj_out gives {proj_out[0]} channels, not a multiple of {PATCH * PATCH}")
        return cls(inner_dim=img_in[0], head_dim=norm_q[0], layers=layers, in_channels=img_in[1],
                   out_channels=proj_out[0] // (PATCH * PATCH), mlp_dim=w1[0], enc_dim=enc, taps=taps,
                   multi_layer=multi, rms_norm=shape("transformer_blocks.0.img_norm1.weight") is not None)

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (`LensTransformer2DModel` arguments) for this network."""
        return {"image_model": "lens", "patch_size": self.patch, "in_channels": self.in_channels,
                "out_channels": self.out_channels, "num_layers": self.layers, "attention_head_dim": self.head_dim,
                "num_attention_heads": self.heads, "enc_hidden_dim": self.enc_dim,
                "axes_dims_rope": list(rope_axes(self.head_dim)), "rms_norm": self.rms_norm,
                "multi_layer_encoder_feature": self.multi_layer,
                "selected_layer_index": list(range(self.taps))}


def position_ids(height: int, width: int, text_len: int, device: Any = None) -> torch.Tensor:
    """`[h w + T, 3]` (frame, row, column) positions of `[image, text]` (ComfyUI's
    `_lens_position_ids` with `scale_rope`): rows / columns centred, the text on the diagonal after
    `max(h // 2, w // 2)`."""
    rows = torch.arange(height, device=device, dtype=torch.float32) - (height - height // 2)
    cols = torch.arange(width, device=device, dtype=torch.float32) - (width - width // 2)
    img = torch.zeros(height, width, 3, device=device)
    img[..., 1] = rows[:, None]
    img[..., 2] = cols[None, :]
    start = max(height // 2, width // 2)
    txt = torch.arange(start, start + text_len, device=device, dtype=torch.float32)[:, None].expand(text_len, 3)
    return torch.cat([img.reshape(-1, 3), txt], dim=0)


def joint_key_bias(text_mask: torch.Tensor, image_len: int) -> torch.Tensor:
    """Token mask `[B, T]` -> additive key bias `[B, 1, 1, h w + T]` float32: 0 for the image and the
    kept text, float32's minimum for masked text (ComfyUI's `_build_joint_attention_mask`)."""
    keep = torch.cat([torch.ones(text_mask.shape[0], image_len, dtype=torch.bool, device=text_mask.device),
                      text_mask.bool()], dim=1)
    bias = torch.zeros(keep.shape, dtype=torch.float32, device=keep.device)
    bias.masked_fill_(~keep, torch.finfo(torch.float32).min)
    return bias[:, None, None, :]


class RMSNorm(nn.Module):
    """RMSNorm with a learned scale, computed in float32 (ComfyUI's `operations.RMSNorm`)."""

    def __init__(self, dim: int, eps: float, factory: Mapping[str, Any]) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).to(x.dtype)


class PlainLayerNorm(nn.Module):
    """LayerNorm without affine parameters (the blocks' norms when `rms_norm` is off)."""

    def __init__(self, eps: float) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), None, None, self.eps)


class JointAttention(nn.Module):
    """One attention over `[image, text]` with per-stream fused q / k / v and outputs."""

    def __init__(self, config: LensConfig, ops: Any, factory: Mapping[str, Any]) -> None:
        super().__init__()
        dim, hd = config.inner_dim, config.head_dim
        self.heads, self.head_dim = config.heads, hd
        self.norm_q, self.norm_k = RMSNorm(hd, 1e-5, factory), RMSNorm(hd, 1e-5, factory)
        self.norm_added_q, self.norm_added_k = RMSNorm(hd, 1e-5, factory), RMSNorm(hd, 1e-5, factory)
        self.img_qkv = ops.Linear(dim, 3 * dim, bias=True, **factory)
        self.txt_qkv = ops.Linear(dim, 3 * dim, bias=True, **factory)
        self.to_out = nn.ModuleList([ops.Linear(dim, dim, bias=True, **factory), nn.Identity()])
        self.to_add_out = ops.Linear(dim, dim, bias=True, **factory)

    def _qkv(self, linear: nn.Module, norm_q: nn.Module, norm_k: nn.Module, x: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, _ = x.shape
        q, k, v = linear(x).view(b, n, 3, self.heads, self.head_dim).unbind(dim=2)  # [B, N, H, D] each
        return norm_q(q), norm_k(k), v

    def forward(self, img: torch.Tensor, txt: torch.Tensor, pe: torch.Tensor, bias: torch.Tensor | None,
                options: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        n_img = img.shape[1]
        iq, ik, iv = self._qkv(self.img_qkv, self.norm_q, self.norm_k, img)
        tq, tk, tv = self._qkv(self.txt_qkv, self.norm_added_q, self.norm_added_k, txt)
        q = torch.cat([iq, tq], dim=1).transpose(1, 2)  # [B, H, L, D]
        k = torch.cat([ik, tk], dim=1).transpose(1, 2)
        v = torch.cat([iv, tv], dim=1).transpose(1, 2)
        q, k = apply_rope(q, k, pe)
        mask = None if bias is None else bias.to(q.dtype)
        out = calling.attend(q, k, v, self.heads, mask=mask, skip_reshape=True, transformer_options=options)
        return self.to_out[0](out[:, :n_img]), self.to_add_out(out[:, n_img:])  # [B, L, H*D] split


def _modulate(x: torch.Tensor, mod: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    shift, scale, gate = mod.chunk(3, dim=-1)
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1), gate.unsqueeze(1)


class LensBlock(nn.Module):
    """A dual-stream block (see the module docstring)."""

    def __init__(self, config: LensConfig, ops: Any, factory: Mapping[str, Any]) -> None:
        super().__init__()
        dim = config.inner_dim
        self.attn = JointAttention(config, ops, factory)

        def norm() -> nn.Module:
            return RMSNorm(dim, 1e-6, factory) if config.rms_norm else PlainLayerNorm(1e-6)

        self.img_mod = nn.Sequential(nn.SiLU(), ops.Linear(dim, 6 * dim, bias=True, **factory))
        self.img_norm1, self.img_norm2 = norm(), norm()
        self.img_mlp = SwiGLUFeedForward(dim, config.mlp_dim, 1, None, {"operations": ops, **factory})
        self.txt_mod = nn.Sequential(nn.SiLU(), ops.Linear(dim, 6 * dim, bias=True, **factory))
        self.txt_norm1, self.txt_norm2 = norm(), norm()
        self.txt_mlp = SwiGLUFeedForward(dim, config.mlp_dim, 1, None, {"operations": ops, **factory})

    def forward(self, img: torch.Tensor, txt: torch.Tensor, temb: torch.Tensor, pe: torch.Tensor,
                bias: torch.Tensor | None, options: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (txt, img), ComfyUI's order."""
        img_mod1, img_mod2 = self.img_mod(temb).chunk(2, dim=-1)
        txt_mod1, txt_mod2 = self.txt_mod(temb).chunk(2, dim=-1)
        img_in, img_gate1 = _modulate(self.img_norm1(img), img_mod1)
        txt_in, txt_gate1 = _modulate(self.txt_norm1(txt), txt_mod1)
        img_attn, txt_attn = self.attn(img_in, txt_in, pe, bias, options)
        img = img + img_gate1 * img_attn
        txt = txt + txt_gate1 * txt_attn
        img_in, img_gate2 = _modulate(self.img_norm2(img), img_mod2)
        img = img + img_gate2 * self.img_mlp(img_in)
        txt_in, txt_gate2 = _modulate(self.txt_norm2(txt), txt_mod2)
        txt = txt + txt_gate2 * self.txt_mlp(txt_in)
        return txt, img


class TimestepEmbedder(nn.Module):
    def __init__(self, dim: int, ops: Any, factory: Mapping[str, Any]) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(TIME_DIM, dim, **factory)
        self.linear_2 = ops.Linear(dim, dim, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class TimeTextEmbed(nn.Module):
    def __init__(self, dim: int, ops: Any, factory: Mapping[str, Any]) -> None:
        super().__init__()
        self.timestep_embedder = TimestepEmbedder(dim, ops, factory)

    def forward(self, sigma: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.timestep_embedder(timestep_embedding(sigma, TIME_DIM).to(dtype))  # [B, dim]


class NormOut(nn.Module):
    """LayerNorm without affine, then `(1 + scale) x + shift`, (scale, shift) = linear(silu(temb))."""

    def __init__(self, dim: int, ops: Any, factory: Mapping[str, Any]) -> None:
        super().__init__()
        self.linear = ops.Linear(dim, 2 * dim, bias=True, **factory)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        scale, shift = self.linear(F.silu(temb)).chunk(2, dim=-1)
        x = F.layer_norm(x, (x.shape[-1],), None, None, 1e-6)
        return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


@comfyui_name("LensTransformer2DModel")
class LensTransformer(nn.Module):
    """Lens's transformer (see the module docstring), built from a `LensConfig`."""

    def __init__(self, config: LensConfig, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        dim = config.inner_dim
        self.pos_embed = EmbedND(config.head_dim, ROPE_THETA, rope_axes(config.head_dim))
        self.time_text_embed = TimeTextEmbed(dim, ops, factory)
        if config.multi_layer:
            self.txt_norm = nn.ModuleList(RMSNorm(config.enc_dim, 1e-5, factory) for _ in range(config.taps))
        else:
            self.txt_norm = RMSNorm(config.enc_dim, 1e-5, factory)
        self.txt_in = ops.Linear(config.enc_dim * config.taps, dim, bias=True, **factory)
        self.img_in = ops.Linear(config.in_channels, dim, bias=True, **factory)
        self.transformer_blocks = nn.ModuleList(LensBlock(config, ops, factory) for _ in range(config.layers))
        self.norm_out = NormOut(dim, ops, factory)
        self.proj_out = ops.Linear(dim, config.patch ** 2 * config.out_channels, bias=True, **factory)

    @classmethod
    def from_config(cls, config: LensConfig, **kwargs: Any) -> "LensTransformer":
        return cls(config, **kwargs)

    def _text(self, context: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        config = self.config
        b, seq, _ = context.shape
        context = context.to(dtype)
        if config.multi_layer:
            parts = context.reshape(b, seq, config.taps, config.enc_dim).unbind(dim=2)
            context = torch.cat([norm(part) for norm, part in zip(self.txt_norm, parts)], dim=-1)
        else:
            context = self.txt_norm(context)
        return self.txt_in(context)  # [B, T, dim]

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
                attention_mask: torch.Tensor | None = None, transformer_options: Mapping[str, Any] = {},
                control: Mapping[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, 128, h, w]` (Flux.2's patched latent), timesteps (sigma) `[B]`, context
        `[B, T, taps * enc_dim]`, attention_mask `[B, T]` (1 keeps a text token) -> `[B, 128, h, w]`."""
        options = dict(transformer_options or {})
        config = self.config
        if x.ndim != 4 or x.shape[1] != config.in_channels:
            raise LensInputError(f"Lens: the latent must be [B, {config.in_channels}, h, w] (Flux.2's latent), "
                                 f"got {tuple(x.shape)}")
        if context.ndim != 3 or context.shape[-1] != config.context_width:
            raise LensInputError(
                f"Lens expects conditioning with {config.taps}x{config.enc_dim}={config.context_width} features "
                f"(a {config.taps}-layer GPT-OSS stack) but got {tuple(context.shape)}; load the text encoder with "
                "CLIPLoader type 'lens'")
        bs, c, h, w = x.shape
        if context.shape[0] != bs:
            context = context.expand(bs, -1, -1) if context.shape[0] == 1 else context
        text_len = context.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones(bs, text_len, dtype=torch.bool, device=x.device)
        elif attention_mask.shape[0] != bs and attention_mask.shape[0] == 1:
            attention_mask = attention_mask.expand(bs, -1)
        bias = joint_key_bias(attention_mask.to(x.device), h * w)  # [B, 1, 1, L]
        patches = options.get("patches", {}) or {}
        blocks_replace = (options.get("patches_replace", {}) or {}).get("dit", {}) or {}

        img = self.img_in(x.permute(0, 2, 3, 1).reshape(bs, h * w, c))  # [B, h w, dim]
        txt = self._text(context, img.dtype)
        for patch in patches.get("post_input", ()):
            out = patch({"img": img, "txt": txt, "transformer_options": options})
            img, txt = out["img"], out["txt"]
        temb = self.time_text_embed(timesteps.to(img.dtype), img.dtype)  # [B, dim]
        pe = self.pos_embed(position_ids(h, w, text_len, x.device).unsqueeze(0))  # [1, 1, L, D/2, 2, 2]

        options["total_blocks"] = len(self.transformer_blocks)
        options["block_type"] = "double"
        for i, block in enumerate(self.transformer_blocks):
            options["block_index"] = i
            if ("double_block", i) in blocks_replace:
                def original(args: Mapping[str, Any], block: nn.Module = block) -> dict[str, torch.Tensor]:
                    txt_out, img_out = block(args["img"], args["txt"], args["vec"], args["pe"], args.get("attn_mask"),
                                             args.get("transformer_options") or {})
                    return {"txt": txt_out, "img": img_out}

                out = blocks_replace[("double_block", i)](
                    {"img": img, "txt": txt, "vec": temb, "pe": pe, "attn_mask": bias, "transformer_options": options},
                    {"original_block": original})
                txt, img = out["txt"], out["img"]
            else:
                txt, img = block(img, txt, temb, pe, bias, options)
            for patch in patches.get("double_block", ()):
                out = patch({"img": img, "txt": txt, "x": x, "block_index": i, "transformer_options": options})
                img, txt = out["img"], out["txt"]
            if control is not None:
                added = (control.get("input") or [])
                if i < len(added) and added[i] is not None:
                    img = img.clone()
                    img[:, :added[i].shape[1]] += added[i]
        out = self.proj_out(self.norm_out(img, temb))  # [B, h w, 128]
        return out.reshape(bs, h, w, -1).permute(0, 3, 1, 2).contiguous()


__all__ = ["LensConfig", "LensConfigError", "LensInputError", "LensTransformer", "joint_key_bias", "position_ids",
           "rope_axes"]

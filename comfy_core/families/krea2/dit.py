"""Krea 2's diffusion transformer and `Krea2Config` read from weights.

Architecture of Krea's Krea 2 (K2, 2026: Raw and the distilled Turbo), as ComfyUI's
`comfy/ldm/krea2/model.py` (`SingleStreamDiT`) and diffusers' `Krea2Transformer2DModel` describe it;
written here from those descriptions, in ComfyUI's module names (the released files' names):

- the text: 12 tapped Qwen3-VL 4B hidden states per token (`[B, T, 12 * 2560]`, layer-major, from
  CLIPLoader type "krea2": `clip.py`) -> `txtfusion`: two blocks attending across the 12 layers of
  each token, a `projector` Linear(12 -> 1) collapsing the layer axis, two refiner blocks attending
  across the tokens (no RoPE) -> `txtmlp` (RMSNorm, Linear, tanh-GELU, Linear) to the model width;
- the latent in 2x2 patches (`first`, channel-major within a patch), concatenated after the text:
  one `[text, image]` sequence through `blocks` (single-stream);
- the time: Flux's sinusoid of `1000 sigma` (cos half first, 256 wide) -> `tmlp` (Linear, tanh-GELU,
  Linear) = `t`; `tproj` (tanh-GELU, Linear to 6 widths) = the shared modulation; each block adds
  its own learned `mod.lin` (6 x width) and splits pre-scale / shift / gate, post-scale / shift /
  gate: `x += pregate * attn((1 + prescale) prenorm(x) + preshift)`, likewise the SwiGLU MLP;
- every RMSNorm stores a zero-centred scale (the multiplier is `1 + scale`, eps 1e-5, in float32);
- attention: grouped query heads (`wq` / `wk` / `wv`, the key/value heads repeated), per-head
  RMS-normed q / k (`qknorm`), Flux's RoPE over 3 axes (`headdim - 12 (headdim/16)`, `6 (headdim/16)`
  twice: 32 / 48 / 48 for heads of 128, base 1000) with the text at (0, 0, 0) and patch (r, c) at
  (0, r, c), the output gated by `sigmoid(gate(x))` before `wo`;
- the output: `last` (RMSNorm, `(1 + scale) * . + shift` with (scale, shift) = `t + modulation.lin`,
  Linear), the image positions unpatchified, the padding cropped.

Reference latents (ComfyUI's newer `SingleStreamDiT`, used by the style-reference template through
ReferenceLatent-style conditioning and FluxKontextMultiReferenceLatentMethod): only when a
reference method is given (`ref_latents_method`), reference k's patches follow the image at
positions (k, r, c); with "index_timestep_zero" their tokens are modulated by the time embedding of
sigma 0. The network attends to every text state (ComfyUI passes no mask).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.attention.rope import apply_rope
from comfy_core.families.flux.blocks import EmbedND, timestep_embedding
from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

PATCH = 2
ROPE_THETA = 1000.0
EPS = 1e-5
REF_METHODS = ("index", "index_timestep_zero", "offset", "uxo")


class Krea2ConfigError(ValueError):
    """The Krea 2 weights are incomplete or inconsistent, or the parameters are impossible."""


class Krea2InputError(ValueError):
    """Inputs the Krea 2 network cannot take."""


def rope_axes(head_dim: int) -> tuple[int, int, int]:
    """ComfyUI's split of a head over (index, row, column): 32 / 48 / 48 for 128 channels."""
    unit = head_dim // 16
    return (head_dim - 12 * unit, 6 * unit, 6 * unit)


@dataclass(frozen=True)
class Krea2Config:
    """The network's structure (the released Krea 2's: 6144 wide, 48 query / 12 key-value heads of
    128, 28 blocks, 16 latent channels in 2x2 patches, 12 taps of a 2560-wide Qwen3-VL 4B)."""

    features: int = 6144
    heads: int = 48
    kvheads: int = 12
    layers: int = 28
    mlp_dim: int = 16384
    channels: int = 16
    patch: int = PATCH
    tdim: int = 256
    txtdim: int = 2560
    txtlayers: int = 12
    txtheads: int = 20
    txtkvheads: int = 20
    txt_mlp_dim: int = 6912
    txt_layerwise_blocks: int = 2
    txt_refiner_blocks: int = 2
    theta: float = ROPE_THETA

    def __post_init__(self) -> None:
        if self.heads <= 0 or self.features % self.heads or self.heads % max(self.kvheads, 1):
            raise Krea2ConfigError(f"Krea 2: width {self.features} with {self.heads} query / {self.kvheads} "
                                   "key-value heads is impossible")
        if self.txtheads <= 0 or self.txtdim % self.txtheads or self.txtheads % max(self.txtkvheads, 1):
            raise Krea2ConfigError(f"Krea 2: text width {self.txtdim} with {self.txtheads} / {self.txtkvheads} "
                                   "heads is impossible")
        axes = rope_axes(self.head_dim)
        if any(a <= 0 or a % 2 for a in axes):
            raise Krea2ConfigError(f"Krea 2: heads of {self.head_dim} channels give RoPE axes {list(axes)}")

    @property
    def head_dim(self) -> int:
        return self.features // self.heads

    @property
    def latent_channels(self) -> int:
        return self.channels

    @property
    def context_width(self) -> int:
        return self.txtlayers * self.txtdim

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (its `model_detection` for Krea 2)."""
        return {"image_model": "krea2", "features": self.features, "channels": self.channels,
                "patch": self.patch, "layers": self.layers, "heads": self.heads, "kvheads": self.kvheads,
                "txtlayers": self.txtlayers, "txtdim": self.txtdim}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Krea2Config":
        """The structure from names and shapes under `prefix`: ComfyUI reads width and channels from
        `first`, heads from `wq` / `wk` over heads of 128, the taps from the projector, the text
        width from the first fusion norm; here the head width is the q-norm's, so reduced models
        (and the text blocks' heads, ComfyUI's fixed 20) are read too."""
        shape = shape_reader(tensors, prefix, Krea2ConfigError, "Krea 2")
        first = shape("first.weight")
        features, patched = first
        if patched % (PATCH * PATCH):
            raise Krea2ConfigError(f"Krea 2: first.weight takes {patched} inputs, not 2x2 patches")
        head = shape("blocks.0.attn.qknorm.qnorm.scale")[0]
        txtdim = shape("txtfusion.layerwise_blocks.0.prenorm.scale")[0]
        txt_head = shape("txtfusion.layerwise_blocks.0.attn.qknorm.qnorm.scale")[0]
        if head <= 0 or txt_head <= 0:
            raise Krea2ConfigError("Krea 2: empty q-norm")
        return cls(
            features=features, heads=shape("blocks.0.attn.wq.weight")[0] // head,
            kvheads=shape("blocks.0.attn.wk.weight")[0] // head,
            layers=count_numbered(tensors, prefix, "blocks", Krea2ConfigError, "Krea 2"),
            mlp_dim=shape("blocks.0.mlp.gate.weight")[0], channels=patched // (PATCH * PATCH),
            tdim=shape("tmlp.0.weight")[1], txtdim=txtdim, txtlayers=shape("txtfusion.projector.weight")[1],
            txtheads=shape("txtfusion.layerwise_blocks.0.attn.wq.weight")[0] // txt_head,
            txtkvheads=shape("txtfusion.layerwise_blocks.0.attn.wk.weight")[0] // txt_head,
            txt_mlp_dim=shape("txtfusion.layerwise_blocks.0.mlp.gate.weight")[0],
            txt_layerwise_blocks=count_numbered(tensors, prefix, "txtfusion.layerwise_blocks", Krea2ConfigError,
                                                "Krea 2"),
            txt_refiner_blocks=count_numbered(tensors, prefix, "txtfusion.refiner_blocks", Krea2ConfigError,
                                              "Krea 2"))


def _param(p: torch.Tensor, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    return p.to(device=like.device, dtype=dtype or like.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with a zero-centred `scale` (multiplier `1 + scale`), computed in float32."""

    def __init__(self, features: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.zeros(features, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = _param(self.scale, x, torch.float32) + 1.0
        return F.rms_norm(x.float(), (x.shape[-1],), weight=weight, eps=EPS).to(x.dtype)


class QKNorm(nn.Module):
    def __init__(self, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.qnorm = RMSNorm(dim, factory)
        self.knorm = RMSNorm(dim, factory)


class SwiGLU(nn.Module):
    """`down(silu(gate(x)) * up(x))`, no biases."""

    def __init__(self, dim: int, hidden: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.gate = ops.Linear(dim, hidden, bias=False, **factory)
        self.up = ops.Linear(dim, hidden, bias=False, **factory)
        self.down = ops.Linear(hidden, dim, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Attention(nn.Module):
    """Grouped-query self-attention, RMS-normed q / k per head, optional RoPE, sigmoid output gate."""

    def __init__(self, dim: int, heads: int, kvheads: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads, self.kvheads, self.head_dim = heads, kvheads, dim // heads
        self.wq = ops.Linear(dim, self.head_dim * heads, bias=False, **factory)
        self.wk = ops.Linear(dim, self.head_dim * kvheads, bias=False, **factory)
        self.wv = ops.Linear(dim, self.head_dim * kvheads, bias=False, **factory)
        self.gate = ops.Linear(dim, dim, bias=False, **factory)
        self.qknorm = QKNorm(self.head_dim, factory)
        self.wo = ops.Linear(dim, dim, bias=False, **factory)

    def forward(self, x: torch.Tensor, pe: torch.Tensor | None, options: Mapping[str, Any]) -> torch.Tensor:
        """x `[B, L, dim]`, pe `[B, 1, L, D/2, 2, 2]` or None -> `[B, L, dim]`."""
        b, n, _ = x.shape
        d = self.head_dim
        q = self.qknorm.qnorm(self.wq(x).view(b, n, self.heads, d).transpose(1, 2))  # [B, H, L, D]
        k = self.qknorm.knorm(self.wk(x).view(b, n, self.kvheads, d).transpose(1, 2))  # [B, Hkv, L, D]
        v = self.wv(x).view(b, n, self.kvheads, d).transpose(1, 2)
        if pe is not None:
            q, k = apply_rope(q, k, pe)
        if self.kvheads != self.heads:
            k = k.repeat_interleave(self.heads // self.kvheads, dim=1)
            v = v.repeat_interleave(self.heads // self.kvheads, dim=1)
        out = calling.attend(q, k, v, self.heads, skip_reshape=True, transformer_options=options)  # [B, L, H*D]
        return self.wo(out * torch.sigmoid(self.gate(x)))


class TextFusionBlock(nn.Module):
    def __init__(self, config: Krea2Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim = config.txtdim
        self.prenorm = RMSNorm(dim, factory)
        self.postnorm = RMSNorm(dim, factory)
        self.attn = Attention(dim, config.txtheads, config.txtkvheads, ops, factory)
        self.mlp = SwiGLU(dim, config.txt_mlp_dim, ops, factory)

    def forward(self, x: torch.Tensor, options: Mapping[str, Any]) -> torch.Tensor:
        x = x + self.attn(self.prenorm(x), None, options)
        return x + self.mlp(self.postnorm(x))


class TextFusion(nn.Module):
    """`[B, T, n, d]` tapped states -> `[B, T, d]` (see the module doc)."""

    def __init__(self, config: Krea2Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.layerwise_blocks = nn.ModuleList(TextFusionBlock(config, ops, factory)
                                              for _ in range(config.txt_layerwise_blocks))
        self.projector = ops.Linear(config.txtlayers, 1, bias=False, **factory)
        self.refiner_blocks = nn.ModuleList(TextFusionBlock(config, ops, factory)
                                            for _ in range(config.txt_refiner_blocks))

    def forward(self, x: torch.Tensor, options: Mapping[str, Any]) -> torch.Tensor:
        b, t, n, d = x.shape
        x = x.reshape(b * t, n, d)
        for block in self.layerwise_blocks:
            x = block(x.contiguous(), options)
        x = self.projector(x.reshape(b, t, n, d).transpose(2, 3)).squeeze(-1)  # [B, T, d]
        for block in self.refiner_blocks:
            x = block(x, options)
        return x


class Modulation(nn.Module):
    """A block's learned offsets `lin` (6 x width, flat) added to the shared modulation."""

    def __init__(self, dim: int, rows: int, factory: dict[str, Any], flat: bool = True) -> None:
        super().__init__()
        self.lin = nn.Parameter(torch.zeros(rows * dim if flat else (rows, dim), **factory))


def _modulate(h: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, split: int | None,
              scale0: torch.Tensor | None, shift0: torch.Tensor | None) -> torch.Tensor:
    """`(1 + scale) h + shift`; with `split`, the tokens from `split` on take the sigma-0 pair."""
    if split is None:
        return (1 + scale) * h + shift
    return torch.cat(((1 + scale) * h[:, :split] + shift, (1 + scale0) * h[:, split:] + shift0), dim=1)


def _gate(h: torch.Tensor, gate: torch.Tensor, split: int | None, gate0: torch.Tensor | None) -> torch.Tensor:
    if split is None:
        return gate * h
    return torch.cat((gate * h[:, :split], gate0 * h[:, split:]), dim=1)


class SingleStreamBlock(nn.Module):
    def __init__(self, config: Krea2Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim = config.features
        self.mod = Modulation(dim, 6, factory)
        self.prenorm = RMSNorm(dim, factory)
        self.postnorm = RMSNorm(dim, factory)
        self.attn = Attention(dim, config.heads, config.kvheads, ops, factory)
        self.mlp = SwiGLU(dim, config.mlp_dim, ops, factory)

    def forward(self, x: torch.Tensor, vec: torch.Tensor, pe: torch.Tensor, options: Mapping[str, Any],
                split: int | None = None, vec0: torch.Tensor | None = None) -> torch.Tensor:
        """x `[B, L, dim]`, vec / vec0 `[B, 1, 6 dim]` (vec0: sigma 0's, for the tokens from `split` on)."""
        m = (vec + _param(self.mod.lin, vec)).chunk(6, dim=-1)
        m0 = (vec0 + _param(self.mod.lin, vec0)).chunk(6, dim=-1) if split is not None else (None,) * 6
        h = _modulate(self.prenorm(x), m[0], m[1], split, m0[0], m0[1])
        x = x + _gate(self.attn(h, pe, options), m[2], split, m0[2])
        h = _modulate(self.postnorm(x), m[3], m[4], split, m0[3], m0[4])
        return x + _gate(self.mlp(h), m[5], split, m0[5])


class LastLayer(nn.Module):
    def __init__(self, config: Krea2Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim = config.features
        self.norm = RMSNorm(dim, factory)
        self.linear = ops.Linear(dim, config.patch ** 2 * config.channels, bias=True, **factory)
        self.modulation = Modulation(dim, 2, factory, flat=False)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """x `[B, L, dim]`, t `[B, 1, dim]`."""
        scale, shift = (t + _param(self.modulation.lin, t).unsqueeze(0)).chunk(2, dim=1)  # [B, 1, dim] each
        return self.linear((1 + scale) * self.norm(x) + shift)


def image_tokens(x: torch.Tensor, p: int, index: int = 0) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """`[B, C, H, W]` padded to `p` -> tokens `[B, h w, C p p]` (channel-major), ids `[B, h w, 3]` = (index, r, c)."""
    x = pad_to_patch_size(x, (p, p))
    b, c, hh, ww = x.shape
    h, w = hh // p, ww // p
    tokens = x.reshape(b, c, h, p, w, p).permute(0, 2, 4, 1, 3, 5).reshape(b, h * w, c * p * p)
    ids = torch.zeros(h, w, 3, device=x.device, dtype=torch.float32)
    ids[..., 0] = float(index)
    ids[..., 1] = torch.arange(h, device=x.device, dtype=torch.float32)[:, None]
    ids[..., 2] = torch.arange(w, device=x.device, dtype=torch.float32)[None, :]
    return tokens, ids.reshape(1, h * w, 3).expand(b, -1, -1), h, w


@comfyui_name("SingleStreamDiT")
class Krea2Transformer(nn.Module):
    """Krea 2's transformer (see the module docstring), built from a `Krea2Config`."""

    def __init__(self, config: Krea2Config, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.patch = config.patch
        self.channels = config.channels
        dim = config.features
        self.pe_embedder = EmbedND(config.head_dim, int(config.theta), rope_axes(config.head_dim))
        self.first = ops.Linear(config.channels * config.patch ** 2, dim, bias=True, **factory)
        self.blocks = nn.ModuleList(SingleStreamBlock(config, ops, factory) for _ in range(config.layers))
        self.tmlp = nn.Sequential(ops.Linear(config.tdim, dim, **factory), nn.GELU(approximate="tanh"),
                                  ops.Linear(dim, dim, **factory))
        self.txtfusion = TextFusion(config, ops, factory)
        self.txtmlp = nn.Sequential(RMSNorm(config.txtdim, factory), ops.Linear(config.txtdim, dim, **factory),
                                    nn.GELU(approximate="tanh"), ops.Linear(dim, dim, **factory))
        self.last = LastLayer(config, ops, factory)
        self.tproj = nn.Sequential(nn.GELU(approximate="tanh"), ops.Linear(dim, 6 * dim, **factory))
        self.default_ref_method: str | None = None

    @classmethod
    def from_config(cls, config: Krea2Config, **kwargs: Any) -> "Krea2Transformer":
        return cls(config, **kwargs)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target (ComfyUI's generic names; diffusers' / PEFT's `transformer.*`)."""
        from comfy_core.families.krea2.keys import lora_key_map

        return lora_key_map(names)

    def _time(self, timesteps: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.tmlp(timestep_embedding(timesteps, self.config.tdim).unsqueeze(1).to(dtype))  # [B, 1, dim]
        return t, self.tproj(t)  # [B, 1, dim], [B, 1, 6 dim]

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
                ref_latents: Sequence[torch.Tensor] | None = None, transformer_options: Mapping[str, Any] = {},
                **kwargs: Any) -> torch.Tensor:
        """x `[B, C, H, W]` (or `[B, C, T, H, W]`, frames apart), timesteps (sigma) `[B]`, context
        `[B, T, txtlayers * txtdim]` -> `[B, C, H, W]`."""
        options = dict(transformer_options or {})
        config = self.config
        temporal = x.ndim == 5
        if temporal:
            b5, c5, t5, h5, w5 = x.shape
            x = x.movedim(2, 1).reshape(b5 * t5, c5, h5, w5)
        if x.ndim != 4:
            raise Krea2InputError(f"Krea 2: the latent must be [B, C, H, W], got {tuple(x.shape)}")
        if context.ndim != 3 or context.shape[-1] != config.context_width:
            raise Krea2InputError(
                f"Krea 2 expects conditioning with {config.txtlayers}x{config.txtdim}={config.context_width} "
                f"features (a {config.txtlayers}-layer Qwen3-VL stack) but got {tuple(context.shape)}; load the "
                "text encoder with CLIPLoader type 'krea2'")
        bs, _, h_orig, w_orig = x.shape
        p = self.patch
        img, img_ids, h, w = image_tokens(x, p)
        img_count = img.shape[1]
        method = kwargs.get("ref_latents_method") or options.get("ref_latents_method") or self.default_ref_method
        split = None
        if method is not None and ref_latents:
            if method not in REF_METHODS:
                raise Krea2InputError(f"Krea 2: unknown reference latents method {method!r}")
            tokens, ids = [img], [img_ids]
            for index, ref in enumerate(ref_latents, start=1):
                if ref.ndim == 5:
                    ref = ref.movedim(2, 1).reshape(-1, ref.shape[1], ref.shape[-2], ref.shape[-1])
                if ref.shape[0] != bs:
                    ref = ref.repeat((bs + ref.shape[0] - 1) // ref.shape[0], 1, 1, 1)[:bs]
                ref_tokens, ref_ids, _, _ = image_tokens(ref.to(x), p, index)
                tokens.append(ref_tokens)
                ids.append(ref_ids)
            img, img_ids = torch.cat(tokens, dim=1), torch.cat(ids, dim=1)
            if method == "index_timestep_zero":
                split = img_count
        img = self.first(img)
        t, vec = self._time(timesteps, img.dtype)
        vec0 = self._time(torch.zeros_like(timesteps), img.dtype)[1] if split is not None else None
        b, seq, _ = context.shape
        txt = self.txtfusion(context.to(img.dtype).reshape(b, seq, config.txtlayers, config.txtdim), options)
        txt = self.txtmlp(txt)  # [B, T, dim]
        if txt.shape[0] != bs:
            txt = txt.expand(bs, -1, -1) if txt.shape[0] == 1 else txt
        txt_len = txt.shape[1]
        combined = torch.cat((txt, img), dim=1)
        ids = torch.cat((torch.zeros(bs, txt_len, 3, device=x.device), img_ids.to(x.device)), dim=1)
        pe = self.pe_embedder(ids)  # [B, 1, L, D/2, 2, 2]
        start = None if split is None else txt_len + split
        for block in self.blocks:
            combined = block(combined, vec, pe, options, start, vec0)
        out = self.last(combined, t)[:, txt_len:txt_len + img_count]  # [B, h w, C p p]
        c = config.channels
        out = out.reshape(bs, h, w, c, p, p).permute(0, 3, 1, 4, 2, 5).reshape(bs, c, h * p, w * p)
        out = out[:, :, :h_orig, :w_orig]
        if temporal:
            out = out.reshape(b5, t5, c, h_orig, w_orig).movedim(1, 2)
        return out


__all__ = ["Krea2Config", "Krea2ConfigError", "Krea2InputError", "Krea2Transformer", "REF_METHODS", "rope_axes"]

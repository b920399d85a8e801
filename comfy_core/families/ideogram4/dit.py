"""Ideogram 4's diffusion transformer and `Ideogram4Config` read from weights.

Architecture of Ideogram's open-weights Ideogram 4 (2026; ComfyUI's `comfy/ldm/ideogram4/model.py`:
`Ideogram4Transformer2DModel`, diffusers' `Ideogram4Transformer2DModel`), written here from those
descriptions. One single-stream DiT over a packed sequence `[text tokens, image tokens]`:

- image tokens: ComfyUI hands the network Flux.2's 128-channel latent (32 autoencoder channels
  patched 2x2, channel `c * 4 + 2 * pi + pj`); each latent pixel is one token whose 128 features
  are reordered to `(pi, pj, c)` (Ideogram's packing), projected by `input_proj`; text rows carry
  zeros there;
- text tokens: the Qwen3-VL features (13 tapped layers interleaved per channel, 53248 wide for the
  8B: `clip.py`) through `llm_cond_norm` (RMSNorm, eps 1e-6) and `llm_cond_proj`, on the text rows
  only; every row then gets `embed_image_indicator[is_image]`;
- time: the network is given ComfyUI's sigma (multiplier 1) and runs on Ideogram's time
  `t = 1 - sigma` (0 noise, 1 clean): a sinusoid of `1e4 * t` (sin half first, frequencies
  `exp(-ln(1e4) * i / (half - 1))`), `t_embedding.mlp_in` / SiLU / `mlp_out`, then
  `adaln_input = silu(adaln_proj(.))` shared by every block;
- each block: `mod = adaln_modulation(adaln_input)` -> scale / gate (tanh) for attention and MLP;
  `x += tanh(g1) * norm2(attn(norm1(x) * (1 + s1)))`, `x += tanh(g2) * norm4(ffn(norm3(x) * (1 + s2)))`
  (RMSNorms with weights, eps 1e-5); attention: fused `qkv` without bias, per-head RMSNorm of q and
  k (eps 1e-5), 3-axis interleaved M-RoPE (base 5e6, Qwen3-VL's sections 24 / 20 / 20 over the
  head's frequency pairs, the rest on the first axis), `o`; the SwiGLU `w2(silu(w1 x) * w3 x)`;
- output: LayerNorm without affine (eps 1e-6) `* (1 + final_layer.adaln_modulation(silu(adaln_input)))`,
  `final_layer.linear`, the image rows back to the latent's layout, negated (ComfyUI's: Ideogram
  predicts `d x / d t`, the sampler wants `d x / d sigma`).

Positions `(t, h, w)`: text token i at `(i, i, i)`, image token (r, c) at `(0, r, c) + 65536`.
Attention: one segment (every token sees every other) unless the text carries an attention mask;
then the masked text rows form a segment of their own (they see only each other) and lose their
text features and indicator, as ComfyUI's block-diagonal mask has it. Without a context (`None`) the
sequence is the image alone (the unconditional network's image-only pass); ComfyUI's template runs
its unconditional file on ConditioningZeroOut's zero features instead, which the network reads as
text rows (their projection's bias).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.families.zimage.nextdit import RMSNorm
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

ROPE_THETA = 5_000_000.0
MROPE_SECTION = (24, 20, 20)  # frequency pairs of (t, h, w), interleaved (Qwen3-VL's)
IMAGE_POSITION_OFFSET = 65536  # image positions never meet text positions
TEXT_INDICATOR, IMAGE_INDICATOR, PAD_INDICATOR = 3, 2, 0
PATCH = 2  # Flux.2's latent channel = 32 autoencoder channels x 2 x 2
NORM_EPS = 1e-5
LLM_NORM_EPS = 1e-6
FINAL_EPS = 1e-6
TIME_SCALE = 1e4


class Ideogram4ConfigError(ValueError):
    """The Ideogram 4 weights are incomplete or inconsistent, or the parameters are impossible."""


class Ideogram4InputError(ValueError):
    """Inputs the Ideogram 4 network cannot take."""


@dataclass(frozen=True)
class Ideogram4Config:
    """The network's structure (the release's: 18 heads of 256 = 4608 wide, 34 layers, SwiGLU 12288,
    adaLN 512, 128 input channels, 53248-wide text features)."""

    in_channels: int = 128
    num_layers: int = 34
    num_attention_heads: int = 18
    attention_head_dim: int = 256
    intermediate_size: int = 12288
    adaln_dim: int = 512
    llm_features_dim: int = 53248
    rope_theta: float = ROPE_THETA
    mrope_section: tuple[int, int, int] = MROPE_SECTION

    def __post_init__(self) -> None:
        object.__setattr__(self, "mrope_section", tuple(int(s) for s in self.mrope_section))
        if self.in_channels % (PATCH * PATCH):
            raise Ideogram4ConfigError(f"Ideogram 4: {self.in_channels} input channels are not 2x2 patches")
        if self.attention_head_dim % 2 or 3 * max(self.mrope_section[1:]) > self.attention_head_dim // 2:
            raise Ideogram4ConfigError(f"Ideogram 4: heads of {self.attention_head_dim} channels cannot hold the "
                                       f"M-RoPE sections {list(self.mrope_section)}")

    @property
    def hidden_size(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def latent_channels(self) -> int:
        return self.in_channels

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (`image_model` "ideogram4" and the constructor's arguments)."""
        return {"image_model": "ideogram4", "in_channels": self.in_channels, "num_layers": self.num_layers,
                "num_attention_heads": self.num_attention_heads, "attention_head_dim": self.attention_head_dim,
                "intermediate_size": self.intermediate_size, "adaln_dim": self.adaln_dim,
                "llm_features_dim": self.llm_features_dim, "rope_theta": int(self.rope_theta),
                "mrope_section": list(self.mrope_section), "norm_eps": NORM_EPS}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Ideogram4Config":
        """The structure from names and shapes under `prefix` (ComfyUI's names). Widths are read from
        row counts and unquantised vectors, so packed quantised layers do not hide them; the RoPE
        base and sections are the release's (not in the weights)."""
        shape = shape_reader(tensors, prefix, Ideogram4ConfigError, "Ideogram 4")
        hidden = shape("embed_image_indicator.weight")[-1]
        head_dim = shape("layers.0.attention.norm_q.weight")[0]
        if head_dim <= 0 or hidden % head_dim:
            raise Ideogram4ConfigError(f"Ideogram 4: width {hidden} is not a multiple of its {head_dim}-channel heads")
        in_channels = shape("final_layer.linear.weight")[0]
        if shape("input_proj.weight")[0] != hidden:
            raise Ideogram4ConfigError(f"Ideogram 4: input_proj gives {shape('input_proj.weight')[0]} features, the "
                                       f"network is {hidden} wide")
        layers = count_numbered(tensors, prefix, "layers", Ideogram4ConfigError, "Ideogram 4")
        return cls(in_channels=in_channels, num_layers=layers, num_attention_heads=hidden // head_dim,
                   attention_head_dim=head_dim, intermediate_size=shape("layers.0.feed_forward.w1.weight")[0],
                   adaln_dim=shape("adaln_proj.weight")[0], llm_features_dim=shape("llm_cond_norm.weight")[0])


def time_sinusoid(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Ideogram's scalar embedding input: `[...] -> [..., dim]` float32, sin then cos of
    `1e4 * t * exp(-ln(1e4) * i / (dim/2 - 1))` (zero-padded when `dim` is odd)."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.float32, device=t.device) * -(math.log(1e4) / (half - 1)))
    args = (TIME_SCALE * t.float())[..., None] * freqs
    out = torch.cat([torch.sin(args), torch.cos(args)], dim=-1)
    return F.pad(out, (0, 1)) if dim % 2 else out


def mrope_tables(positions: torch.Tensor, head_dim: int, theta: float, sections: tuple[int, ...]
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions `[L, 3]` (t, h, w) -> cos, sin `[L, head_dim]` float32 of the interleaved M-RoPE in
    rotate-half layout: frequency pair j turns with t, except pairs 1, 4, 7, ... below
    `3 * sections[1]` (h) and 2, 5, 8, ... below `3 * sections[2]` (w); angles in float32 as
    ComfyUI's and diffusers' (the 65536 offset makes them large, so the products must round alike)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim))
    freqs = positions.to(torch.float32).t()[:, :, None] * inv_freq  # [3, L, d/2]
    chosen = freqs[0].clone()
    for axis in (1, 2):
        pairs = slice(axis, 3 * sections[axis], 3)
        chosen[:, pairs] = freqs[axis][:, pairs]
    angles = torch.cat((chosen, chosen), dim=-1)  # [L, d]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x `[B, L, H, D]`, cos / sin `[L, D]` -> `x cos + rotate_half(x) sin` in float32, in x's dtype."""
    xf = x.float()
    lo, hi = xf.chunk(2, dim=-1)
    return (xf * cos[:, None] + torch.cat([-hi, lo], dim=-1) * sin[:, None]).to(x.dtype)


def latent_to_tokens(x: torch.Tensor) -> torch.Tensor:
    """`[B, 4c, h, w]` (channel `c * 4 + 2 * pi + pj`) -> `[B, h*w, 4c]` with features `(pi, pj, c)`."""
    b, ch, h, w = x.shape
    return x.view(b, ch // (PATCH * PATCH), PATCH, PATCH, h, w).permute(0, 4, 5, 2, 3, 1).reshape(b, h * w, ch)


def tokens_to_latent(tokens: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """The inverse of `latent_to_tokens`: `[B, h*w, 4c]` -> `[B, 4c, h, w]`."""
    b, _, ch = tokens.shape
    return tokens.reshape(b, h, w, PATCH, PATCH, ch // (PATCH * PATCH)).permute(0, 5, 3, 4, 1, 2).reshape(b, ch, h, w)


def image_positions(h: int, w: int, device: Any) -> torch.Tensor:
    """`[h*w, 3]` positions `(0, r, c) + 65536` of the image tokens, row-major."""
    rows = torch.arange(h, device=device).view(-1, 1).expand(h, w).reshape(-1)
    cols = torch.arange(w, device=device).view(1, -1).expand(h, w).reshape(-1)
    return torch.stack([torch.zeros_like(rows), rows, cols], dim=1) + IMAGE_POSITION_OFFSET


class Attention(nn.Module):
    """Self-attention: fused `qkv`, per-head RMS-normed q / k, M-RoPE, `o` (no biases)."""

    def __init__(self, config: Ideogram4Config, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        dim, d = config.hidden_size, config.attention_head_dim
        self.heads, self.head_dim = config.num_attention_heads, d
        self.qkv = ops.Linear(dim, 3 * dim, bias=False, **factory)
        self.norm_q = RMSNorm(d, NORM_EPS, **factory)
        self.norm_k = RMSNorm(d, NORM_EPS, **factory)
        self.o = ops.Linear(dim, dim, bias=False, **factory)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, rope: tuple[torch.Tensor, torch.Tensor],
                transformer_options: Mapping[str, Any]) -> torch.Tensor:
        """x `[B, L, dim]`, mask additive `[B, 1, L, L]` or None -> `[B, L, dim]`."""
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).unbind(dim=2)  # [B, L, H, D] each
        q = apply_rope(self.norm_q(q), *rope).transpose(1, 2)
        k = apply_rope(self.norm_k(k), *rope).transpose(1, 2)
        v = v.transpose(1, 2)
        if mask is None:
            out = calling.attend(q, k, v, self.heads, skip_reshape=True, transformer_options=transformer_options)
        else:
            out = calling.attend_masked(q, k, v, self.heads, mask, skip_reshape=True,
                                        transformer_options=transformer_options)
        return self.o(out)  # out: [B, L, H*D]


class FeedForward(nn.Module):
    """SwiGLU `w2(silu(w1 x) * w3 x)`, no biases (ComfyUI's Lumina `FeedForward` names)."""

    def __init__(self, dim: int, hidden: int, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.w1 = ops.Linear(dim, hidden, bias=False, **factory)
        self.w2 = ops.Linear(hidden, dim, bias=False, **factory)
        self.w3 = ops.Linear(dim, hidden, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """One block (ComfyUI's `Ideogram4TransformerBlock`): tanh-gated, sandwich-normed attention and MLP."""

    def __init__(self, config: Ideogram4Config, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        dim = config.hidden_size
        self.attention = Attention(config, factory, ops)
        self.feed_forward = FeedForward(dim, config.intermediate_size, factory, ops)
        self.attention_norm1 = RMSNorm(dim, NORM_EPS, **factory)
        self.ffn_norm1 = RMSNorm(dim, NORM_EPS, **factory)
        self.attention_norm2 = RMSNorm(dim, NORM_EPS, **factory)
        self.ffn_norm2 = RMSNorm(dim, NORM_EPS, **factory)
        self.adaln_modulation = ops.Linear(config.adaln_dim, 4 * dim, bias=True, **factory)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, rope: tuple[torch.Tensor, torch.Tensor],
                adaln: torch.Tensor, transformer_options: Mapping[str, Any]) -> torch.Tensor:
        """x `[B, L, dim]`, adaln `[B, 1, adaln_dim]`."""
        scale_msa, gate_msa, scale_mlp, gate_mlp = self.adaln_modulation(adaln).chunk(4, dim=-1)
        attn = self.attention(self.attention_norm1(x) * (1.0 + scale_msa), mask, rope, transformer_options)
        x = x + torch.tanh(gate_msa) * self.attention_norm2(attn)
        mlp = self.feed_forward(self.ffn_norm1(x) * (1.0 + scale_mlp))
        return x + torch.tanh(gate_mlp) * self.ffn_norm2(mlp)


class EmbedScalar(nn.Module):
    """Ideogram's time embedding: the sinusoid of `1e4 * t`, `mlp_in`, SiLU, `mlp_out`."""

    def __init__(self, dim: int, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.dim = dim
        self.mlp_in = ops.Linear(dim, dim, bias=True, **factory)
        self.mlp_out = ops.Linear(dim, dim, bias=True, **factory)

    def forward(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.mlp_out(F.silu(self.mlp_in(time_sinusoid(t, self.dim).to(dtype))))


class FinalLayer(nn.Module):
    """LayerNorm without affine, `* (1 + adaln_modulation(silu(c)))`, `linear`."""

    def __init__(self, config: Ideogram4Config, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        dim = config.hidden_size
        self.linear = ops.Linear(dim, config.in_channels, bias=True, **factory)
        self.adaln_modulation = ops.Linear(config.adaln_dim, dim, bias=True, **factory)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        scale = 1.0 + self.adaln_modulation(F.silu(c))
        return self.linear(F.layer_norm(x, (x.shape[-1],), eps=FINAL_EPS) * scale)


@comfyui_name("Ideogram4Transformer2DModel")
class Ideogram4Transformer(nn.Module):
    """Ideogram 4's transformer (see the module docstring), built from an `Ideogram4Config`; the
    conditional and the unconditional releases are the same network."""

    def __init__(self, config: Ideogram4Config, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.in_channels = self.out_channels = config.in_channels
        dim = config.hidden_size
        self.input_proj = ops.Linear(config.in_channels, dim, bias=True, **factory)
        self.llm_cond_norm = RMSNorm(config.llm_features_dim, LLM_NORM_EPS, **factory)
        self.llm_cond_proj = ops.Linear(config.llm_features_dim, dim, bias=True, **factory)
        self.t_embedding = EmbedScalar(dim, factory, ops)
        self.adaln_proj = ops.Linear(dim, config.adaln_dim, bias=True, **factory)
        self.embed_image_indicator = nn.Embedding(2, dim, **factory)
        self.layers = nn.ModuleList(Block(config, factory, ops) for _ in range(config.num_layers))
        self.final_layer = FinalLayer(config, factory, ops)

    @classmethod
    def from_config(cls, config: Ideogram4Config, **kwargs: Any) -> "Ideogram4Transformer":
        return cls(config, **kwargs)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target: ComfyUI's generic names and diffusers' / PEFT's
        `transformer.<module>` (`keys.py`)."""
        from comfy_core.families.ideogram4.keys import lora_key_map

        return lora_key_map(names, self.config.hidden_size)

    def backbone(self, tokens: torch.Tensor, t: torch.Tensor, positions: torch.Tensor, indicator: torch.Tensor,
                 text: torch.Tensor | None, segments: torch.Tensor | None,
                 transformer_options: Mapping[str, Any]) -> torch.Tensor:
        """The packed sequence through the network: tokens `[B, L, C]` (zeros on text rows), t `[B]`
        (Ideogram's time), positions `[L, 3]`, indicator `[B, L]`, text `[B, T, F]` for the first T
        rows or None, segments `[B, L]` or None (one segment) -> `[B, L, C]`."""
        dtype = tokens.dtype
        image = (indicator == IMAGE_INDICATOR).to(dtype)[..., None]  # [B, L, 1]
        h = self.input_proj(tokens * image) * image  # [B, L, dim]
        adaln = F.silu(self.adaln_proj(self.t_embedding(t, dtype)[:, None]))  # [B, 1, adaln_dim]
        if text is not None:
            length = text.shape[1]
            rows = (indicator[:, :length] == TEXT_INDICATOR).to(dtype)[..., None]  # [B, T, 1]
            llm = self.llm_cond_proj(self.llm_cond_norm(text.to(dtype) * rows)) * rows
            h = torch.cat([h[:, :length] + llm, h[:, length:]], dim=1)
        h = h + self.embed_image_indicator((indicator == IMAGE_INDICATOR).long()).to(dtype)
        rope = mrope_tables(positions, self.config.attention_head_dim, self.config.rope_theta,
                            self.config.mrope_section)
        mask = None
        if segments is not None:  # block-diagonal: a token sees its own segment only
            same = segments[:, :, None] == segments[:, None, :]  # [B, L, L]
            mask = torch.zeros(same.shape, dtype=dtype, device=h.device).masked_fill_(
                ~same, -torch.finfo(dtype).max)[:, None]  # [B, 1, L, L]
        for block in self.layers:
            h = block(h, mask, rope, adaln, transformer_options)
        return self.final_layer(h, adaln)

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, transformer_options: Mapping[str, Any] | None = None,
                **kwargs: Any) -> torch.Tensor:
        """x `[B, C, h, w]`, timesteps `[B]` (sigma), context `[B, T, llm_features_dim]` or None (the
        image alone), attention_mask `[B, T]` (0: padding) or None -> `[B, C, h, w]` (`d x / d sigma`)."""
        options = dict(transformer_options or {})
        config = self.config
        if x.dim() != 4 or x.shape[1] != config.in_channels:
            raise Ideogram4InputError(f"Ideogram 4: the latent must be [B, {config.in_channels}, H, W], got "
                                      f"{tuple(x.shape)}")
        bsz, _, gh, gw = x.shape
        device = x.device
        t = 1.0 - timesteps.float()
        img = latent_to_tokens(x)  # [B, gh*gw, C]
        img_pos = image_positions(gh, gw, device)
        if context is None:
            indicator = torch.full(img.shape[:2], IMAGE_INDICATOR, dtype=torch.long, device=device)
            out = self.backbone(img, t, img_pos, indicator, None, None, options)
            return -tokens_to_latent(out, gh, gw)
        if context.dim() != 3 or context.shape[-1] != config.llm_features_dim:
            raise Ideogram4InputError(f"Ideogram 4: the text features must be [B, T, {config.llm_features_dim}], got "
                                      f"{tuple(context.shape)} (a text encoder of another model?)")
        if context.shape[0] != bsz:
            context = context.expand(bsz, -1, -1) if context.shape[0] == 1 else context
        length = context.shape[1]
        tokens = torch.cat([img.new_zeros(bsz, length, img.shape[-1]), img], dim=1)  # [B, T + gh*gw, C]
        text_pos = torch.arange(length, device=device)[:, None].expand(length, 3)
        positions = torch.cat([text_pos, img_pos], dim=0)  # [L, 3]
        indicator = torch.full(tokens.shape[:2], IMAGE_INDICATOR, dtype=torch.long, device=device)
        indicator[:, :length] = TEXT_INDICATOR
        segments = None
        if attention_mask is not None:
            pad = attention_mask.to(device).reshape(attention_mask.shape[0], -1)[:, :length] == 0  # [B, T]
            pad = pad.expand(bsz, -1) if pad.shape[0] == 1 else pad
            segments = torch.ones(tokens.shape[:2], dtype=torch.long, device=device)
            segments[:, :length][pad] = -1
            indicator[:, :length][pad] = PAD_INDICATOR
        out = self.backbone(tokens, t, positions, indicator, context, segments, options)
        return -tokens_to_latent(out[:, length:], gh, gw)


__all__ = ["Ideogram4Config", "Ideogram4ConfigError", "Ideogram4InputError", "Ideogram4Transformer", "apply_rope",
           "image_positions", "latent_to_tokens", "mrope_tables", "time_sinusoid", "tokens_to_latent"]

"""Stable Audio Open's diffusion transformer and `StableAudioDiTConfig` read from weights.

Architecture of Stability AI's Stable Audio Open 1.0 (Evans et al. 2024, "Stable Audio Open",
arXiv 2407.14358; stable-audio-tools `models/dit.py` `DiffusionTransformer` with its
`ContinuousTransformer`), as ComfyUI runs it (`comfy/ldm/audio/dit.py`
`AudioDiffusionTransformer`, state-dict names and forward arguments the same; diffusers'
`StableAudioDiTModel` is the same network under other names, `keys.py`); written here:

- input `x` `[B, C, T]` (64-channel latent frames of the Oobleck VAE); `x + preprocess_conv(x)`
  (a 1x1 convolution), frames as tokens, `project_in` to the width;
- the timestep `t` `[B]` through 2 pi t W (Gaussian Fourier features, `timestep_features.weight`
  `[128, 1]`, cos half first) and a SiLU MLP; the global condition (`global_embed`, the two
  seconds embeddings side by side) through `to_global_embed`, added to it; that vector is prepended
  to the tokens as one extra token ("prepend" global conditioning; "adaLN" modulates every block
  instead, from `to_scale_shift_gate` weights);
- the text tokens (`context`) through `to_cond_embed` (a bias-free SiLU MLP);
- `depth` pre-norm blocks: LayerNorm without bias (`gamma` only; ComfyUI drops the all-zero
  `beta` tensors of the released file), self-attention with a fused bias-free `to_qkv` and RoPE on
  the first `rotary dim` channels of every head (rotate-half pairs, `inv_freq` from the file,
  positions 0..N-1 counting the prepended token), cross-attention with `to_q` and a fused `to_kv`
  whose key/value heads (context width / head width) are repeated to the query heads, a SwiGLU
  feed-forward with biases (`ff.ff.0.proj`, `ff.ff.2`);
- `project_out`, the prepended token dropped, `out + postprocess_conv(out)`.

Masks are not applied (ComfyUI passes none to its attention). Heads cannot be seen in the weights:
ComfyUI's 24 (`num_heads`), the released width's layout (1536 = 24 x 64). Block `i` can be replaced
through `transformer_options["patches_replace"]["dit"][("double_block", i)]` with ComfyUI's
arguments (`{"img", "txt", "vec", "pe", "transformer_options"}` and `{"original_block": fn}`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

NUM_HEADS = 24  # ComfyUI's AudioDiffusionTransformer default (detection gives no heads)
TIMESTEP_FEATURES = 256
PREPEND, ADALN = "prepend", "adaLN"


class StableAudioConfigError(ValueError):
    """Weights that do not form a Stable Audio DiT."""


class StableAudioInputError(ValueError):
    """Inputs the Stable Audio DiT cannot take (wrong latent rank, widths)."""


@dataclass(frozen=True)
class StableAudioDiTConfig:
    """What the network's constructor takes (ComfyUI's `AudioDiffusionTransformer` arguments)."""

    io_channels: int = 64
    embed_dim: int = 1536
    depth: int = 24
    num_heads: int = NUM_HEADS
    cond_token_dim: int = 768
    project_cond_tokens: bool = False
    global_cond_dim: int = 1536
    project_global_cond: bool = True
    input_concat_dim: int = 0
    global_cond_type: str = PREPEND
    rotary_dim: int = 32  # channels of each head that RoPE turns (2 x len(inv_freq))

    def __post_init__(self) -> None:
        if min(self.io_channels, self.embed_dim, self.depth, self.num_heads) <= 0:
            raise StableAudioConfigError(f"Stable Audio DiT: sizes must be positive, got {self}")
        if self.embed_dim % self.num_heads:
            raise StableAudioConfigError(f"Stable Audio DiT: width {self.embed_dim} is not a multiple of "
                                         f"{self.num_heads} heads")
        if self.global_cond_type not in (PREPEND, ADALN):
            raise StableAudioConfigError(f"Stable Audio DiT: global_cond_type must be {PREPEND!r} or {ADALN!r}")
        head = self.embed_dim // self.num_heads
        if self.rotary_dim > head or self.rotary_dim % 2:
            raise StableAudioConfigError(f"Stable Audio DiT: rotary dim {self.rotary_dim} does not fit heads of {head}")
        if self.cond_token_dim and self.cond_embed_dim % head:
            raise StableAudioConfigError(f"Stable Audio DiT: context width {self.cond_embed_dim} is not a whole "
                                         f"number of {head}-wide heads")

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @property
    def cond_embed_dim(self) -> int:
        return self.embed_dim if self.project_cond_tokens else self.cond_token_dim

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            num_heads: int = NUM_HEADS) -> "StableAudioDiTConfig":
        """The config of the weights under `prefix`; `num_heads` (the weights cannot show it):
        ComfyUI's 24."""
        shape = shape_reader(tensors, prefix, StableAudioConfigError, "Stable Audio DiT")
        io_channels = shape("postprocess_conv.weight")[0]
        dim_in = shape("preprocess_conv.weight")[0]
        embed_dim, project_in = shape("transformer.project_in.weight")
        if project_in != dim_in:
            raise StableAudioConfigError(f"Stable Audio DiT: project_in takes {project_in} channels, "
                                         f"preprocess_conv gives {dim_in}")
        depth = count_numbered(tensors, prefix, "transformer.layers", StableAudioConfigError, "Stable Audio DiT")
        if depth == 0:
            raise StableAudioConfigError(f"Stable Audio DiT: no blocks under {prefix}transformer.layers")
        cond_token_dim = cond_embed = 0
        if prefix + "to_cond_embed.0.weight" in tensors:
            cond_embed, cond_token_dim = shape("to_cond_embed.0.weight")
        global_cond_dim = global_embed = 0
        if prefix + "to_global_embed.0.weight" in tensors:
            global_embed, global_cond_dim = shape("to_global_embed.0.weight")
        (half,) = shape("transformer.rotary_pos_emb.inv_freq")
        adaln = prefix + "transformer.layers.0.to_scale_shift_gate.1.weight" in tensors
        return cls(io_channels=io_channels, embed_dim=embed_dim, depth=depth, num_heads=num_heads,
                   cond_token_dim=cond_token_dim,
                   project_cond_tokens=bool(cond_token_dim) and cond_embed != cond_token_dim,
                   global_cond_dim=global_cond_dim, project_global_cond=global_embed == embed_dim,
                   input_concat_dim=dim_in - io_channels, global_cond_type=ADALN if adaln else PREPEND,
                   rotary_dim=2 * half)

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` of the loaded model (its detection says only this)."""
        return {"audio_model": "dit1.0"}


class LayerNorm(nn.Module):
    """LayerNorm with a scale `gamma` and no bias (eps 1e-5)."""

    def __init__(self, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.empty(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], weight=self.gamma.to(x.dtype))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) halves -> (-x2, x1)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(t: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """RoPE on the first `freqs.shape[-1]` channels of `t` `[B, H, N, D]` (in float32), the rest
    passed through; `freqs` `[N, rot]` (angles, each half repeated)."""
    rot = freqs.shape[-1]
    dtype = t.dtype
    head, rest = t[..., :rot].float(), t[..., rot:]
    turned = head * freqs.cos() + rotate_half(head) * freqs.sin()
    return torch.cat((turned.to(dtype), rest), dim=-1)


class Attention(nn.Module):
    """Self-attention (fused `to_qkv`) or cross-attention (`to_q`, fused `to_kv`), bias-free."""

    def __init__(self, dim: int, head_dim: int, context_dim: int | None, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = dim // head_dim
        self.head_dim = head_dim
        if context_dim is None:
            self.to_qkv = ops.Linear(dim, dim * 3, bias=False, **factory)
        else:
            self.to_q = ops.Linear(dim, dim, bias=False, **factory)
            self.to_kv = ops.Linear(context_dim, context_dim * 2, bias=False, **factory)
        self.to_out = ops.Linear(dim, dim, bias=False, **factory)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, freqs: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        b, n, _ = x.shape
        if context is None:
            q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        else:
            q = self.to_q(x)
            k, v = self.to_kv(context).chunk(2, dim=-1)
        q, k, v = (t.reshape(b, t.shape[1], -1, self.head_dim).transpose(1, 2) for t in (q, k, v))  # [B, H, N, d]
        if freqs is not None and context is None:
            q, k = apply_rotary(q, freqs), apply_rotary(k, freqs)
        if k.shape[1] != self.heads:  # grouped key/value heads, each repeated for its query heads
            k = k.repeat_interleave(self.heads // k.shape[1], dim=1)
            v = v.repeat_interleave(self.heads // v.shape[1], dim=1)
        out = calling.attend(q, k, v, self.heads, skip_reshape=True, transformer_options=transformer_options or {})
        return self.to_out(out)


class GLU(nn.Module):
    def __init__(self, dim_in: int, dim_out: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.proj = ops.Linear(dim_in, dim_out * 2, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, gate = self.proj(x).chunk(2, dim=-1)
        return x * F.silu(gate)


class FeedForward(nn.Module):
    """SwiGLU, 4x wide, with biases (`ff.0.proj`, `ff.2`)."""

    def __init__(self, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        inner = dim * 4
        self.ff = nn.Sequential(GLU(dim, inner, ops, factory), nn.Identity(), ops.Linear(inner, dim, **factory),
                                nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ff(x)


class TransformerBlock(nn.Module):
    def __init__(self, config: StableAudioDiTConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim = config.embed_dim
        self.pre_norm = LayerNorm(dim, factory)
        self.self_attn = Attention(dim, config.head_dim, None, ops, factory)
        self.cross_attend = config.cond_token_dim > 0
        if self.cross_attend:
            self.cross_attend_norm = LayerNorm(dim, factory)
            self.cross_attn = Attention(dim, config.head_dim, config.cond_embed_dim, ops, factory)
        self.ff_norm = LayerNorm(dim, factory)
        self.ff = FeedForward(dim, ops, factory)
        self.adaln = config.global_cond_type == ADALN
        if self.adaln:
            self.to_scale_shift_gate = nn.Sequential(nn.SiLU(), ops.Linear(dim, dim * 6, bias=False, **factory))

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, global_cond: torch.Tensor | None = None,
                freqs: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        options = transformer_options or {}
        if self.adaln and global_cond is not None:
            (scale_sa, shift_sa, gate_sa, scale_ff, shift_ff,
             gate_ff) = self.to_scale_shift_gate(global_cond).unsqueeze(1).chunk(6, dim=-1)
            h = self.pre_norm(x) * (1 + scale_sa) + shift_sa
            x = x + self.self_attn(h, freqs=freqs, transformer_options=options) * torch.sigmoid(1 - gate_sa)
            if context is not None and self.cross_attend:
                x = x + self.cross_attn(self.cross_attend_norm(x), context, transformer_options=options)
            h = self.ff_norm(x) * (1 + scale_ff) + shift_ff
            return x + self.ff(h) * torch.sigmoid(1 - gate_ff)
        x = x + self.self_attn(self.pre_norm(x), freqs=freqs, transformer_options=options)
        if context is not None and self.cross_attend:
            x = x + self.cross_attn(self.cross_attend_norm(x), context, transformer_options=options)
        return x + self.ff(self.ff_norm(x))


class RotaryEmbedding(nn.Module):
    """The angles `t * inv_freq` of positions 0..N-1, each half repeated (`inv_freq` from the file)."""

    def __init__(self, rotary_dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.register_buffer("inv_freq", torch.empty(rotary_dim // 2, **factory))

    def forward(self, length: int, device: torch.device) -> torch.Tensor:
        positions = torch.arange(length, device=device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq.to(device=device, dtype=torch.float32)[None]
        return torch.cat((freqs, freqs), dim=-1)  # [N, rot]


class ContinuousTransformer(nn.Module):
    def __init__(self, config: StableAudioDiTConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim_in = config.io_channels + config.input_concat_dim
        self.project_in = ops.Linear(dim_in, config.embed_dim, bias=False, **factory)
        self.project_out = ops.Linear(config.embed_dim, config.io_channels, bias=False, **factory)
        self.rotary_pos_emb = RotaryEmbedding(config.rotary_dim, factory)
        self.layers = nn.ModuleList([TransformerBlock(config, ops, factory) for _ in range(config.depth)])

    def forward(self, x: torch.Tensor, context: torch.Tensor | None, prepend: torch.Tensor | None,
                global_cond: torch.Tensor | None, transformer_options: dict[str, Any]) -> torch.Tensor:
        x = self.project_in(x)
        if prepend is not None:
            x = torch.cat((prepend.to(x.dtype), x), dim=1)
        freqs = self.rotary_pos_emb(x.shape[1], x.device)
        replace = transformer_options.get("patches_replace", {}).get("dit", {})
        for index, layer in enumerate(self.layers):
            if ("double_block", index) in replace:
                def original(args: dict[str, Any], layer: nn.Module = layer) -> dict[str, Any]:
                    return {"img": layer(args["img"], context=args["txt"], global_cond=args["vec"], freqs=args["pe"],
                                         transformer_options=args["transformer_options"])}

                x = replace[("double_block", index)](
                    {"img": x, "txt": context, "vec": global_cond, "pe": freqs,
                     "transformer_options": transformer_options}, {"original_block": original})["img"]
            else:
                x = layer(x, context=context, global_cond=global_cond, freqs=freqs,
                          transformer_options=transformer_options)
        return self.project_out(x)


class StableAudioDiT(nn.Module):
    """See the module docstring; `forward(x [B, C, T], timestep [B], context [B, M, c],
    global_embed [B, g], ...) -> [B, C, T]`."""

    def __init__(self, config: StableAudioDiTConfig | None = None, operations: Any = None,
                 dtype: torch.dtype | None = None, device: torch.device | str | None = None, **kwargs: Any) -> None:
        super().__init__()
        config = config or StableAudioDiTConfig(**kwargs)
        self.config = config
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        dim = config.embed_dim
        self.timestep_features = FourierFeatures(TIMESTEP_FEATURES, factory)
        self.to_timestep_embed = nn.Sequential(ops.Linear(TIMESTEP_FEATURES, dim, **factory), nn.SiLU(),
                                               ops.Linear(dim, dim, **factory))
        if config.cond_token_dim:
            width = config.cond_embed_dim
            self.to_cond_embed = nn.Sequential(ops.Linear(config.cond_token_dim, width, bias=False, **factory),
                                               nn.SiLU(), ops.Linear(width, width, bias=False, **factory))
        if config.global_cond_dim:
            width = dim if config.project_global_cond else config.global_cond_dim
            self.to_global_embed = nn.Sequential(ops.Linear(config.global_cond_dim, width, bias=False, **factory),
                                                 nn.SiLU(), ops.Linear(width, width, bias=False, **factory))
        dim_in = config.io_channels + config.input_concat_dim
        self.transformer = ContinuousTransformer(config, ops, factory)
        self.preprocess_conv = ops.Conv1d(dim_in, dim_in, 1, bias=False, **factory)
        self.postprocess_conv = ops.Conv1d(config.io_channels, config.io_channels, 1, bias=False, **factory)

    @classmethod
    def from_config(cls, config: StableAudioDiTConfig, operations: Any = None) -> "StableAudioDiT":
        return cls(config, operations=operations)

    @property
    def dtype(self) -> torch.dtype:
        return self.postprocess_conv.weight.dtype

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target: the native names (ComfyUI's and kohya's spellings)."""
        from comfy_core.families.lora_keys import native_key_map

        return native_key_map(names)

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor | None = None,
                global_embed: torch.Tensor | None = None, input_concat_cond: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        if x.ndim != 3:
            raise StableAudioInputError(f"Stable Audio DiT: expected a latent [B, C, T], got {tuple(x.shape)}")
        config = self.config
        options = transformer_options or {}
        if context is not None and config.cond_token_dim:
            if context.shape[-1] != config.cond_token_dim:
                raise StableAudioInputError(f"Stable Audio DiT: context is {context.shape[-1]} wide, the network "
                                            f"takes {config.cond_token_dim}")
            context = self.to_cond_embed(context)
        if global_embed is not None:
            if not config.global_cond_dim or global_embed.shape[-1] != config.global_cond_dim:
                raise StableAudioInputError(f"Stable Audio DiT: global_embed is {global_embed.shape[-1]} wide, the "
                                            f"network takes {config.global_cond_dim}")
            global_embed = self.to_global_embed(global_embed.reshape(global_embed.shape[0], -1))
        if input_concat_cond is not None:
            if input_concat_cond.shape[2] != x.shape[2]:
                input_concat_cond = F.interpolate(input_concat_cond, (x.shape[2],), mode="nearest")
            x = torch.cat((x, input_concat_cond.to(x.dtype)), dim=1)
        t = timestep.reshape(-1).to(x.dtype)
        time = self.to_timestep_embed(self.timestep_features(t[:, None]).to(x.dtype))  # [B, dim]
        cond = time if global_embed is None else global_embed + time
        x = self.preprocess_conv(x) + x
        tokens = x.transpose(1, 2)  # [B, T, C]
        prepend = cond[:, None] if config.global_cond_type == PREPEND else None
        out = self.transformer(tokens, context, prepend, cond if config.global_cond_type == ADALN else None, options)
        out = out.transpose(1, 2)
        if prepend is not None:
            out = out[:, :, prepend.shape[1]:]
        return self.postprocess_conv(out) + out


class FourierFeatures(nn.Module):
    """`[cos(2 pi t W), sin(2 pi t W)]`, W `[out / 2, 1]` (Gaussian Fourier features)."""

    def __init__(self, out_features: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features // 2, 1, **factory))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        f = 2 * math.pi * t @ self.weight.to(t.dtype).T
        return torch.cat((f.cos(), f.sin()), dim=-1)


"""Qwen-Image 2.1's single-stream DiT (Qwen team 2026) and `QwenImage21Config` read from weights.

One sequence holds everything: the prompt's states (Qwen3-VL-8B, 4096 wide) projected by
`txt_in` (a zero-centred RMSNorm, whose stored weight is `scale - 1`, then linear, GELU-tanh,
linear), each reference image's latent tokens spliced into the text at its slot (where the
encoder's vision tokens were), and the target latent's tokens last. The latent is the 64-channel
one of the Qwen-Image 2.1 VAE at 1/16 of the pixels, read unpatched (one token per latent pixel).
Every block is the same: LayerNorm (no affine) scaled by `1 + scale`, attention (bias-free q/k/v,
per-head RMS QK-norm, 3-axis RoPE), a `tanh(gate)`-weighted residual, then the same around a
SwiGLU MLP (3x). There are no per-block modulation weights: one `modulation` (SiLU, linear to
4 x width: scale1, gate1, scale2, gate2) of the timestep embedding serves all blocks.

Two properties make the prefix (text and references) cacheable across sampling steps:

- the text and reference tokens are modulated from timestep 0 (an extra row of the timestep
  embedding), the target tokens from the sampled timestep;
- attention is block-causal: text tokens see the tokens before them and themselves, an image
  block (a reference or the target) sees everything before it and itself in both directions.

So the prefix's keys and values do not depend on the step nor on the target's values, only on the
prompt, the references and the target's size (the reference positions are centred on it). A sampling
run keeps them (`PrefixKVCache`, prefix_cache.py) from the first call of each conditioning and
later calls run the target tokens alone against them, as ComfyUI's network does; the
`qwen_image21_cache` transformer option (QwenImage21Cache) chooses where they are kept and at what
precision, "off" recomputing the prefix every step.

Positions (RoPE base 10000, 16 / 56 / 56 channels of a 128-channel head for frame / row / column):
text tokens advance one shared position on all three axes; an image block sits on the frame axis
at the position reached before it (which then advances by the block's longer side) with rows and
columns centred on 0, a reference whose side has the other parity than the target's shifted by
half a position so that it centres on the target (ComfyUI's rule; diffusers uses whole positions,
which agree whenever the parities agree).

Written here after ComfyUI's `comfy/ldm/qwen_image21/model.py` (names, arguments, the cache
policy, patch points) and diffusers' `QwenImage21Transformer2DModel` (the numerics reference);
ComfyUI's file names: the SwiGLU's gate and up projections fused in `img_mlp.gate_up` (`[2 x mlp,
width]`, gate rows first), diffusers' `img_mlp.gate_layer` / `img_mlp.proj` read as they are.
`timestep` is sigma in 0..1 (flow sampling, multiplier 1); the embedding scales it by 1000.

Patch points, as ComfyUI's: `patches["post_input"]` (`{"img", "pe", "transformer_options"}` ->
`{"img", "pe"}` over the whole sequence), `patches_replace["dit"][("single_block", i)]`
(`{"img", "vec", "pe", "prefix_len", "transformer_options"}` and `{"original_block"}`),
`patches["single_block"]` (`{"img", "x", "block_index", "transformer_options"}` after block i).
Any of them, or a weight-hook run, turns the cache off (later steps would see another sequence).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.attention.rope import rotate_pairs
from comfy_core.families.flux.blocks import EmbedND, timestep_embedding
from comfy_core.families.qwen_image21.prefix_cache import PrefixKVCache, prefix_cache_key
from comfy_core.families.sd3.mmdit_blocks import RMSNorm
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

IMAGE_MODEL = "qwen_image21"
ROPE_THETA = 10000
TIME_CHANNELS = 256
HOOK_RUN_OPTION = "hook_run"  # set on runs with weight hooks (comfy_core/hooks/sampling.py)
MARKER = "txt_in.text_norm.weight"


class QwenImage21ConfigError(ValueError):
    """The Qwen-Image 2.1 weights are incomplete or inconsistent, or the parameters are impossible."""


class QwenImage21InputError(ValueError):
    """An input the Qwen-Image 2.1 network cannot take (shape, channels, reference slots)."""


def default_axes_dims(head_dim: int) -> tuple[int, int, int]:
    """RoPE channels per axis (frame, row, col): 16 / 56 / 56 of a 128-channel head (ComfyUI's and
    diffusers' default, not in the weights); other widths (tiny test models) in the same
    proportions: row and col 7/16 of the head each (even), the frame axis the rest."""
    spatial = (head_dim * 7 // 16) // 2 * 2
    frame = head_dim - 2 * spatial
    if head_dim % 2 or spatial < 2 or frame < 2:
        raise QwenImage21ConfigError(f"Qwen-Image 2.1: a head of {head_dim} channels cannot carry 3-axis RoPE")
    return frame, spatial, spatial


@dataclass(frozen=True)
class QwenImage21Config:
    """ComfyUI's `QwenImage21Transformer2DModel` arguments (the released model's defaults)."""

    in_channels: int = 64
    out_channels: int = 64
    num_layers: int = 32
    attention_head_dim: int = 128
    num_attention_heads: int = 32
    context_in_dim: int = 4096
    mlp_ratio: int = 3
    axes_dims_rope: tuple[int, int, int] = (16, 56, 56)
    fused_mlp: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes_dims_rope", tuple(int(a) for a in self.axes_dims_rope))
        if min(self.in_channels, self.out_channels, self.num_layers, self.attention_head_dim,
               self.num_attention_heads, self.context_in_dim, self.mlp_ratio) < 1:
            raise QwenImage21ConfigError(f"Qwen-Image 2.1: every size must be positive, got {self}")
        if sum(self.axes_dims_rope) != self.attention_head_dim or any(a % 2 for a in self.axes_dims_rope):
            raise QwenImage21ConfigError(f"Qwen-Image 2.1: axes_dims_rope {list(self.axes_dims_rope)} must be even "
                                         f"and sum to the head width {self.attention_head_dim}")

    @property
    def hidden_size(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def mlp_hidden(self) -> int:
        return self.hidden_size * self.mlp_ratio

    def params(self) -> dict[str, Any]:
        params = asdict(self)
        params["axes_dims_rope"] = list(self.axes_dims_rope)
        return params

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (`image_model` "qwen_image21" and the network's arguments)."""
        return {"image_model": IMAGE_MODEL, **self.params()}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "QwenImage21Config":
        """The structure under `prefix` from names and shapes only: width and input channels from
        `img_in`, text width from `txt_in.text_norm`, head width from the QK-norm, output channels
        from `proj_out`, MLP ratio from `img_mlp.gate_up` (fused, ComfyUI's files) or
        `img_mlp.proj` (diffusers'), depth from the numbered `transformer_blocks.N`; every block's
        shapes checked. Raises `QwenImage21ConfigError` naming the key otherwise."""
        shape = shape_reader(tensors, prefix, QwenImage21ConfigError, "Qwen-Image 2.1")
        hidden, in_channels = shape("img_in.weight")
        (context,) = shape(MARKER)
        (head_dim,) = shape("transformer_blocks.0.attn.norm_q.weight")
        if head_dim <= 0 or hidden % head_dim:
            raise QwenImage21ConfigError(f"Qwen-Image 2.1: width {hidden} is not a multiple of the head width "
                                         f"{head_dim} ({prefix}transformer_blocks.0.attn.norm_q.weight)")
        fused = prefix + "transformer_blocks.0.img_mlp.gate_up.weight" in tensors
        rows = shape("transformer_blocks.0.img_mlp.gate_up.weight" if fused
                     else "transformer_blocks.0.img_mlp.proj.weight")[0]
        mlp = rows // 2 if fused else rows
        if mlp % hidden or (fused and rows % 2):
            raise QwenImage21ConfigError(f"Qwen-Image 2.1: an MLP of {mlp} channels is not a whole multiple of the "
                                         f"width {hidden}")
        out_channels = shape("proj_out.weight")[0]
        expected = {"txt_in.in_layer.weight": (hidden, context), "txt_in.out_layer.weight": (hidden, hidden),
                    "time_text_embed.timestep_embedder.linear_1.weight": (hidden, TIME_CHANNELS),
                    "time_text_embed.timestep_embedder.linear_2.weight": (hidden, hidden),
                    "modulation.1.weight": (4 * hidden, hidden), "norm_out.linear.weight": (hidden, hidden),
                    "proj_out.weight": (out_channels, hidden)}
        layers = count_numbered(tensors, prefix, "transformer_blocks", QwenImage21ConfigError, "Qwen-Image 2.1")
        for i in range(layers):
            block = f"transformer_blocks.{i}."
            for name in ("to_q", "to_k", "to_v", "to_out.0"):
                expected[f"{block}attn.{name}.weight"] = (hidden, hidden)
            for name in ("norm_q", "norm_k"):
                expected[f"{block}attn.{name}.weight"] = (head_dim,)
            if fused:
                expected[f"{block}img_mlp.gate_up.weight"] = (2 * mlp, hidden)
            else:
                expected[f"{block}img_mlp.proj.weight"] = (mlp, hidden)
                expected[f"{block}img_mlp.gate_layer.weight"] = (mlp, hidden)
            expected[f"{block}img_mlp.out.weight"] = (hidden, mlp)
        for key, want in expected.items():
            found = shape(key)
            if found != want:
                raise QwenImage21ConfigError(f"Qwen-Image 2.1: {prefix}{key} has shape {found}, expected {want}")
        return cls(in_channels=in_channels, out_channels=out_channels, num_layers=layers,
                   attention_head_dim=head_dim, num_attention_heads=hidden // head_dim, context_in_dim=context,
                   mlp_ratio=mlp // hidden, axes_dims_rope=default_axes_dims(head_dim), fused_mlp=fused)


# --- blocks ------------------------------------------------------------------------------------------


class ZeroCenteredRMSNorm(nn.Module):
    """RMSNorm in float32 whose stored `weight` is `scale - 1` (the effective scale is `weight + 1`)."""

    def __init__(self, dim: int, eps: float = 1e-6, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.float()
        scale = self.weight.to(device=x.device, dtype=torch.float32) + 1.0
        return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps) * scale).to(x.dtype)


class TextProjection(nn.Module):
    """`text_norm` (zero-centred RMSNorm), `in_layer`, GELU-tanh, `out_layer` (no biases)."""

    def __init__(self, context: int, hidden: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.text_norm = ZeroCenteredRMSNorm(context, **factory)
        self.in_layer = ops.Linear(context, hidden, bias=False, **factory)
        self.out_layer = ops.Linear(hidden, hidden, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_layer(F.gelu(self.in_layer(self.text_norm(x)), approximate="tanh"))


class TimestepEmbedder(nn.Module):
    """`linear_1` (256 -> width), SiLU, `linear_2`, no biases (diffusers' `TimestepEmbedding`
    with `sample_proj_bias=False`)."""

    def __init__(self, hidden: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(TIME_CHANNELS, hidden, bias=False, **factory)
        self.linear_2 = ops.Linear(hidden, hidden, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class TimeTextEmbed(nn.Module):
    """Sinusoids of `1000 * t` (cos half first, 256 channels) through `timestep_embedder`."""

    def __init__(self, hidden: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.timestep_embedder = TimestepEmbedder(hidden, ops, factory)

    def forward(self, timestep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.timestep_embedder(timestep_embedding(timestep.float(), TIME_CHANNELS).to(dtype))


class SwiGLU(nn.Module):
    """`out(silu(gate) * up)`: gate and up fused in `gate_up` (gate rows first, ComfyUI's files)
    or apart in `gate_layer` / `proj` (diffusers')."""

    def __init__(self, hidden: int, mlp: int, fused: bool, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.fused = fused
        if fused:
            self.gate_up = ops.Linear(hidden, 2 * mlp, bias=False, **factory)
        else:
            self.proj = ops.Linear(hidden, mlp, bias=False, **factory)
            self.gate_layer = ops.Linear(hidden, mlp, bias=False, **factory)
        self.out = ops.Linear(mlp, hidden, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            gate, up = self.gate_up(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate_layer(x), self.proj(x)
        return self.out(F.silu(gate) * up)


AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class Attention(nn.Module):
    """Bias-free `to_q/k/v`, `to_out.0`, per-head RMS `norm_q` / `norm_k`; RoPE on q and k, then
    `attn_fn(q, k, v)` (`[B, H, N, d]` each, k and v rotated) decides what the queries see."""

    def __init__(self, hidden: int, heads: int, head_dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = heads
        for name in ("to_q", "to_k", "to_v"):
            setattr(self, name, ops.Linear(hidden, heads * head_dim, bias=False, **factory))
        self.norm_q = RMSNorm(head_dim, elementwise_affine=True, eps=1e-6, **factory)
        self.norm_k = RMSNorm(head_dim, elementwise_affine=True, eps=1e-6, **factory)
        self.to_out = nn.ModuleList([ops.Linear(heads * head_dim, hidden, bias=False, **factory)])

    def forward(self, x: torch.Tensor, pe: torch.Tensor, attn_fn: AttentionFn) -> torch.Tensor:
        """x `[B, N, D]`, pe `[1, 1, N, d/2, 2, 2]` -> `[B, N, D]`."""
        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.unflatten(-1, (self.heads, -1))  # [B, N, H, d]

        q = rotate_pairs(self.norm_q(heads(self.to_q(x))).transpose(1, 2), pe, x.dtype)  # [B, H, N, d]
        k = rotate_pairs(self.norm_k(heads(self.to_k(x))).transpose(1, 2), pe, x.dtype)
        return self.to_out[0](attn_fn(q, k, heads(self.to_v(x)).transpose(1, 2)))  # attn_fn -> [B, N, H*d]


Modulation = tuple[tuple[torch.Tensor, torch.Tensor], ...]  # (prefix row [1, 1, D], target rows [B, 1, D]) x 4


def _modulated(norm: nn.Module, x: torch.Tensor, scale: tuple[torch.Tensor, torch.Tensor], prefix: int) -> torch.Tensor:
    """LayerNorm(x) * (1 + scale): the prefix rows with the timestep-0 scale, the rest the target's."""
    out = norm(x)
    if prefix == 0:
        return out * (1 + scale[1])
    return torch.cat([out[:, :prefix] * (1 + scale[0]), out[:, prefix:] * (1 + scale[1])], dim=1)


def _gated(x: torch.Tensor, y: torch.Tensor, gate: tuple[torch.Tensor, torch.Tensor], prefix: int) -> torch.Tensor:
    if prefix == 0:
        return x + y * gate[1]
    return x + torch.cat([y[:, :prefix] * gate[0], y[:, prefix:] * gate[1]], dim=1)


class QwenImage21Block(nn.Module):
    """`img_norm1`, `attn`, `img_norm2`, `img_mlp`: the single-stream block (no weights of its own
    for the modulation)."""

    def __init__(self, hidden: int, heads: int, head_dim: int, mlp: int, fused: bool, ops: Any,
                 factory: dict[str, Any]) -> None:
        super().__init__()
        self.img_norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden, heads, head_dim, ops, factory)
        self.img_norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.img_mlp = SwiGLU(hidden, mlp, fused, ops, factory)

    def forward(self, x: torch.Tensor, mod: Modulation, pe: torch.Tensor, attn_fn: AttentionFn,
                prefix: int) -> torch.Tensor:
        """x `[B, N, D]` whose first `prefix` rows are modulated at timestep 0."""
        scale1, gate1, scale2, gate2 = mod
        x = _gated(x, self.attn(_modulated(self.img_norm1, x, scale1, prefix), pe, attn_fn), gate1, prefix)
        x = _gated(x, self.img_mlp(_modulated(self.img_norm2, x, scale2, prefix)), gate2, prefix)
        if x.dtype == torch.float16:
            x = x.clip(-65504, 65504)
        return x


class LastLayer(nn.Module):
    """`linear(silu(temb))` as a scale (no shift) on a LayerNorm without affine."""

    def __init__(self, hidden: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear = ops.Linear(hidden, hidden, bias=False, **factory)
        self.norm = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        return self.norm(x) * (1 + self.linear(F.silu(temb)).unsqueeze(1))


# --- attention over the block-causal sequence ----------------------------------------------------------

Segment = tuple[int, int, "torch.Tensor | None"]  # (start, end, mask [n, end] or None: sees all keys < end)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
            options: dict[str, Any]) -> torch.Tensor:
    return calling.attend(q, k, v, q.shape[1], skip_reshape=True, mask=mask, transformer_options=options)


def block_causal(segments: Sequence[Segment], options: dict[str, Any],
                 keep: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
                 prefix: int = 0) -> AttentionFn:
    """Attention where each segment's queries see the keys before the segment's end (a text
    segment causally); `keep(k, v)` receives the first `prefix` keys and values (to cache)."""
    def attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if keep is not None:
            keep(k[:, :, :prefix], v[:, :, :prefix])
        outs = [_attend(q[:, :, start:end], k[:, :, :end], v[:, :, :end], mask, options)
                for start, end, mask in segments]
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
    return attn


def after_prefix(prefix_k: torch.Tensor, prefix_v: torch.Tensor, options: dict[str, Any]) -> AttentionFn:
    """Attention of the target's queries over [the kept prefix, the target] (no mask: the target
    sees everything)."""
    def attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return _attend(q, torch.cat([prefix_k.to(k), k], dim=2), torch.cat([prefix_v.to(v), v], dim=2), None, options)
    return attn


def _centred(n: int, target: int, device: Any) -> torch.Tensor:
    """Positions of `n` rows (columns) centred on 0; half a position further when `n`'s parity
    differs from the target's, so every grid centres on the target."""
    return torch.arange(n, device=device, dtype=torch.float32) - (n - n // 2) + 0.5 * (n % 2 - target % 2)


@comfyui_name("QwenImage21Transformer2DModel")
class QwenImage21Transformer(nn.Module):
    """The Qwen-Image 2.1 DiT (see the module docstring); `params` are `QwenImage21Config`'s fields."""

    def __init__(self, image_model: Any = None, dtype: Any = None, device: Any = None, operations: Any = None,
                 **params: Any) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        try:
            config = QwenImage21Config(**params)
        except TypeError as error:
            raise QwenImage21ConfigError(f"Qwen-Image 2.1: {error}") from None
        factory = {"dtype": dtype, "device": device}
        hidden = config.hidden_size
        self.dtype = dtype
        self.config = config
        self.in_channels = config.in_channels
        self.out_channels = config.out_channels
        self.inner_dim = hidden
        self.pe_embedder = EmbedND(dim=config.attention_head_dim, theta=ROPE_THETA, axes_dim=config.axes_dims_rope)
        self.time_text_embed = TimeTextEmbed(hidden, ops, factory)
        self.txt_in = TextProjection(config.context_in_dim, hidden, ops, factory)
        self.img_in = ops.Linear(config.in_channels, hidden, bias=False, **factory)
        self.modulation = nn.Sequential(nn.SiLU(), ops.Linear(hidden, 4 * hidden, bias=False, **factory))
        self.transformer_blocks = nn.ModuleList(
            QwenImage21Block(hidden, config.num_attention_heads, config.attention_head_dim, config.mlp_hidden,
                             config.fused_mlp, ops, factory)
            for _ in range(config.num_layers))
        self.norm_out = LastLayer(hidden, ops, factory)
        self.proj_out = ops.Linear(hidden, config.out_channels, bias=False, **factory)
        # The prefix K/V cache of the current sampling run (begin_sampling_run / end_sampling_run).
        self.prefix_cache: PrefixKVCache | None = None
        self.prefix_cache_enabled = False

    @classmethod
    def from_config(cls, config: QwenImage21Config, **kwargs: Any) -> "QwenImage21Transformer":
        return cls(**kwargs, **config.params())

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target (`comfy_core.lora.dit_keymap`; the spellings: `keys.lora_key_map`)."""
        from comfy_core.families.qwen_image21.keys import lora_key_map

        return lora_key_map(names)

    # --- the run's prefix cache (ComfyUI: set with the model's current patcher at pre_run / cleanup) ---

    def begin_sampling_run(self) -> None:
        """A sampling run starts: a fresh, enabled prefix cache (the weights are fixed for the run)."""
        self.prefix_cache = None
        self.prefix_cache_enabled = True

    def end_sampling_run(self) -> None:
        """The run ended: its cache is dropped and caching stays off outside a run."""
        self.prefix_cache = None
        self.prefix_cache_enabled = False

    # --- the sequence ---

    def build_sequence(self, x: torch.Tensor, context: torch.Tensor, refs: Sequence[torch.Tensor],
                       slots: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, list[Segment]]:
        """(tokens [B, L, D], pe [1, 1, L, d/2, 2, 2], segments): the text with each reference
        latent spliced in at its slot (a count of text tokens; missing slots: after the text), the
        target last."""
        txt = self.txt_in(context)  # [B, Nt, D]
        n_txt, device = txt.shape[1], x.device
        slots = (list(slots) + [n_txt] * len(refs))[:len(refs)]
        if any(not 0 <= s <= n_txt for s in slots) or slots != sorted(slots):
            raise QwenImage21InputError(f"Qwen-Image 2.1: image_slots {list(slots)} must be non-decreasing text "
                                        f"positions in 0..{n_txt}")
        bounds = [0, *slots, n_txt]
        parts, ids, segments = [], [], []
        pos = length = 0
        for (start, end), image in zip(zip(bounds[:-1], bounds[1:]), [*refs, x]):
            n = end - start
            if n > 0:
                parts.append(txt[:, start:end])
                ids.append(torch.arange(pos, pos + n, device=device, dtype=torch.float32)[:, None].expand(n, 3))
                causal = torch.ones(n, length + n, dtype=torch.bool, device=device).tril(length)
                segments.append((length, length + n, causal))
                pos += n
                length += n
            h, w = image.shape[-2:]
            parts.append(self.img_in(image.flatten(2).transpose(1, 2)))  # [B, h*w, D]
            rows, cols = _centred(h, x.shape[-2], device), _centred(w, x.shape[-1], device)
            grid = torch.stack([torch.full((h, w), float(pos), device=device), rows[:, None].expand(h, w),
                                cols[None, :].expand(h, w)], dim=-1)  # [h, w, 3]
            ids.append(grid.flatten(0, 1))
            segments.append((length, length + h * w, None))
            pos += max(h, w)
            length += h * w
        pe = self.pe_embedder(torch.cat(ids, dim=0).unsqueeze(0))  # [1, 1, L, d/2, 2, 2]
        return torch.cat(parts, dim=1), pe, segments

    def _references(self, refs: Sequence[torch.Tensor] | None, batch: int, dtype: torch.dtype) -> list[torch.Tensor]:
        out = []
        for ref in refs or ():
            if ref.ndim == 5 and ref.shape[2] == 1:
                ref = ref[:, :, 0]
            if ref.ndim != 4 or ref.shape[1] != self.in_channels:
                raise QwenImage21InputError(f"Qwen-Image 2.1: a reference latent must be "
                                            f"[B, {self.in_channels}, h, w], "
                                            f"got {tuple(ref.shape)}")
            if ref.shape[0] != batch:
                if batch % ref.shape[0]:
                    raise QwenImage21InputError(f"Qwen-Image 2.1: a reference latent of batch {ref.shape[0]} does not "
                                                f"tile the batch {batch}")
                ref = ref.repeat(batch // ref.shape[0], 1, 1, 1)
            out.append(ref.to(dtype))
        return out

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor,
                ref_latents: Sequence[torch.Tensor] | None = None, image_slots: Sequence[int] | None = None,
                transformer_options: Mapping[str, Any] = {}, **kwargs: Any) -> torch.Tensor:
        """x `[B, C, H, W]` (or `[B, C, 1, H, W]`), timestep (sigma) `[B]`, context
        `[B, Nt, context_in_dim]`, ref_latents (in model space), image_slots (text positions of the
        references) -> the velocity in x's shape. Other keyword inputs (an attention mask) are
        ignored, as ComfyUI's network does."""
        squeeze = x.ndim == 5
        if squeeze:
            if x.shape[2] != 1:
                raise QwenImage21InputError(f"Qwen-Image 2.1 generates images: a 5-D latent needs one frame, "
                                            f"got {tuple(x.shape)}")
            x = x[:, :, 0]
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise QwenImage21InputError(f"Qwen-Image 2.1: the latent must be [B, {self.in_channels}, H, W], "
                                        f"got {tuple(x.shape)}")
        if context.ndim != 3 or context.shape[-1] != self.config.context_in_dim:
            raise QwenImage21InputError(f"Qwen-Image 2.1: context must be [B, tokens, {self.config.context_in_dim}], "
                                        f"got {tuple(context.shape)}")
        batch, _, height, width = x.shape
        dtype = x.dtype
        options = dict(transformer_options or {})
        refs = self._references(ref_latents, batch, dtype)
        slots = [int(s) for s in (image_slots or ())]
        context = context.to(dtype)
        if context.shape[0] != batch:
            if batch % context.shape[0]:
                raise QwenImage21InputError(f"Qwen-Image 2.1: context of batch {context.shape[0]} does not tile "
                                            f"{batch}")
            context = context.repeat(batch // context.shape[0], 1, 1)
        hidden, pe, segments = self.build_sequence(x, context, refs, slots)
        prefix = hidden.shape[1] - height * width
        patches = options.get("patches", {}) or {}
        for patch in patches.get("post_input", ()):
            out = patch({"img": hidden, "pe": pe, "transformer_options": options})
            hidden, pe = out["img"], out.get("pe", pe)

        # Text and references are modulated from timestep 0: one extra row of the embedding.
        t = timestep.reshape(-1).to(dtype)
        temb = self.time_text_embed(torch.cat([t, t.new_zeros(1)]), dtype)  # [B+1, D]
        chunks = self.modulation(temb).chunk(4, dim=-1)

        def rows(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return p[-1:].unsqueeze(1), p[:-1].unsqueeze(1)  # ([1, 1, D], [B, 1, D])

        mod = (rows(chunks[0]), rows(chunks[1].tanh()), rows(chunks[2]), rows(chunks[3].tanh()))

        replace = (options.get("patches_replace", {}) or {}).get("dit", {}) or {}
        hooked = bool(replace or patches.get("post_input") or patches.get("single_block")
                      or patches.get("attn1_patch") or options.get(HOOK_RUN_OPTION))
        cache, filled = None, False
        if self.prefix_cache_enabled and prefix > 0 and not hooked:
            cache, filled = self._select_cache(x, context, refs, slots, prefix, hidden, options)
        prefix_states = prefix_pe = None
        if cache is not None:
            prefix_states, hidden = hidden[:, :prefix], hidden[:, prefix:]
            prefix_pe, pe = pe[:, :, :prefix], pe[:, :, prefix:]
        run_prefix = prefix if cache is None else 0

        options["total_blocks"] = len(self.transformer_blocks)
        options["block_type"] = "single"
        for i, block in enumerate(self.transformer_blocks):
            options["block_index"] = i
            if cache is not None:
                if not filled:
                    keep = (lambda k, v, i=i: cache.put(i, k, v))
                    fill = block_causal(segments[:-1], options, keep, prefix)
                    prefix_states = block(prefix_states, mod, prefix_pe, fill, prefix)
                prefix_k, prefix_v = cache.take(i, x.device, dtype)
                attn_fn = after_prefix(prefix_k, prefix_v, options)
            else:
                attn_fn = block_causal(segments, options)
            if ("single_block", i) in replace:
                def original(args: dict, block: nn.Module = block, attn_fn: AttentionFn = attn_fn) -> dict:
                    return {"img": block(args["img"], mod, args["pe"], attn_fn, run_prefix)}

                hidden = replace[("single_block", i)](
                    {"img": hidden, "vec": temb, "pe": pe, "mod": mod, "attn_fn": attn_fn, "prefix_len": run_prefix,
                     "transformer_options": options}, {"original_block": original})["img"]
            else:
                hidden = block(hidden, mod, pe, attn_fn, run_prefix)
            for patch in patches.get("single_block", ()):
                hidden = patch({"img": hidden, "x": x, "block_index": i, "transformer_options": options})["img"]
        if cache is not None:
            cache.mark_filled()

        out = self.proj_out(self.norm_out(hidden[:, run_prefix:], temb[:-1]))  # [B, H*W, C]
        out = out.transpose(1, 2).reshape(batch, self.out_channels, height, width)
        return out.unsqueeze(2) if squeeze else out

    def _select_cache(self, x: torch.Tensor, context: torch.Tensor, refs: Sequence[torch.Tensor],
                      slots: Sequence[int], prefix: int, hidden: torch.Tensor,
                      options: Mapping[str, Any]) -> tuple[PrefixKVCache | None, bool]:
        """(the run's cache with this call's slot selected, whether that slot is filled), or
        (None, False) to recompute the prefix (the setting "off", or no room where it is kept)."""
        from comfy_core.families.qwen_image.qwen21 import cache_settings

        settings = cache_settings(options)  # QwenImage21Cache's `qwen_image21_cache` (auto / default without)
        if settings.device == "off":
            return None, False
        key = prefix_cache_key(x, context, refs, slots)
        if self.prefix_cache is None:
            self.prefix_cache = PrefixKVCache(settings.device, settings.dtype, x.device)
        nbytes = 2 * len(self.transformer_blocks) * x.shape[0] * prefix * self.inner_dim * hidden.element_size()
        if not self.prefix_cache.select(key, nbytes):
            return None, False
        return self.prefix_cache, self.prefix_cache.filled(len(self.transformer_blocks))

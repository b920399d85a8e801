"""The LTX-Video 0.9.x diffusion transformer and `LTXVConfig` read from weights.

Architecture of Lightricks' LTX-Video (HaCohen et al. 2024, "LTX-Video: Realtime Video Latent
Diffusion", arXiv 2501.00103; github.com/Lightricks/LTX-Video `ltx_video/models/transformers/
transformer3d.py`): the 128-channel latent `[B, 128, T, H, W]` of the 1:32:32 x 8 causal video VAE
is cut into 1x1x1 patches (one token per latent pixel), projected by `patchify_proj`, and goes
through `num_layers` PixArt-alpha-style blocks: RMS-normed self-attention (q/k RMS-normed over the
full width, 3-D fractional RoPE over pixel coordinates), unmodulated cross-attention to the
projected T5 states, and a tanh-GELU feed-forward, the self-attention and feed-forward modulated by
the adaLN-single timestep embedding plus a learned per-block table (6 rows); then a modulated
LayerNorm head (2 rows) and `proj_out`.

Constructor, forward arguments, state-dict names and patch points are those of ComfyUI's
`comfy/ldm/lightricks/model.py` (`LTXVModel(in_channels, cross_attention_dim, attention_head_dim,
num_attention_heads, caption_channels, num_layers, positional_embedding_theta,
positional_embedding_max_pos, causal_temporal_positioning, vae_scale_factors, ...)`,
`forward(x, timestep, context, attention_mask, frame_rate=25, transformer_options, keyframe_idxs,
denoise_mask, **kwargs)`); written here, with its behaviour:

- `timestep` is the flow sigma in 0..1 (ComfyUI's ModelSamplingFlux with multiplier 1), scaled
  by 1000 inside. A `denoise_mask` (the sampler's, `[B, C, T, H, W]` or broadcastable) makes it
  per token, `mask[:, :1] * t` (ComfyUI's `model_base.LTXV.process_timestep`), so frames the mask
  keeps (image-to-video's first frame, guides) are seen as clean.
- RoPE positions: the latent coordinates times the VAE's factors (8, 32, 32), time divided by
  `frame_rate`, each axis divided by `positional_embedding_max_pos` (20, 2048, 2048), `2p - 1`
  times `theta ** linspace(0, 1, dim // 6) * pi / 2`, interleaved pairs, the `dim % 6` first
  channels unrotated.
- `keyframe_idxs` `[B, 3, K]` (or `[B, 3, K, 2]` start / end, the start used): the pixel
  coordinates of the K guide tokens appended at the end of the latent (LTXVAddGuide). With them,
  tokens whose `denoise_mask` is negative (a dilated IC-LoRA guide's padding) are dropped before
  the blocks and zeros are put back after. `guide_attention_entries` (from LTXVAddGuide) with a
  strength other than 1 or a pixel mask weigh the attention between the noisy and the guide
  tokens by `log(weight)`, both ways.
- `attention_mask` `[B, M]` (the T5 token mask) masks the text keys in cross-attention.
- `transformer_options["patches_replace"]["dit"][("double_block", i)]` replaces block i (called
  with `{"img", "txt", "attention_mask", "vec", "pe", "transformer_options",
  "self_attention_mask"}` and `{"original_block": fn}`, returns `{"img"}`);
  `transformer_options["stg_self_attn_blocks"]` (LTXVSpatioTemporalGuidance) makes those blocks'
  self-attention pass the values through.

Heads are not visible in the weights (q/k norms span every head): ComfyUI's 32, the released
widths' layout (2B: 32 x 64; 13B: 32 x 128).

A file's `config` metadata `transformer` section (LTX-Video 0.9.5+'s files carry one) completes
the config as ComfyUI's model_detection merges it: the RoPE switches (`causal_temporal_positioning`,
`positional_embedding_theta` / `_max_pos`, `vae_scale_factors`) and a head layout; widths it
states must be the weights' (ComfyUI would build them and fail to load); other entries are kept
for `comfy_unet_config` only (ComfyUI's LTXVModel ignores them).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.models.unet_blocks import operations_or_default, timestep_embedding
from comfy_core.models.weight_shapes import count_numbered, shape_reader

NUM_HEADS = 32  # ComfyUI's model_detection: attention_head_dim = width // 32
TIME_CHANNELS = 256
MAX_POS = (20, 2048, 2048)
# ComfyUI's LTXVModel keyword arguments beyond 0.9's, at the values 0.9 has (a pack may pass the
# whole unet_config); any other value, or any other option, is another LTX network.
_ZERO_NINE_OPTIONS = {"image_model": "ltxv", "use_middle_indices_grid": False, "timestep_scale_multiplier": 1000.0}
# Entries of 0.9.x files' `transformer` metadata (Lightricks' Transformer3DModel config) that name
# what 0.9's network always is: in unet_config as ComfyUI has them, ignored by its LTXVModel.
_ZERO_NINE_FILE_KEYS = frozenset({
    "_class_name", "_diffusers_version", "_name_or_path", "activation_fn", "attention_bias", "attention_type",
    "double_self_attention", "dropout", "norm_elementwise_affine", "norm_eps", "norm_num_groups",
    "num_embeds_ada_norm", "num_vector_embeds", "only_cross_attention", "out_channels", "project_to_2d_pos",
    "upcast_attention", "use_linear_projection", "qk_norm", "standardization_norm", "positional_embedding_type",
    "cross_attention_norm", "sample_size", "patch_size"})
VAE_SCALE_FACTORS = (8, 32, 32)


class LTXVConfigError(ValueError):
    """The LTX-Video weights are incomplete or inconsistent, or the parameters are impossible."""


class LTXVInputError(ValueError):
    """The inputs of an LTX-Video forward do not fit the network (shapes of masks, keyframes)."""


@dataclass(frozen=True)
class LTXVConfig:
    """ComfyUI's LTXV `unet_config` entries (LTX-Video 2B 0.9.x defaults)."""

    in_channels: int = 128
    cross_attention_dim: int = 2048
    attention_head_dim: int = 64
    num_attention_heads: int = NUM_HEADS
    caption_channels: int = 4096
    num_layers: int = 28
    positional_embedding_theta: float = 10000.0
    positional_embedding_max_pos: tuple[int, int, int] = MAX_POS
    causal_temporal_positioning: bool = False
    vae_scale_factors: tuple[int, int, int] = VAE_SCALE_FACTORS
    # The file's metadata `transformer` entries, (name, JSON text) pairs: ComfyUI's unet_config has them.
    file_options: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "positional_embedding_max_pos", tuple(self.positional_embedding_max_pos))
        object.__setattr__(self, "vae_scale_factors", tuple(int(v) for v in self.vae_scale_factors))
        if min(self.in_channels, self.attention_head_dim, self.num_attention_heads, self.num_layers) <= 0:
            raise LTXVConfigError(f"LTX-Video: impossible sizes {self}")
        if self.inner_dim < 6:
            raise LTXVConfigError(f"LTX-Video: a width of {self.inner_dim} cannot carry 3-D RoPE")

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            metadata: Mapping[str, str] | None = None) -> "LTXVConfig":
        """Widths and depth from names and shapes (ComfyUI's model_detection: 32 heads), then the
        file's `config` metadata `transformer` entries (see the module's docstring)."""
        shape = shape_reader(tensors, prefix, LTXVConfigError, "LTX-Video")
        if prefix + "audio_adaln_single.linear.weight" in tensors:  # ComfyUI's model_detection tests "ltxav" first
            raise LTXVConfigError("LTX-Video: an audio stream (audio_adaln_single): LTX-2's network, "
                                  "not LTX-Video 0.9's")
        options = _file_transformer_options(metadata)
        inner, in_channels = shape("patchify_proj.weight")
        depth = count_numbered(tensors, prefix, "transformer_blocks", LTXVConfigError, "LTX-Video")
        if depth == 0:
            raise LTXVConfigError(f"LTX-Video: no {prefix}transformer_blocks.N found")
        k_out, k_in = shape("transformer_blocks.0.attn2.to_k.weight")
        heads = options.get("num_attention_heads", NUM_HEADS)
        head_dim = options.get("attention_head_dim", inner // NUM_HEADS)
        if k_out != inner or not (isinstance(heads, int) and isinstance(head_dim, int)) or heads * head_dim != inner:
            raise LTXVConfigError(f"LTX-Video: width {inner} (attn2.to_k {k_out}) is not {heads} heads of "
                                  f"{head_dim}" + (" (the file's config)" if options else ""))
        caption = shape("caption_projection.linear_1.weight")[1]
        if shape("proj_out.weight") != (in_channels, inner):
            raise LTXVConfigError(f"LTX-Video: proj_out is {shape('proj_out.weight')}, expected {(in_channels, inner)}")
        if shape("adaln_single.linear.weight")[0] != 6 * inner:
            raise LTXVConfigError("LTX-Video: adaln_single.linear is not 6 x the width (an LTX-2 network?)")
        found = dict(in_channels=in_channels, cross_attention_dim=k_in, attention_head_dim=head_dim,
                     num_attention_heads=heads, caption_channels=caption, num_layers=depth)
        for key in ("in_channels", "cross_attention_dim", "caption_channels", "num_layers"):
            if key in options and options[key] != found[key]:
                raise LTXVConfigError(f"LTX-Video: the file's config has {key} {options[key]!r}, its weights "
                                      f"{found[key]}")
        switches = {k: options[k] for k in ("positional_embedding_theta", "positional_embedding_max_pos",
                                             "causal_temporal_positioning", "vae_scale_factors") if k in options}
        try:
            return cls(**found, **switches,
                       file_options=tuple((k, json.dumps(v)) for k, v in sorted(options.items())))
        except (TypeError, ValueError) as error:
            raise LTXVConfigError(f"LTX-Video: the file's config cannot be used: {error}") from error

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (model_detection's dict for "ltxv", the file's metadata merged)."""
        return {**{k: json.loads(v) for k, v in self.file_options},
                "image_model": "ltxv", "num_layers": self.num_layers, "attention_head_dim": self.attention_head_dim,
                "cross_attention_dim": self.cross_attention_dim, "in_channels": self.in_channels,
                "caption_channels": self.caption_channels}


def _file_transformer_options(metadata: Mapping[str, str] | None) -> dict[str, Any]:
    """The `transformer` section of a file's `config` metadata ({} when there is none)."""
    if not metadata or "config" not in metadata:
        return {}
    try:
        options = json.loads(metadata["config"]).get("transformer", {})
    except (ValueError, AttributeError) as error:
        raise LTXVConfigError(f"LTX-Video: the file's config metadata is not JSON: {error}") from error
    if not isinstance(options, dict):
        raise LTXVConfigError("LTX-Video: the file's config metadata has a transformer entry that is not a mapping")
    return options


# --- positions ---

def latent_coords(frames: int, height: int, width: int, batch: int, device: Any) -> torch.Tensor:
    """`[B, 3, f*h*w]` (t, y, x) latent coordinates of every token, in token order."""
    grid = torch.meshgrid(torch.arange(frames, device=device), torch.arange(height, device=device),
                          torch.arange(width, device=device), indexing="ij")
    return torch.stack(grid).reshape(1, 3, -1).expand(batch, -1, -1)


def latent_to_pixel_coords(latent_coords: torch.Tensor, scale_factors: tuple[int, int, int],
                           causal_fix: bool = False) -> torch.Tensor:
    """Latent coordinates `[B, 3, N(, 2)]` -> pixel coordinates; `causal_fix`: the first frame
    stands for one pixel frame (the causal VAE's), so time is `max(0, 8t + 1 - 8)`."""
    coords = latent_coords
    factors = torch.tensor(scale_factors, device=coords.device).view(1, 3, *([1] * (coords.ndim - 2)))
    pixel = coords * factors
    if causal_fix:
        pixel[:, 0] = (pixel[:, 0] + 1 - scale_factors[0]).clamp(min=0)
    return pixel


def rope_cos_sin(pixel_coords: torch.Tensor, dim: int, theta: float, max_pos: tuple[int, int, int],
                 out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Fractional 3-D RoPE tables `[B, N, dim]` (cos, sin), interleaved pairs, the first `dim % 6`
    channels unrotated (cos 1, sin 0). `pixel_coords` `[B, 3, N]` float, time already in seconds."""
    fractional = torch.stack([pixel_coords[:, i] / max_pos[i] for i in range(3)], dim=-1)  # [B, N, 3]
    freqs = theta ** torch.linspace(0.0, 1.0, dim // 6, device=pixel_coords.device, dtype=torch.float32)
    freqs = freqs * math.pi / 2
    angles = (freqs * (fractional.unsqueeze(-1) * 2 - 1)).transpose(-1, -2).flatten(2)  # [B, N, 3 * dim//6]
    cos = angles.cos().repeat_interleave(2, dim=-1)
    sin = angles.sin().repeat_interleave(2, dim=-1)
    pad = dim % 6
    if pad:
        cos = torch.cat([torch.ones_like(cos[..., :pad]), cos], dim=-1)
        sin = torch.cat([torch.zeros_like(sin[..., :pad]), sin], dim=-1)
    return cos.to(out_dtype), sin.to(out_dtype)


def apply_rotary(x: torch.Tensor, pe: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate interleaved pairs `(x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin)` over `[B, N, D]`."""
    cos, sin = pe
    pairs = x.unflatten(-1, (-1, 2))
    rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return x * cos + rotated * sin


# --- blocks ---

def rms_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), eps=eps)


class RMSNorm(nn.Module):
    """RMS norm with a learned `weight` (cast to the input per call)."""

    def __init__(self, dim: int, eps: float, factory: dict[str, Any]) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight=self.weight.to(dtype=x.dtype, device=x.device), eps=self.eps)


class TimestepEmbedder(nn.Module):
    """`linear_1` (256 -> width), SiLU, `linear_2` (diffusers' `TimestepEmbedding`)."""

    def __init__(self, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(TIME_CHANNELS, dim, **factory)
        self.linear_2 = ops.Linear(dim, dim, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class _Emb(nn.Module):
    def __init__(self, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.timestep_embedder = TimestepEmbedder(dim, ops, factory)


class AdaLayerNormSingle(nn.Module):
    """PixArt-alpha's adaLN-single (Chen et al. 2023, arXiv 2310.00426, section 2.3) with `rows`
    modulation rows (6 here; LTX-2 uses 9, 4, 2 and 1): timesteps `[N]` (0..1000) ->
    (`[N, rows * dim]`, the embedding `[N, dim]`)."""

    def __init__(self, dim: int, ops: Any, factory: dict[str, Any], rows: int = 6) -> None:
        super().__init__()
        self.emb = _Emb(dim, ops, factory)
        self.linear = ops.Linear(dim, rows * dim, **factory)

    def forward(self, timestep: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        embedded = self.emb.timestep_embedder(timestep_embedding(timestep, TIME_CHANNELS).to(dtype))
        return self.linear(F.silu(embedded)), embedded


class CaptionProjection(nn.Module):
    """The T5 states to the width: `linear_1`, tanh-GELU, `linear_2`."""

    def __init__(self, in_features: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(in_features, dim, **factory)
        self.linear_2 = ops.Linear(dim, dim, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.gelu(self.linear_1(x), approximate="tanh"))


class _Proj(nn.Module):
    def __init__(self, dim_in: int, dim_out: int, ops: Any, factory: dict[str, Any], bias: bool = True) -> None:
        super().__init__()
        self.proj = ops.Linear(dim_in, dim_out, bias=bias, **factory)


class FeedForward(nn.Module):
    """`net.0.proj` (dim -> 4 dim), tanh-GELU, `net.2` (4 dim -> dim); LTX-2 drops the biases of some."""

    def __init__(self, dim: int, ops: Any, factory: dict[str, Any], bias: bool = True) -> None:
        super().__init__()
        self.net = nn.ModuleList([_Proj(dim, 4 * dim, ops, factory, bias), nn.Dropout(0.0),
                                  ops.Linear(4 * dim, dim, bias=bias, **factory)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net[2](F.gelu(self.net[0].proj(x), approximate="tanh"))


class Attention(nn.Module):
    """Self- or cross-attention with biased projections and q/k RMS norms over the full width
    (eps 1e-5); RoPE on q and k when `pe` is given."""

    def __init__(self, query_dim: int, context_dim: int | None, heads: int, dim_head: int, ops: Any,
                 factory: dict[str, Any]) -> None:
        super().__init__()
        inner = heads * dim_head
        context_dim = query_dim if context_dim is None else context_dim
        self.heads = heads
        self.q_norm = RMSNorm(inner, 1e-5, factory)
        self.k_norm = RMSNorm(inner, 1e-5, factory)
        self.to_q = ops.Linear(query_dim, inner, **factory)
        self.to_k = ops.Linear(context_dim, inner, **factory)
        self.to_v = ops.Linear(context_dim, inner, **factory)
        self.to_out = nn.ModuleList([ops.Linear(inner, query_dim, **factory), nn.Dropout(0.0)])

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                pe: tuple[torch.Tensor, torch.Tensor] | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        options = transformer_options or {}
        self_attention = context is None
        context = x if context is None else context
        v = self.to_v(context)
        if self_attention and options.get("stg_skip_self_attn", False):
            return self.to_out[0](v)  # STG's perturbed pass: the values pass through
        q = self.q_norm(self.to_q(x))
        k = self.k_norm(self.to_k(context))
        if pe is not None:
            q, k = apply_rotary(q, pe), apply_rotary(k, pe)
        if mask is None:
            out = calling.attend(q, k, v, self.heads, transformer_options=options)
        else:
            out = calling.attend_masked(q, k, v, self.heads, mask=mask, transformer_options=options)
        return self.to_out[0](out)


class BasicTransformerBlock(nn.Module):
    """Modulated self-attention, cross-attention, modulated feed-forward (see the module doc)."""

    def __init__(self, dim: int, heads: int, dim_head: int, context_dim: int, ops: Any,
                 factory: dict[str, Any]) -> None:
        super().__init__()
        self.attn1 = Attention(dim, None, heads, dim_head, ops, factory)
        self.ff = FeedForward(dim, ops, factory)
        self.attn2 = Attention(dim, context_dim, heads, dim_head, ops, factory)
        self.scale_shift_table = nn.Parameter(torch.empty(6, dim, **factory))

    def forward(self, x: torch.Tensor, context: torch.Tensor, attention_mask: torch.Tensor | None = None,
                timestep: torch.Tensor | None = None, pe: Any = None,
                transformer_options: dict[str, Any] | None = None,
                self_attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        # timestep [B, 1 or N, 6 * dim] -> six [B, 1 or N, dim] rows
        rows = (self.scale_shift_table[None, None].to(device=x.device, dtype=x.dtype)
                + timestep.reshape(x.shape[0], timestep.shape[1], 6, -1))
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = rows.unbind(dim=2)
        x = x + self.attn1(rms_norm(x) * (1 + scale_msa) + shift_msa, pe=pe, mask=self_attention_mask,
                           transformer_options=transformer_options) * gate_msa
        x = x + self.attn2(x, context=context, mask=attention_mask, transformer_options=transformer_options)
        return x + self.ff(rms_norm(x) * (1 + scale_mlp) + shift_mlp) * gate_mlp


class LTXVModel(nn.Module):
    """ComfyUI's `comfy.ldm.lightricks.model.LTXVModel` for LTX-Video 0.9.x (see the module doc)."""

    # DIFFUSION_MODEL wrappers' positional arguments, ComfyUI's `_forward` order (comfy_core/models/diffusion.py)
    wrapper_arguments = ("x", "timesteps", "context", "attention_mask", "frame_rate", "transformer_options",
                         "keyframe_idxs")

    def __init__(self, in_channels: int = 128, cross_attention_dim: int = 2048, attention_head_dim: int = 64,
                 num_attention_heads: int = NUM_HEADS, caption_channels: int = 4096, num_layers: int = 28,
                 positional_embedding_theta: float = 10000.0,
                 positional_embedding_max_pos: tuple[int, int, int] | list[int] = MAX_POS,
                 causal_temporal_positioning: bool = False,
                 vae_scale_factors: tuple[int, int, int] = VAE_SCALE_FACTORS, dtype: Any = None, device: Any = None,
                 operations: Any = None, **kwargs: Any) -> None:
        super().__init__()
        unknown = {k: v for k, v in kwargs.items()
                   if k not in _ZERO_NINE_FILE_KEYS and _ZERO_NINE_OPTIONS.get(k, False) != v and v is not None}
        if unknown:  # LTX-2's switches (cross_attention_adaln, apply_gated_attention, ...) build another network
            raise LTXVConfigError(f"LTX-Video 0.9: options of another LTX network are not built here: {sorted(unknown)}")
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = LTXVConfig(in_channels, cross_attention_dim, attention_head_dim, num_attention_heads,
                                 caption_channels, num_layers, positional_embedding_theta,
                                 tuple(positional_embedding_max_pos), causal_temporal_positioning,
                                 tuple(vae_scale_factors))
        self.dtype = dtype
        self.in_channels = self.out_channels = in_channels
        self.inner_dim = num_attention_heads * attention_head_dim
        self.num_attention_heads, self.attention_head_dim = num_attention_heads, attention_head_dim
        self.cross_attention_dim, self.caption_channels = cross_attention_dim, caption_channels
        self.positional_embedding_theta = positional_embedding_theta
        self.positional_embedding_max_pos = tuple(positional_embedding_max_pos)
        self.causal_temporal_positioning = causal_temporal_positioning
        self.vae_scale_factors = tuple(vae_scale_factors)
        self.patchify_proj = ops.Linear(in_channels, self.inner_dim, **factory)
        self.adaln_single = AdaLayerNormSingle(self.inner_dim, ops, factory)
        self.caption_projection = CaptionProjection(caption_channels, self.inner_dim, ops, factory)
        self.transformer_blocks = nn.ModuleList([
            BasicTransformerBlock(self.inner_dim, num_attention_heads, attention_head_dim, cross_attention_dim,
                                  ops, factory) for _ in range(num_layers)])
        self.scale_shift_table = nn.Parameter(torch.empty(2, self.inner_dim, **factory))
        self.norm_out = ops.LayerNorm(self.inner_dim, elementwise_affine=False, eps=1e-6, **factory)
        self.proj_out = ops.Linear(self.inner_dim, in_channels, **factory)

    @classmethod
    def from_config(cls, config: LTXVConfig, operations: Any = None, **factory: Any) -> "LTXVModel":
        model = cls(in_channels=config.in_channels, cross_attention_dim=config.cross_attention_dim,
                    attention_head_dim=config.attention_head_dim, num_attention_heads=config.num_attention_heads,
                    caption_channels=config.caption_channels, num_layers=config.num_layers,
                    positional_embedding_theta=config.positional_embedding_theta,
                    positional_embedding_max_pos=config.positional_embedding_max_pos,
                    causal_temporal_positioning=config.causal_temporal_positioning,
                    vae_scale_factors=config.vae_scale_factors, operations=operations, **factory)
        model.config = config  # with the file's metadata entries (ComfyUI's unet_config has them)
        return model

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer names -> this network's parameters (`comfy_core.lora.dit_keymap`; the
        spellings: `keys.lora_key_map`)."""
        from comfy_core.families.ltxv.keys import lora_key_map

        return lora_key_map(names)

    @staticmethod
    def tokens(x: torch.Tensor) -> torch.Tensor:
        """`[B, C, T, H, W] -> [B, T*H*W, C]` (ComfyUI's SymmetricPatchifier with patch 1)."""
        return x.flatten(2).transpose(1, 2)

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor,
                attention_mask: torch.Tensor | None = None, frame_rate: Any = 25,
                transformer_options: dict[str, Any] | None = None, keyframe_idxs: torch.Tensor | None = None,
                denoise_mask: torch.Tensor | None = None, guide_attention_entries: Any = None,
                **kwargs: Any) -> torch.Tensor:
        """x `[B, C, T, H, W]`, timestep `[B]` (sigma) or `[B, N(, 1)]`, context `[B, M, caption]`
        -> the velocity `[B, C, T, H, W]`."""
        options = transformer_options if transformer_options is not None else {}
        if x.ndim != 5 or x.shape[1] != self.in_channels:
            raise LTXVInputError(f"LTX-Video: expected a latent [B, {self.in_channels}, T, H, W], got {tuple(x.shape)}")
        b, c, f, h, w = x.shape
        dtype = x.dtype
        tokens = self.tokens(x)  # [B, N, C]
        coords = latent_to_pixel_coords(latent_coords(f, h, w, b, x.device), self.vae_scale_factors,
                                        self.causal_temporal_positioning).to(torch.float32)  # [B, 3, N]
        timestep = self._per_token_timestep(timestep, denoise_mask, x)  # [B, 1 or N]
        grid_mask, guide_count, entries = None, 0, None
        if keyframe_idxs is not None and keyframe_idxs.shape[2] > 0:
            tokens, coords, timestep, grid_mask, guide_count, entries = self._keyframes(
                tokens, coords, timestep, keyframe_idxs, denoise_mask, guide_attention_entries, x)
        frame_rate = float(frame_rate.flatten()[0]) if isinstance(frame_rate, torch.Tensor) else float(frame_rate)
        coords = coords.clone()
        coords[:, 0] = coords[:, 0] / frame_rate
        pe = rope_cos_sin(coords, self.inner_dim, self.positional_embedding_theta, self.positional_embedding_max_pos,
                          dtype)
        hidden = self.patchify_proj(tokens)
        modulation, embedded = self.adaln_single((timestep * 1000.0).flatten(), dtype)
        modulation = modulation.view(b, -1, modulation.shape[-1])  # [B, 1 or N, 6 * dim]
        embedded = embedded.view(b, -1, embedded.shape[-1])
        context = self.caption_projection(context).view(b, -1, self.inner_dim)
        if attention_mask is not None and not torch.is_floating_point(attention_mask):
            attention_mask = ((attention_mask - 1).to(dtype).reshape(attention_mask.shape[0], 1, -1, attention_mask.shape[-1])
                              * torch.finfo(dtype).max)
        # a floating mask is already an additive bias (ComfyUI passes it on as it is)
        self_mask = self._guide_mask(hidden, guide_count, entries)
        hidden = self._blocks(hidden, context, attention_mask, modulation, pe, options, self_mask)
        rows = self.scale_shift_table[None, None].to(device=hidden.device, dtype=hidden.dtype) + embedded[:, :, None]
        hidden = self.norm_out(hidden) * (1 + rows[:, :, 1]) + rows[:, :, 0]
        out = self.proj_out(hidden)  # [B, N', C]
        if grid_mask is not None:
            full = torch.zeros((b, f * h * w, c), dtype=out.dtype, device=out.device)
            full[:, grid_mask] = out
            out = full
        return out.transpose(1, 2).reshape(b, c, f, h, w)

    @staticmethod
    def _per_token_timestep(timestep: torch.Tensor, denoise_mask: torch.Tensor | None,
                            x: torch.Tensor) -> torch.Tensor:
        if timestep.ndim >= 2:
            return timestep.reshape(timestep.shape[0], -1)
        if denoise_mask is None:
            return timestep.reshape(-1, 1)
        mask = denoise_mask.to(device=x.device, dtype=timestep.dtype)
        if mask.ndim != 5:
            raise LTXVInputError(f"LTX-Video: denoise_mask must be 5-D [B, C, T, H, W], got {tuple(mask.shape)}")
        mask = mask[:, :1].expand(x.shape[0], 1, *x.shape[2:])
        return (mask * timestep.view(-1, 1, 1, 1, 1)).flatten(1)  # [B, N]

    def _keyframes(self, tokens: torch.Tensor, coords: torch.Tensor, timestep: torch.Tensor,
                   keyframe_idxs: torch.Tensor, denoise_mask: torch.Tensor | None, entries: Any,
                   x: torch.Tensor) -> tuple:
        """Drop negatively masked tokens, place the guides' pixel coordinates (see the module doc)."""
        per_frame = x.shape[3] * x.shape[4]
        count = keyframe_idxs.shape[2]
        if count % per_frame:
            raise LTXVInputError(f"LTX-Video: keyframe_idxs holds {count} tokens, not a whole number of "
                                 f"{per_frame}-token latent frames (guides recorded at another resolution: crop "
                                 "the guides before resizing the latent)")
        if count > tokens.shape[1]:
            raise LTXVInputError(f"LTX-Video: {count} keyframe tokens for a latent of {tokens.shape[1]}")
        if denoise_mask is None:
            grid = torch.ones(tokens.shape[1], dtype=torch.bool, device=tokens.device)
        else:
            mask = denoise_mask.to(tokens.device)[:, :1].expand(x.shape[0], 1, *x.shape[2:])
            grid = ~(mask.flatten(2)[0, 0] < 0)  # [N]
        kf_grid = grid[-count:]
        resolved = None
        if entries:
            total = sum(int(e["pre_filter_count"]) for e in entries)
            if total != count:
                raise LTXVInputError(f"LTX-Video: the guides' pre_filter_counts ({total}) do not match the "
                                     f"{count} keyframe tokens")
            resolved, offset = [], 0
            for entry in entries:
                n = int(entry["pre_filter_count"])
                resolved.append({**entry, "surviving_count": int(kf_grid[offset:offset + n].sum())})
                offset += n
        keyframes = keyframe_idxs.to(coords.device, coords.dtype)
        if keyframes.ndim == 4:
            keyframes = keyframes[..., 0]
        tokens, coords = tokens[:, grid], coords[:, :, grid].clone()
        if timestep.shape[1] > 1:
            timestep = timestep[:, grid]
        keyframes = keyframes[:, :, kf_grid]
        if keyframes.shape[2]:
            coords[:, :, -keyframes.shape[2]:] = keyframes
        return tokens, coords, timestep, (None if bool(grid.all()) else grid), keyframes.shape[2], resolved

    def _guide_mask(self, hidden: torch.Tensor, guide_count: int, entries: Any) -> torch.Tensor | None:
        """The additive self-attention bias `[1, 1, N, N]` weighing noisy <-> guide attention by
        `log(weight)` (weight: the guide's strength, times its pixel mask brought to the latent
        grid); None when every weight is 1."""
        if not guide_count or not entries:
            return None
        if not any(e.get("strength", 1.0) != 1.0 or e.get("pixel_mask") is not None for e in entries):
            return None
        weights = []
        for entry in entries:
            n = entry["surviving_count"]
            if n == 0:
                continue
            strength = float(entry.get("strength", 1.0))
            pixel_mask, shape = entry.get("pixel_mask"), entry.get("latent_shape")
            if pixel_mask is not None and shape is not None:
                per_token = downsample_mask_to_latent(pixel_mask.to(hidden.device, hidden.dtype), *shape)[:1]
                weights.append(per_token[:, :min(per_token.shape[1], n)] * strength)
            else:
                weights.append(torch.full((1, n), strength, device=hidden.device, dtype=hidden.dtype))
        if not weights:
            return None
        tracked = torch.cat(weights, dim=1)[0]  # [G]
        if bool((tracked == 1.0).all()):
            return None
        total, start = hidden.shape[1], hidden.shape[1] - guide_count
        finfo = torch.finfo(hidden.dtype)
        log_w = torch.full_like(tracked, finfo.min)
        positive = tracked > 0
        log_w[positive] = torch.log(tracked[positive].clamp(min=finfo.tiny))
        bias = torch.zeros((1, 1, total, total), device=hidden.device, dtype=hidden.dtype)
        end = start + tracked.shape[0]
        bias[..., :start, start:end] = log_w.view(1, 1, 1, -1)
        bias[..., start:end, :start] = log_w.view(1, 1, -1, 1)
        return bias

    def _blocks(self, x: torch.Tensor, context: torch.Tensor, attention_mask: torch.Tensor | None,
                modulation: torch.Tensor, pe: Any, options: dict[str, Any],
                self_mask: torch.Tensor | None) -> torch.Tensor:
        replace = options.get("patches_replace", {}).get("dit", {})
        stg = options.get("stg_self_attn_blocks")
        for i, block in enumerate(self.transformer_blocks):
            block_options = options
            if stg is not None:
                block_options = {**options, "stg_skip_self_attn": i in stg}
            if ("double_block", i) in replace:
                def original(args: dict[str, Any], block: nn.Module = block) -> dict[str, torch.Tensor]:
                    return {"img": block(args["img"], context=args["txt"], attention_mask=args["attention_mask"],
                                         timestep=args["vec"], pe=args["pe"],
                                         transformer_options=args["transformer_options"],
                                         self_attention_mask=args.get("self_attention_mask"))}

                x = replace[("double_block", i)](
                    {"img": x, "txt": context, "attention_mask": attention_mask, "vec": modulation, "pe": pe,
                     "transformer_options": block_options, "self_attention_mask": self_mask},
                    {"original_block": original})["img"]
            else:
                x = block(x, context=context, attention_mask=attention_mask, timestep=modulation, pe=pe,
                          transformer_options=block_options, self_attention_mask=self_mask)
        return x


def downsample_mask_to_latent(mask: torch.Tensor, frames: int, height: int, width: int) -> torch.Tensor:
    """A pixel mask `[B, 1, F, H, W]` in 0..1 -> per-token weights `[B, frames * height * width]`:
    area-resized per frame; the first pixel frame is the first latent frame, the rest averaged in
    groups of `(F - 1) // (frames - 1)` (repeated by nearest neighbour when there are fewer)."""
    b, f_pix = mask.shape[0], mask.shape[2]
    spatial = F.interpolate(mask.movedim(2, 1).reshape(b * f_pix, 1, *mask.shape[-2:]), size=(height, width),
                            mode="area").reshape(b, f_pix, 1, height, width).movedim(1, 2)  # [B, 1, F, h, w]
    first = spatial[:, :, :1]
    if f_pix > 1 and frames > 1:
        group = (f_pix - 1) // (frames - 1)
        if group < 1:
            rest = spatial[:, :, 1:].permute(0, 3, 4, 1, 2).reshape(-1, 1, f_pix - 1)
            rest = F.interpolate(rest, size=frames - 1, mode="nearest")
            rest = rest.reshape(b, height, width, 1, frames - 1).permute(0, 3, 4, 1, 2)
        else:
            rest = spatial[:, :, 1:1 + (frames - 1) * group].unflatten(2, (frames - 1, group)).mean(dim=3)
        latent = torch.cat([first, rest], dim=2)
    elif frames > 1:
        latent = first.expand(-1, -1, frames, -1, -1)
    else:
        latent = first
    return latent.flatten(1)

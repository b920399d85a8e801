"""NextDiT: the single-stream diffusion transformer of Lumina-Image 2.0 and Z-Image, and
`NextDiTConfig` read from weights.

Architecture of Alpha-VLLM's Lumina-Image 2.0 (Qin et al. 2025, "Lumina-Image 2.0: A Unified and
Efficient Image Generative Framework", github.com/Alpha-VLLM/Lumina-Image-2.0 `models/model.py`)
and Tongyi-MAI's Z-Image (2025, "Z-Image: An Efficient Image Generation Foundation Model with
Single-Stream Diffusion Transformer"), which keeps its layout: the text states are embedded
(`cap_embedder`: RMSNorm + linear) and refined by `context_refiner` blocks without modulation,
the 2x2 latent patches embedded (`x_embedder`) and refined by `noise_refiner` blocks with
timestep modulation, then text and image tokens go as one sequence through `layers` (joint
self-attention with 3-axis RoPE over `(sequence index, row, col)`, q/k RMS-normed, grouped
query heads allowed; a SwiGLU feed-forward; sandwich RMS norms before and after each branch,
tanh-gated residuals) and a modulated final layer. Z-Image differs in its modulation input (the
timestep embedding projected to 256 wide, no SiLU before the blocks' modulation linear: ComfyUI's
`z_image_modulation`), the timestep scale (x1000), RoPE base 256 and learned pad tokens that
fill both sequences to a multiple of 32.

The state-dict names, the constructor facts and the forward arguments are those of ComfyUI's
`comfy/ldm/lumina/model.py` (`NextDiT`, `forward(x, timesteps, context, num_tokens,
attention_mask=None, **kwargs)`), written here, with its behaviour:

- `timesteps` is sigma in 0..1 (flow sampling, multiplier 1); the network embeds
  `(1 - sigma) * time_scale` and returns the negated prediction (its training target runs from
  noise to image);
- the text attention mask and `num_tokens` are accepted and not applied (ComfyUI passes no mask
  into the blocks: padded text tokens are attended);
- text pad tokens take the next sequence positions, image pad tokens position (0, 0, 0); the
  image starts at sequence position `padded text length + 1`;
- `transformer_options["patches"]["noise_refiner"]` functions get `{"img", "img_input", "txt",
  "pe", "vec", "x", "block_index", "transformer_options", "block_type"}` after each noise refiner
  block and `["double_block"]` functions `{"img", "img_input", "txt", "pe", "vec", "x",
  "block_index", "transformer_options"}` after each main block (image and text parts of the
  sequence); a returned "img" / "txt" replaces that part. `block_type` "double", `block_index`
  and `total_blocks` are set on a shallow copy of the caller's options.

Z-Image Omni (a file with `siglip_embedder.*`, `siglip_refiner.N.*`, `siglip_pad_token`: ComfyUI's
NextDiT built with `siglip_feat_dim`) runs `forward_omni` when `ref_latents` are given (ComfyUI's
`_forward` / `patchify_and_embed` / `embed_all` with reference latents, any NextDiT file): per
reference a caption (its text embeds, `ref_contexts[i]`), SigLIP tokens (`siglip_feats[i]`, `[B, h,
w, C]`) and the latent's patches, then the target's, each padded to 32 with its pad token; captions,
SigLIP tokens and images refined apart, then `[captions, SigLIP, images]` through the blocks, the
references' tokens modulated by the clean timestep (sigma 0) and the target's by sigma (see
`omni_layout` for the RoPE ids). Without reference latents an Omni file runs the plain forward.

What the weights cannot show (RoPE split of the head, RoPE base, timestep scale, axis lengths) is
the family's: `detect_from_weights` takes it from the family package (comfy_core/families/zimage,
comfy_core/families/lumina2).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.attention.rope import rope_frequencies, rotate_pairs
from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default, timestep_embedding
from comfy_core.models.weight_shapes import count_numbered, shape_reader

FREQUENCY_DIM = 256  # the sinusoidal timestep embedding's width (ComfyUI's TimestepEmbedder default)
FP16_MAX = 65504.0


class NextDiTConfigError(ValueError):
    """The NextDiT weights are incomplete or inconsistent, or the parameters are impossible."""


@dataclass(frozen=True)
class NextDiTConfig:
    """The network's structure (the Z-Image Turbo defaults). `ffn_hidden` is the SwiGLU width
    (ComfyUI derives it from `ffn_dim_multiplier`); `t_hidden` the timestep MLP's inner width and
    `adaln_dim` its output, the modulation input (Z-Image: 1024 and 256; Lumina 2: min(dim, 1024)
    for both)."""

    patch_size: int = 2
    in_channels: int = 16
    dim: int = 3840
    n_layers: int = 30
    n_refiner_layers: int = 2
    n_heads: int = 30
    n_kv_heads: int = 30
    ffn_hidden: int = 10240
    norm_eps: float = 1e-5
    qk_norm: bool = True
    cap_feat_dim: int = 2560
    axes_dims: tuple[int, ...] = (32, 48, 48)
    axes_lens: tuple[int, ...] = (1536, 512, 512)
    rope_theta: float = 256.0
    z_image_modulation: bool = True
    time_scale: float = 1000.0
    pad_tokens_multiple: int | None = 32
    t_hidden: int = 1024
    adaln_dim: int = 256
    siglip_feat_dim: int | None = None  # Z-Image Omni: the SigLIP states' width (siglip_embedder), else None

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes_dims", tuple(int(a) for a in self.axes_dims))
        object.__setattr__(self, "axes_lens", tuple(int(a) for a in self.axes_lens))
        if self.n_heads <= 0 or self.dim % self.n_heads:
            raise NextDiTConfigError(f"NextDiT: width {self.dim} is not a multiple of {self.n_heads} heads")
        if self.n_kv_heads <= 0 or self.n_heads % self.n_kv_heads:
            raise NextDiTConfigError(f"NextDiT: {self.n_heads} query heads cannot share {self.n_kv_heads} "
                                     "key/value heads")
        if sum(self.axes_dims) != self.head_dim or any(a % 2 for a in self.axes_dims):
            raise NextDiTConfigError(f"NextDiT: RoPE axes {list(self.axes_dims)} must be even and sum to the head "
                                     f"width {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def latent_channels(self) -> int:
        return self.in_channels

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` of this model (`model_detection`'s "lumina2" entries)."""
        config = {"image_model": "lumina2", "patch_size": self.patch_size, "in_channels": self.in_channels,
                  "dim": self.dim, "cap_feat_dim": self.cap_feat_dim, "n_layers": self.n_layers,
                  "qk_norm": self.qk_norm, "n_heads": self.n_heads, "n_kv_heads": self.n_kv_heads,
                  "axes_dims": list(self.axes_dims), "axes_lens": list(self.axes_lens),
                  "rope_theta": self.rope_theta, "ffn_dim_multiplier": self.ffn_hidden / self.dim}
        if self.z_image_modulation:
            config.update(z_image_modulation=True, time_scale=self.time_scale)
        if self.pad_tokens_multiple is not None:
            config["pad_tokens_multiple"] = self.pad_tokens_multiple
        if self.siglip_feat_dim is not None:
            config["siglip_feat_dim"] = self.siglip_feat_dim
        return config

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "", *,
                            axes_split: Callable[[int], tuple[int, ...]], axes_lens: Sequence[int],
                            rope_theta: float, time_scale: float, pad_multiple: int) -> "NextDiTConfig":
        """The structure from names and shapes under `prefix` (ComfyUI's layout); the family gives
        what weights cannot show: `axes_split(head_dim)` (RoPE channels per axis), `axes_lens`,
        `rope_theta`, `time_scale`, and the pad multiple used when pad tokens are present."""
        shape = shape_reader(tensors, prefix, NextDiTConfigError, "NextDiT")
        if any(k.startswith(prefix + "clip_text_pooled_proj.") for k in tensors):
            raise NextDiTConfigError("NextDiT: pooled-text (NewBie) inputs are not supported")
        dim, cap_feat_dim = shape("cap_embedder.1.weight")
        x_in = shape("x_embedder.weight")[1]
        head_dim = shape("layers.0.attention.q_norm.weight")[0]
        if head_dim <= 0 or dim % head_dim:
            raise NextDiTConfigError(f"NextDiT: q_norm width {head_dim} does not divide the width {dim}")
        n_heads = dim // head_dim
        qkv_rows = shape("layers.0.attention.qkv.weight")[0]
        if qkv_rows % head_dim or (qkv_rows // head_dim - n_heads) % 2 or qkv_rows // head_dim <= n_heads:
            raise NextDiTConfigError(f"NextDiT: layers.0.attention.qkv.weight has {qkv_rows} rows, not "
                                     f"{n_heads} query heads plus key and value heads of {head_dim}")
        n_kv_heads = (qkv_rows // head_dim - n_heads) // 2
        final_rows = shape("final_layer.linear.weight")[0]
        # x_embedder takes p*p*C inputs and final_layer gives p*p*C outputs (C in = C out)
        if x_in != final_rows:
            raise NextDiTConfigError(f"NextDiT: x_embedder takes {x_in} inputs but final_layer gives {final_rows}")
        patch_size = 2  # ComfyUI's model_detection: every released NextDiT patches 2x2
        if x_in % (patch_size * patch_size):
            raise NextDiTConfigError(f"NextDiT: x_embedder's {x_in} inputs are not 2x2 patches")
        t_hidden = shape("t_embedder.mlp.0.weight")[0]
        adaln_dim = shape("t_embedder.mlp.2.weight")[0]
        z_mod = prefix + "layers.0.adaLN_modulation.0.weight" in tensors
        if not z_mod and prefix + "layers.0.adaLN_modulation.1.weight" not in tensors:
            raise NextDiTConfigError(f"NextDiT key {prefix + 'layers.0.adaLN_modulation.1.weight'!r} is missing")
        n_layers = count_numbered(tensors, prefix, "layers", NextDiTConfigError, "NextDiT")
        n_refiner = count_numbered(tensors, prefix, "noise_refiner", NextDiTConfigError, "NextDiT")
        n_context = count_numbered(tensors, prefix, "context_refiner", NextDiTConfigError, "NextDiT")
        if n_refiner != n_context:
            raise NextDiTConfigError(f"NextDiT: {n_refiner} noise refiner blocks but {n_context} context "
                                     "refiner blocks")
        pads = prefix + "cap_pad_token" in tensors
        try:
            axes = tuple(axes_split(head_dim))
        except ValueError as exc:
            raise NextDiTConfigError(f"NextDiT: {exc}") from None
        siglip_feat_dim = _detect_siglip(tensors, prefix, shape, dim, n_refiner, pads)
        return cls(patch_size=patch_size, in_channels=x_in // (patch_size * patch_size), dim=dim, n_layers=n_layers,
                   n_refiner_layers=n_refiner, n_heads=n_heads, n_kv_heads=n_kv_heads,
                   ffn_hidden=shape("layers.0.feed_forward.w1.weight")[0],
                   qk_norm=True, cap_feat_dim=cap_feat_dim, axes_dims=axes, axes_lens=tuple(axes_lens),
                   rope_theta=float(rope_theta), z_image_modulation=z_mod, time_scale=float(time_scale),
                   pad_tokens_multiple=pad_multiple if pads else None, t_hidden=t_hidden, adaln_dim=adaln_dim,
                   siglip_feat_dim=siglip_feat_dim)


SIGLIP_EMBEDDER = "siglip_embedder."


def _detect_siglip(tensors: Mapping[str, Any], prefix: str, shape: Callable[[str], tuple[int, ...]], dim: int,
                   n_refiner: int, pads: bool) -> int | None:
    """Z-Image Omni's SigLIP width from `siglip_embedder.0.weight` (its RMSNorm; ComfyUI's
    `model_detection` reads the same key), None without SigLIP weights; the embedder's linear,
    the `siglip_refiner` blocks (as many as the other refiners) and `siglip_pad_token` checked."""
    if not any(k.startswith(prefix + SIGLIP_EMBEDDER) for k in tensors):
        return None
    feat = shape(SIGLIP_EMBEDDER + "0.weight")[0]
    linear = shape(SIGLIP_EMBEDDER + "1.weight")
    if tuple(linear) != (dim, feat):
        raise NextDiTConfigError(f"NextDiT: siglip_embedder.1.weight has shape {list(linear)}, not [{dim}, {feat}]")
    n_siglip = count_numbered(tensors, prefix, "siglip_refiner", NextDiTConfigError, "NextDiT")
    if n_siglip != n_refiner:
        raise NextDiTConfigError(f"NextDiT: {n_siglip} SigLIP refiner blocks but {n_refiner} noise refiner blocks")
    if prefix + "siglip_pad_token" not in tensors or not pads:
        raise NextDiTConfigError("NextDiT: SigLIP (Omni) weights need `siglip_pad_token` and the text / image pad "
                                 "tokens")
    return int(feat)


def clamp_fp16(x: torch.Tensor) -> torch.Tensor:
    """fp16 activations kept finite (ComfyUI's `clamp_fp16`); other dtypes unchanged."""
    if x.dtype == torch.float16:
        return torch.nan_to_num(x, nan=0.0, posinf=FP16_MAX, neginf=-FP16_MAX)
    return x


class RMSNorm(nn.Module):
    """RMS normalisation (Zhang & Sennrich 2019) over the last axis with a learned `weight`, cast
    to the input's dtype per call (it may be stored in fp8)."""

    def __init__(self, dim: int, eps: float, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight=self.weight.to(dtype=x.dtype, device=x.device), eps=self.eps)


class JointAttention(nn.Module):
    """Self-attention with fused `qkv` (query heads, then key and value heads), per-head RMS
    norms of q and k (`q_norm`, `k_norm`), RoPE, and `out`."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, qk_norm: bool, factory: dict[str, Any],
                 ops: Any) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = dim // n_heads
        self.qkv = ops.Linear(dim, (n_heads + 2 * n_kv_heads) * self.head_dim, bias=False, **factory)
        self.out = ops.Linear(n_heads * self.head_dim, dim, bias=False, **factory)
        if qk_norm:
            self.q_norm = RMSNorm(self.head_dim, 1e-5, **factory)
            self.k_norm = RMSNorm(self.head_dim, 1e-5, **factory)
        else:
            self.q_norm = self.k_norm = nn.Identity()

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, transformer_options: dict[str, Any]) -> torch.Tensor:
        """x `[B, L, dim]`, freqs `[B, L, 1, D/2, 2, 2]` -> `[B, L, dim]`."""
        b, n, _ = x.shape
        d = self.head_dim
        q, k, v = self.qkv(x).split([self.n_heads * d, self.n_kv_heads * d, self.n_kv_heads * d], dim=-1)
        q = self.q_norm(q.view(b, n, self.n_heads, d))  # [B, L, H, D]
        k = self.k_norm(k.view(b, n, self.n_kv_heads, d))
        v = v.view(b, n, self.n_kv_heads, d)
        q = rotate_pairs(q, freqs, v.dtype)
        k = rotate_pairs(k, freqs, v.dtype)
        if self.n_kv_heads != self.n_heads:  # grouped-query heads: each key/value head serves n_rep queries
            rep = self.n_heads // self.n_kv_heads
            k = k.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
        out = calling.attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), self.n_heads,
                             skip_reshape=True, transformer_options=transformer_options)  # [B, L, H*D]
        return self.out(out)


class FeedForward(nn.Module):
    """SwiGLU (Shazeer 2020): `w2(silu(w1 x) * w3 x)`, no biases."""

    def __init__(self, dim: int, hidden: int, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.w1 = ops.Linear(dim, hidden, bias=False, **factory)
        self.w2 = ops.Linear(hidden, dim, bias=False, **factory)
        self.w3 = ops.Linear(dim, hidden, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(clamp_fp16(F.silu(self.w1(x)) * self.w3(x)))


class JointTransformerBlock(nn.Module):
    """Attention and feed-forward branches, each between two RMS norms; with `modulation`, the
    first norm's output is scaled by `1 + scale` and the branch gated by `tanh(gate)`, the four
    vectors from `adaLN_modulation(vec)` (Z-Image: a bare linear; Lumina 2: SiLU then linear)."""

    def __init__(self, config: NextDiTConfig, modulation: bool, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        dim, eps = config.dim, config.norm_eps
        self.attention = JointAttention(dim, config.n_heads, config.n_kv_heads, config.qk_norm, factory, ops)
        self.feed_forward = FeedForward(dim, config.ffn_hidden, factory, ops)
        self.attention_norm1 = RMSNorm(dim, eps, **factory)
        self.ffn_norm1 = RMSNorm(dim, eps, **factory)
        self.attention_norm2 = RMSNorm(dim, eps, **factory)
        self.ffn_norm2 = RMSNorm(dim, eps, **factory)
        self.modulation = modulation
        if modulation:
            linear = ops.Linear(config.adaln_dim, 4 * dim, bias=True, **factory)
            self.adaLN_modulation = (nn.Sequential(linear) if config.z_image_modulation
                                     else nn.Sequential(nn.SiLU(), linear))

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, vec: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None, *, vec_zero: torch.Tensor | None = None,
                real_tokens: torch.Tensor | None = None) -> torch.Tensor:
        """x `[B, L, dim]`, freqs `[B, L, 1, D/2, 2, 2]`, vec `[B, adaln_dim]` (modulated blocks).

        Z-Image Omni: with `vec_zero` (the clean timestep's vector) and `real_tokens` (bool
        `[1, L, 1]`), the tokens where `real_tokens` holds are modulated by `vec`, the others by
        `vec_zero` (ComfyUI's `timestep_zero_index`)."""
        options = transformer_options if transformer_options is not None else {}
        if not self.modulation:
            x = x + self.attention_norm2(clamp_fp16(self.attention(self.attention_norm1(x), freqs, options)))
            return x + self.ffn_norm2(clamp_fp16(self.feed_forward(self.ffn_norm1(x))))
        # [B, 1, dim] each (or [B, L, dim] per token)
        scale_msa, gate_msa, scale_mlp, gate_mlp = _modulations(self.adaLN_modulation, vec, vec_zero, real_tokens, 4)
        attn = self.attention(self.attention_norm1(x) * (1 + scale_msa), freqs, options)
        x = x + gate_msa.tanh() * self.attention_norm2(clamp_fp16(attn))
        ffn = self.feed_forward(self.ffn_norm1(x) * (1 + scale_mlp))
        return x + gate_mlp.tanh() * self.ffn_norm2(clamp_fp16(ffn))


class FinalLayer(nn.Module):
    """LayerNorm without affine (eps 1e-6) scaled by `1 + adaLN_modulation(vec)`, then `linear`."""

    def __init__(self, config: NextDiTConfig, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        out = config.patch_size * config.patch_size * config.in_channels
        self.norm_final = ops.LayerNorm(config.dim, elementwise_affine=False, eps=1e-6, **factory)
        self.linear = ops.Linear(config.dim, out, bias=True, **factory)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), ops.Linear(config.adaln_dim, config.dim, bias=True, **factory))

    def forward(self, x: torch.Tensor, vec: torch.Tensor, *, vec_zero: torch.Tensor | None = None,
                real_tokens: torch.Tensor | None = None) -> torch.Tensor:
        scale, = _modulations(self.adaLN_modulation, vec, vec_zero, real_tokens, 1)  # [B, 1, dim] (or [B, L, dim])
        return self.linear(self.norm_final(x) * (1 + scale))


def _modulations(module: nn.Module, vec: torch.Tensor, vec_zero: torch.Tensor | None,
                 real_tokens: torch.Tensor | None, parts: int) -> tuple[torch.Tensor, ...]:
    """`module(vec)` split into `parts` vectors `[B, 1, dim]`; with `vec_zero` and `real_tokens`
    (bool `[1, L, 1]`) per token `[B, L, dim]`: `module(vec)` where `real_tokens` holds, else
    `module(vec_zero)` (Z-Image Omni's clean reference tokens)."""
    real = module(vec).unsqueeze(1).chunk(parts, dim=2)
    if vec_zero is None or real_tokens is None:
        return real
    zero = module(vec_zero).unsqueeze(1).chunk(parts, dim=2)
    return tuple(torch.where(real_tokens, r, z) for r, z in zip(real, zero))


class TimestepEmbedder(nn.Module):
    """Sinusoidal embedding (256 wide, cos half first) -> `mlp` (linear, SiLU, linear)."""

    def __init__(self, hidden: int, out: int, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.mlp = nn.Sequential(ops.Linear(FREQUENCY_DIM, hidden, bias=True, **factory), nn.SiLU(),
                                 ops.Linear(hidden, out, bias=True, **factory))

    def forward(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.mlp(timestep_embedding(t, FREQUENCY_DIM).to(dtype))


def rope(ids: torch.Tensor, axes_dims: Sequence[int], theta: float) -> torch.Tensor:
    """Rotations for position ids `[B, L, n_axes]`: `[B, L, 1, D/2, 2, 2]` (a heads axis to broadcast)."""
    return torch.cat([rope_frequencies(ids[..., i], d, theta) for i, d in enumerate(axes_dims)], dim=-3).unsqueeze(2)


@comfyui_name("NextDiT")
class NextDiT(nn.Module):
    """The NextDiT transformer (see the module docstring), built from a `NextDiTConfig`.
    `lora_keys(config, names)`: the family's LoRA key map (its `keys.lora_key_map`)."""

    # DIFFUSION_MODEL wrappers' positional arguments, ComfyUI's `_forward` order (comfy_core/models/diffusion.py)
    wrapper_arguments = ("x", "timesteps", "context", "num_tokens", "attention_mask")  # transformer_options: a keyword

    def __init__(self, config: NextDiTConfig, dtype: Any = None, device: Any = None, operations: Any = None,
                 lora_keys: Callable[[NextDiTConfig, list[str]], dict[str, Any]] | None = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.patch_size = config.patch_size
        self.in_channels = self.out_channels = config.in_channels
        self.dim, self.n_heads = config.dim, config.n_heads
        self.pad_tokens_multiple = config.pad_tokens_multiple
        self.time_scale = config.time_scale
        self._lora_keys = lora_keys
        patch_width = config.patch_size * config.patch_size * config.in_channels
        self.x_embedder = ops.Linear(patch_width, config.dim, bias=True, **factory)
        self.noise_refiner = nn.ModuleList(JointTransformerBlock(config, True, factory, ops)
                                           for _ in range(config.n_refiner_layers))
        self.context_refiner = nn.ModuleList(JointTransformerBlock(config, False, factory, ops)
                                             for _ in range(config.n_refiner_layers))
        self.t_embedder = TimestepEmbedder(config.t_hidden, config.adaln_dim, factory, ops)
        self.cap_embedder = nn.Sequential(RMSNorm(config.cap_feat_dim, config.norm_eps, **factory),
                                          ops.Linear(config.cap_feat_dim, config.dim, bias=True, **factory))
        self.layers = nn.ModuleList(JointTransformerBlock(config, True, factory, ops) for _ in range(config.n_layers))
        self.final_layer = FinalLayer(config, factory, ops)
        if config.pad_tokens_multiple is not None:
            self.x_pad_token = nn.Parameter(torch.empty((1, config.dim), **factory))
            self.cap_pad_token = nn.Parameter(torch.empty((1, config.dim), **factory))
        if config.siglip_feat_dim is not None:  # Z-Image Omni (ComfyUI's NextDiT with siglip_feat_dim)
            width = config.siglip_feat_dim
            self.siglip_embedder = nn.Sequential(RMSNorm(width, config.norm_eps, **factory),
                                                 ops.Linear(width, config.dim, bias=True, **factory))
            self.siglip_refiner = nn.ModuleList(JointTransformerBlock(config, False, factory, ops)
                                                for _ in range(config.n_refiner_layers))
            self.siglip_pad_token = nn.Parameter(torch.empty((1, config.dim), **factory))

    @classmethod
    def from_config(cls, config: NextDiTConfig, **kwargs: Any) -> "NextDiT":
        return cls(config, **kwargs)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target, given the state-dict names under `diffusion_model.` of the
        model holding this network (`comfy_core.lora.dit_keymap`; the spellings: the family's keys)."""
        if self._lora_keys is None:
            from comfy_core.families.lora_keys import native_key_map

            return native_key_map(names)
        return self._lora_keys(self.config, names)

    # -- sequences ------------------------------------------------------------------------------------

    def _pad(self, tokens: torch.Tensor, pad_token: torch.Tensor | None) -> torch.Tensor:
        """`tokens` `[B, L, dim]` filled up with `pad_token` to a multiple of `pad_tokens_multiple`."""
        if self.pad_tokens_multiple is None or pad_token is None:
            return tokens
        extra = (-tokens.shape[1]) % self.pad_tokens_multiple
        if extra == 0:
            return tokens
        fill = pad_token.to(device=tokens.device, dtype=tokens.dtype).unsqueeze(0).expand(tokens.shape[0], extra, -1)
        return torch.cat([tokens, fill], dim=1)

    def _image_ids(self, start: int, h_tokens: int, w_tokens: int, batch: int, device: torch.device,
                   transformer_options: Mapping[str, Any]) -> torch.Tensor:
        """Position ids `[B, h*w, 3]`: `(start, row, col)`; `transformer_options["rope_options"]`
        scales and shifts rows and columns (ComfyUI's `scale_y/x`, `shift_y/x`)."""
        rope_options = transformer_options.get("rope_options") or {}
        rows = torch.arange(h_tokens, dtype=torch.float32, device=device) * rope_options.get("scale_y", 1.0) \
            + rope_options.get("shift_y", 0.0)
        cols = torch.arange(w_tokens, dtype=torch.float32, device=device) * rope_options.get("scale_x", 1.0) \
            + rope_options.get("shift_x", 0.0)
        ids = torch.zeros((batch, h_tokens * w_tokens, 3), dtype=torch.float32, device=device)
        ids[:, :, 0] = start
        ids[:, :, 1] = rows.view(-1, 1).expand(h_tokens, w_tokens).flatten()
        ids[:, :, 2] = cols.view(1, -1).expand(h_tokens, w_tokens).flatten()
        return ids

    def modulation_input(self, timesteps: torch.Tensor, x: torch.Tensor, kwargs: Mapping[str, Any]) -> torch.Tensor:
        """The blocks' modulation vector `[B, adaln_dim]`: the embedding of `(1 - sigma) * time_scale`
        (NewBie's network adds its pooled text here, comfy_core/families/newbie)."""
        return self.t_embedder((1.0 - timesteps) * self.time_scale, dtype=x.dtype)

    def joint_blocks(self, cap: torch.Tensor, cap_freqs: torch.Tensor, img: torch.Tensor, img_freqs: torch.Tensor,
                     vec: torch.Tensor, orig_x: torch.Tensor, to: dict) -> torch.Tensor:
        """The caption through `context_refiner`, the image tokens through `noise_refiner` (its
        "noise_refiner" patch point), then both as one sequence `[B, Lc + Ni, dim]` through the
        main blocks (the "double_block" patch point); returns that sequence."""
        patches = to.get("patches", {}) or {}
        cap_len = cap.shape[1]
        for block in self.context_refiner:
            cap = block(cap, cap_freqs, transformer_options=to)
        img_input = img
        for i, block in enumerate(self.noise_refiner):
            img = block(img, img_freqs, vec, transformer_options=to)
            for patch in patches.get("noise_refiner", ()):
                out = patch({"img": img, "img_input": img_input, "txt": cap, "pe": img_freqs, "vec": vec, "x": orig_x,
                             "block_index": i, "transformer_options": to, "block_type": "noise_refiner"})
                if "img" in out:
                    img = out["img"]

        seq = torch.cat([cap, img], dim=1)
        freqs = torch.cat([cap_freqs, img_freqs], dim=1)
        seq_input = seq
        to["total_blocks"] = len(self.layers)
        to["block_type"] = "double"
        for i, block in enumerate(self.layers):
            to["block_index"] = i
            seq = block(seq, freqs, vec, transformer_options=to)
            for patch in patches.get("double_block", ()):
                out = patch({"img": seq[:, cap_len:], "img_input": seq_input[:, cap_len:], "txt": seq[:, :cap_len],
                             "pe": freqs[:, cap_len:], "vec": vec, "x": orig_x, "block_index": i,
                             "transformer_options": to})
                if "img" in out or "txt" in out:
                    seq = torch.cat([out.get("txt", seq[:, :cap_len]), out.get("img", seq[:, cap_len:])], dim=1)
        return seq

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor, num_tokens: Any = None,
                attention_mask: torch.Tensor | None = None, transformer_options: Mapping[str, Any] | None = None,
                **kwargs: Any) -> torch.Tensor:
        """x `[B, C, H, W]`, timesteps (sigma) `[B]`, context `[B, Lt, cap_feat_dim]` -> `[B, C, H, W]`
        (the negated network output, ComfyUI's convention). `num_tokens` and `attention_mask` are
        accepted and not applied (as ComfyUI); `y`, `control` and other inputs are ignored.

        Z-Image Omni (ComfyUI's `ref_latents`, `ref_contexts`, `siglip_feats` keywords): with
        reference latents the forward is `forward_omni`'s; without, these are ignored."""
        if kwargs.get("ref_latents"):
            return self.forward_omni(x, timesteps, context, num_tokens, attention_mask,
                                     transformer_options=transformer_options, **kwargs)
        to = dict(transformer_options or {})
        config = self.config
        bsz, channels, h, w = x.shape
        p = self.patch_size
        orig_x = x
        x = pad_to_patch_size(x, (p, p))
        hp, wp = x.shape[-2] // p, x.shape[-1] // p
        vec = self.modulation_input(timesteps, x, kwargs)  # [B, adaln_dim]

        cap = self._pad(self.cap_embedder(context), getattr(self, "cap_pad_token", None))  # [B, Lc, dim]
        cap_len = cap.shape[1]
        cap_ids = torch.zeros((bsz, cap_len, 3), dtype=torch.float32, device=x.device)
        cap_ids[:, :, 0] = torch.arange(cap_len, dtype=torch.float32, device=x.device) + 1.0
        cap_freqs = rope(cap_ids, config.axes_dims, config.rope_theta)

        tokens = x.view(bsz, channels, hp, p, wp, p).permute(0, 2, 4, 3, 5, 1).flatten(3).flatten(1, 2)  # [B, N, p*p*C]
        img = self.x_embedder(tokens)
        img_len = img.shape[1]
        img_ids = self._image_ids(cap_len + 1, hp, wp, bsz, x.device, to)
        img = self._pad(img, getattr(self, "x_pad_token", None))
        img_ids = F.pad(img_ids, (0, 0, 0, img.shape[1] - img_len))  # pad tokens at position (0, 0, 0)
        img_freqs = rope(img_ids, config.axes_dims, config.rope_theta)

        seq = self.joint_blocks(cap, cap_freqs, img, img_freqs, vec, orig_x, to)  # [B, Lc + Ni, dim]
        out = self.final_layer(seq, vec)[:, cap_len:cap_len + hp * wp]  # [B, hp*wp, p*p*C]
        out = out.reshape(bsz, hp, wp, p, p, self.out_channels).permute(0, 5, 1, 3, 2, 4).reshape(
            bsz, self.out_channels, hp * p, wp * p)
        return -out[:, :, :h, :w]

    # -- Z-Image Omni ---------------------------------------------------------------------------------

    def _omni_caption(self, context: torch.Tensor | None, offset: int, dtype: torch.dtype,
                      device: torch.device) -> tuple[torch.Tensor, torch.Tensor, int]:
        """A caption segment: tokens `[b, Lp, dim]` (filled with `cap_pad_token`; without text,
        `pad_tokens_multiple` pad tokens), position ids `[1, Lp, 3]` `(offset + 1 + i, 0, 0)`, and
        the unpadded length (0 without text)."""
        pad_token = getattr(self, "cap_pad_token", None)
        if context is not None:
            tokens = self.cap_embedder(context.to(device=device, dtype=dtype))
            length = tokens.shape[1]
            tokens = self._pad(tokens, pad_token)
        else:
            if pad_token is None:
                raise ValueError("NextDiT: a reference latent without its text embeds needs the file's cap_pad_token")
            tokens = pad_token.to(device=device, dtype=dtype).unsqueeze(0).expand(1, self.pad_tokens_multiple, -1)
            length = 0
        ids = torch.zeros((1, tokens.shape[1], 3), dtype=torch.float32, device=device)
        ids[:, :, 0] = torch.arange(tokens.shape[1], dtype=torch.float32, device=device) + 1.0 + offset
        return tokens, ids, length

    def _omni_siglip(self, feats: torch.Tensor | None, position: int, dtype: torch.dtype,
                     device: torch.device) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """A SigLIP segment: `feats` `[b, h, w, C]` embedded (`siglip_embedder`) at ids
        `(position, floor(linspace(0, 8h - 1, h)), floor(linspace(0, 8w - 1, w)))`, filled with
        `siglip_pad_token` (ids (0, 0, 0)); without features, `pad_tokens_multiple` pad tokens at
        (0, 0, 0). As ComfyUI, the grid is read channel-first (`permute(0, 3, 1, 2)`) and reshaped
        to `h*w` rows of `C` values (not a transpose: ComfyUI's `embed_all` does exactly this)."""
        pad_token = self.siglip_pad_token
        if feats is None:
            if self.pad_tokens_multiple is None:
                return None, None
            tokens = pad_token.to(device=device, dtype=dtype).unsqueeze(0).expand(1, self.pad_tokens_multiple, -1)
            return tokens, torch.zeros((1, tokens.shape[1], 3), dtype=torch.float32, device=device)
        if feats.ndim != 4 or feats.shape[-1] != self.config.siglip_feat_dim:
            raise ValueError(f"NextDiT: SigLIP features must be [B, h, w, {self.config.siglip_feat_dim}], got "
                             f"{list(feats.shape)}")
        b, h, w, c = feats.shape
        flat = feats.to(device=device, dtype=dtype).permute(0, 3, 1, 2).reshape(b, h * w, c)
        tokens = self.siglip_embedder(flat)
        ids = torch.zeros((1, h * w, 3), dtype=torch.float32, device=device)
        ids[:, :, 0] = position
        rows = torch.linspace(0, h * 8 - 1, steps=h, dtype=torch.float32, device=device).floor()
        cols = torch.linspace(0, w * 8 - 1, steps=w, dtype=torch.float32, device=device).floor()
        ids[:, :, 1] = rows.view(-1, 1).expand(h, w).flatten()
        ids[:, :, 2] = cols.view(1, -1).expand(h, w).flatten()
        n = tokens.shape[1]
        tokens = self._pad(tokens, pad_token)
        return tokens, F.pad(ids, (0, 0, 0, tokens.shape[1] - n))

    def _omni_image(self, latent: torch.Tensor, start: int, dtype: torch.dtype, device: torch.device,
                    to: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor, int]:
        """An image segment: `latent` `[b, C, H, W]` in 2x2 patches (`x_embedder`) at ids
        `(start, row, col)`, filled with `x_pad_token` (ids (0, 0, 0)); and its patch count."""
        if latent.ndim == 5 and latent.shape[2] == 1:
            latent = latent[:, :, 0]
        if latent.ndim != 4 or latent.shape[1] != self.in_channels:
            raise ValueError(f"NextDiT: a reference latent must be [B, {self.in_channels}, H, W], got "
                             f"{list(latent.shape)}")
        p = self.patch_size
        latent = pad_to_patch_size(latent.to(device=device, dtype=dtype), (p, p))
        b, c, height, width = latent.shape
        hp, wp = height // p, width // p
        tokens = self.x_embedder(latent.view(b, c, hp, p, wp, p).permute(0, 2, 4, 3, 5, 1).flatten(3).flatten(1, 2))
        n = tokens.shape[1]
        ids = self._image_ids(start, hp, wp, 1, device, to)
        tokens = self._pad(tokens, getattr(self, "x_pad_token", None))
        return tokens, F.pad(ids, (0, 0, 0, tokens.shape[1] - n)), n

    def omni_layout(self, x: torch.Tensor, context: torch.Tensor, ref_latents: Sequence[torch.Tensor],
                    ref_contexts: Sequence[torch.Tensor | None] = (), siglip_feats: Sequence[torch.Tensor | None] = (),
                    transformer_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Z-Image Omni's token layout (ComfyUI's `patchify_and_embed` with reference latents),
        before any block: `{"cap": [caption tokens], "cap_ids": [...], "siglip": [...],
        "siglip_ids": [...], "img": [...], "img_ids": [...], "main_cap_len", "main_img_len"}`
        (lists of segments; tokens `[B, L, dim]`, ids `[1, L, 3]`).

        One segment per reference `i`, then the target `x` with `context`: a caption (reference
        `i`'s text embeds `ref_contexts[i]`; pad tokens without), with a SigLIP file its SigLIP
        tokens (`siglip_feats[i]`; pad tokens without; the target has none), then the latent's
        patches. With an offset `o` (0, then the previous segment's `end + 2`): caption ids start
        at `o + 1`; `end` = `o` + the unpadded caption length with a SigLIP file (the padded
        length without); SigLIP ids at `end + 2`, the image's at `end + 1`. Text embeds beyond
        the references' count are captions appended after the target's (ids from its `end + 2`,
        each adding its unpadded length)."""
        to = transformer_options or {}
        bsz, dtype, device = x.shape[0], x.dtype, x.device
        with_siglip = getattr(self, "siglip_embedder", None) is not None
        contexts, feats = list(ref_contexts or ()), list(siglip_feats or ())
        out: dict[str, Any] = {key: [] for key in ("cap", "cap_ids", "siglip", "siglip_ids", "img", "img_ids")}

        def segment(latent: torch.Tensor, text: torch.Tensor | None, sig: torch.Tensor | None,
                    offset: int) -> tuple[int, int, int]:
            tokens, ids, length = self._omni_caption(text, offset, dtype, device)
            out["cap"].append(_to_batch(tokens, bsz))
            out["cap_ids"].append(ids)
            if with_siglip:
                end = offset + length
                sig_tokens, sig_ids = self._omni_siglip(sig, end + 2, dtype, device)
                if sig_tokens is not None:
                    out["siglip"].append(_to_batch(sig_tokens, bsz))
                    out["siglip_ids"].append(sig_ids)
            else:
                end = offset + tokens.shape[1]
            img, img_ids, _ = self._omni_image(latent, end + 1, dtype, device, to)
            out["img"].append(_to_batch(img, bsz))
            out["img_ids"].append(img_ids)
            return end + 2, tokens.shape[1], img.shape[1]

        offset = 0
        for i, latent in enumerate(ref_latents):
            offset, _, _ = segment(latent, contexts[i] if i < len(contexts) else None,
                                   feats[i] if i < len(feats) else None, offset)
        offset, main_cap_len, main_img_len = segment(x, context, None, offset)
        for text in contexts[len(ref_latents):]:
            tokens, ids, length = self._omni_caption(text, offset, dtype, device)
            out["cap"].append(_to_batch(tokens, bsz))
            out["cap_ids"].append(ids)
            main_cap_len += tokens.shape[1]
            offset += length
        out["main_cap_len"], out["main_img_len"] = main_cap_len, main_img_len
        return out

    def forward_omni(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor, num_tokens: Any = None,
                     attention_mask: torch.Tensor | None = None, transformer_options: Mapping[str, Any] | None = None,
                     ref_latents: Sequence[torch.Tensor] = (), ref_contexts: Sequence[torch.Tensor | None] = (),
                     siglip_feats: Sequence[torch.Tensor | None] = (), **kwargs: Any) -> torch.Tensor:
        """Z-Image Omni's forward (ComfyUI's `NextDiT._forward` with `ref_latents`): the tokens of
        `omni_layout`; captions through `context_refiner`, SigLIP tokens through `siglip_refiner`,
        every image through `noise_refiner`, then `[captions, SigLIP, images]` through `layers` and
        the final layer. The target's image tokens (pads included) and, in `layers` and the final
        layer, the target's caption and the appended captions are modulated by the timestep; every
        other token (the references') by the clean timestep (sigma 0). Patches as `forward`
        (`noise_refiner`'s "img" holds every image; `double_block`'s "txt" everything before the
        target's image)."""
        to = dict(transformer_options or {})
        patches = to.get("patches", {}) or {}
        config = self.config
        bsz, _, h, w = x.shape
        p = self.patch_size
        orig_x = x
        x = pad_to_patch_size(x, (p, p))
        hp, wp = x.shape[-2] // p, x.shape[-1] // p
        vec = self.modulation_input(timesteps, x, kwargs)  # [B, adaln_dim]
        vec_zero = self.modulation_input(torch.zeros_like(timesteps), x, kwargs)  # the clean references'
        layout = self.omni_layout(x, context, ref_latents, ref_contexts, siglip_feats, to)
        main_cap_len, main_img_len = layout["main_cap_len"], layout["main_img_len"]

        cap = torch.cat(layout["cap"], dim=1)
        cap_freqs = rope(torch.cat(layout["cap_ids"], dim=1), config.axes_dims, config.rope_theta)
        for block in self.context_refiner:
            cap = block(cap, cap_freqs, transformer_options=to)
        parts, freqs_parts = [cap], [cap_freqs]
        if layout["siglip"]:
            sig = torch.cat(layout["siglip"], dim=1)
            sig_freqs = rope(torch.cat(layout["siglip_ids"], dim=1), config.axes_dims, config.rope_theta)
            for block in self.siglip_refiner:
                sig = block(sig, sig_freqs, transformer_options=to)
            parts.append(sig)
            freqs_parts.append(sig_freqs)

        img = torch.cat(layout["img"], dim=1)
        img_freqs = rope(torch.cat(layout["img_ids"], dim=1), config.axes_dims, config.rope_theta)
        n_img = img.shape[1]
        real = token_spans(n_img, [(n_img - main_img_len, n_img)], x.device)
        img_input = img
        for i, block in enumerate(self.noise_refiner):
            img = block(img, img_freqs, vec, transformer_options=to, vec_zero=vec_zero, real_tokens=real)
            for patch in patches.get("noise_refiner", ()):
                out = patch({"img": img, "img_input": img_input, "txt": cap, "pe": img_freqs, "vec": vec, "x": orig_x,
                             "block_index": i, "transformer_options": to, "block_type": "noise_refiner"})
                if "img" in out:
                    img = out["img"]

        seq = torch.cat(parts + [img], dim=1)
        freqs = torch.cat(freqs_parts + [img_freqs], dim=1)
        total, n_cap = seq.shape[1], cap.shape[1]
        real = token_spans(total, [(total - main_img_len, total), (n_cap - main_cap_len, n_cap)], x.device)
        cap_size = total - main_img_len
        seq_input = seq
        to["total_blocks"] = len(self.layers)
        to["block_type"] = "double"
        for i, block in enumerate(self.layers):
            to["block_index"] = i
            seq = block(seq, freqs, vec, transformer_options=to, vec_zero=vec_zero, real_tokens=real)
            for patch in patches.get("double_block", ()):
                out = patch({"img": seq[:, cap_size:], "img_input": seq_input[:, cap_size:], "txt": seq[:, :cap_size],
                             "pe": freqs[:, cap_size:], "vec": vec, "x": orig_x, "block_index": i,
                             "transformer_options": to})
                if "img" in out or "txt" in out:
                    seq = torch.cat([out.get("txt", seq[:, :cap_size]), out.get("img", seq[:, cap_size:])], dim=1)

        out = self.final_layer(seq, vec, vec_zero=vec_zero, real_tokens=real)[:, cap_size:cap_size + hp * wp]
        out = out.reshape(bsz, hp, wp, p, p, self.out_channels).permute(0, 5, 1, 3, 2, 4).reshape(
            bsz, self.out_channels, hp * p, wp * p)
        return -out[:, :, :h, :w]


def token_spans(length: int, spans: Sequence[tuple[int, int]], device: Any = None) -> torch.Tensor:
    """Bool `[1, length, 1]`: True inside the `(start, end)` spans (Z-Image Omni's timestep-modulated
    tokens, ComfyUI's `timestep_zero_index` slices)."""
    mask = torch.zeros((1, length, 1), dtype=torch.bool, device=device)
    for start, end in spans:
        mask[:, start:end] = True
    return mask


def _to_batch(tensor: torch.Tensor, batch: int) -> torch.Tensor:
    """`tensor` cut or tiled along dim 0 to `batch` rows (ComfyUI's `repeat_to_batch_size`)."""
    if tensor.shape[0] == batch:
        return tensor
    if tensor.shape[0] > batch:
        return tensor[:batch]
    reps = -(-batch // tensor.shape[0])
    return tensor.repeat(reps, *([1] * (tensor.ndim - 1)))[:batch]

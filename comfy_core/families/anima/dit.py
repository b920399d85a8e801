"""Anima's diffusion transformer: NVIDIA's Cosmos-Predict2 `MiniTrainDIT` (Cosmos team 2025,
"Cosmos World Foundation Model Platform"; nvidia-cosmos/cosmos-predict2's `minimal_v4_dit`) with
Anima's LLM adapter (`adapter.py`) in front of its cross-attention, as ComfyUI runs it
(`comfy/ldm/cosmos/predict2.py`, `comfy/ldm/anima/model.py`); written here from those files.

The network (names are ComfyUI's, which are the original release's without its `net.` prefix):

- input `[B, C, T, H, W]` (or `[B, C, H, W]`, one frame), padded to whole patches, one zero
  padding-mask channel appended, cut into `1 x 2 x 2` patches, `x_embedder.proj.1` (no bias) to the
  width D;
- time: the sinusoidal embedding of the timestep (sigma: multiplier 1) in D channels, `cos` half
  first, frequencies `exp(-ln(10000) i / (D/2))` (`t_embedder.0`); AdaLN-LoRA (`t_embedder.1`:
  linear, SiLU, linear to 3D, no biases) gives the shared low-rank term `L [B, T, 3D]`; the
  modulation input is the sinusoid itself through `t_embedding_norm` (RMSNorm);
- positions: 3-D RoPE over (t, h, w) split per head as `dim_t = d - 2 dim_h`, `dim_h = dim_w =
  (d // 6) * 2`; an axis of `n` channels rotates at `1 / theta^(2i/n)` with `theta = 10000 *
  r^(n / (n - 2))` for its NTK extrapolation ratio `r` (ComfyUI's detection: 4, 4, 1 for h, w, t on
  16 input channels; 3, 3, 1 or 2, 2, 5/6 on 17); rotate-half pairs (first half with second half),
  on the self-attention's queries and keys after their RMS norms, never on the cross-attention;
- each block: for self-attention, cross-attention and MLP in turn, `shift, scale, gate =
  adaln_modulation_*(e) + L` (SiLU, linear to the LoRA width, linear to 3D), `x += gate *
  f(LN(x) * (1 + scale) + shift)` with an affine-free LayerNorm (eps 1e-6); attention q/k/v and
  output projections without biases, RMSNorm on q and k per head (eps 1e-6); MLP `layer2(GELU(
  layer1))`; an fp16 run keeps the residual stream in float32 (ComfyUI's rule: its values are large);
- `final_layer`: `LN(x) * (1 + scale) + shift` with `(shift, scale) = adaln_modulation(e) + L[:2D]`,
  a linear to `p*p*out`, then unpatchified (`(p1 p2 t C)` channel order) and cropped.

Hooks (ComfyUI's, in `transformer_options`): `patches["post_input"]` get `{"img": [B, T, H, W, D],
"x": the input padded to whole patches `[B, C, T, H, W]`, "transformer_options"}` after the patch embedding, with
a fresh `transformer_options["model_patch_data"]` dict for them to leave data in;
`patches["attn1_patch"]` / `["attn2_patch"]` get the inputs of the q/k/v projections of the self- /
cross-attention `(q, k, v, pe=rope, attn_mask=None, extra_options=transformer_options + n_heads,
dim_head)` and return a dict that may replace them; `patches["mlp_patch"]` get `{"x": the MLP's
input, "transformer_options"}`; `transformer_options["block_index"]` is the running block's index.
Anima LLLite (`comfy_core/model_patches/anima_lllite.py`) is applied through these.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.families.anima.adapter import LLMAdapter, LLMAdapterConfig, RMSNorm
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import shape_reader

PATCH_SPATIAL = 2
PATCH_TEMPORAL = 1
ROPE_THETA = 10000.0
MIN_CONTEXT_TOKENS = 512  # ComfyUI's Anima pads the adapter's output to 512 tokens


class AnimaConfigError(ValueError):
    """Weights that are not an Anima (Cosmos-Predict2 + LLM adapter) network, or inconsistent ones."""


class AnimaInputError(ValueError):
    """An input of the wrong shape for this network."""


def rope_ratios(in_channels: int, model_channels: int) -> tuple[float, float, float]:
    """ComfyUI's NTK extrapolation ratios (h, w, t) for a Cosmos-Predict2 network (its
    model_detection: text-to-image/video on 16 input channels 4 / 4 / 1; image-to-video on 17 at
    width 2048 3 / 3 / 1, at 5120 2 / 2 / 5/6; others 1 / 1 / 1)."""
    if in_channels == 16:
        return 4.0, 4.0, 1.0
    if in_channels == 17 and model_channels == 2048:
        return 3.0, 3.0, 1.0
    if in_channels == 17 and model_channels == 5120:
        return 2.0, 2.0, 0.8333333333333334
    return 1.0, 1.0, 1.0


@dataclass(frozen=True)
class AnimaConfig:
    """The structure of an Anima network, read from its names and shapes (`detect_from_weights`);
    the head count is ComfyUI's rule (16, or 40 at width 5120: the weights cannot show it)."""

    in_channels: int
    out_channels: int
    model_channels: int
    num_blocks: int
    num_heads: int
    mlp_hidden: int
    crossattn_emb_channels: int
    adaln_lora_dim: int
    rope_h_extrapolation_ratio: float
    rope_w_extrapolation_ratio: float
    rope_t_extrapolation_ratio: float
    adapter: LLMAdapterConfig

    def __post_init__(self) -> None:
        if self.model_channels % self.num_heads:
            raise AnimaConfigError(f"Anima: width {self.model_channels} does not split into {self.num_heads} heads")
        head = self.model_channels // self.num_heads
        if (head // 6) * 2 < 4 or (head - 2 * ((head // 6) * 2)) < 4 or head % 2:
            raise AnimaConfigError(f"Anima: heads of {head} channels are too narrow for the 3-axis RoPE")

    @property
    def head_dim(self) -> int:
        return self.model_channels // self.num_heads

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` of this model (its model_detection's Cosmos-Predict2 branch)."""
        return {"image_model": "anima", "max_img_h": 240, "max_img_w": 240, "max_frames": 128,
                "in_channels": self.in_channels, "out_channels": self.out_channels, "patch_spatial": PATCH_SPATIAL,
                "patch_temporal": PATCH_TEMPORAL, "model_channels": self.model_channels, "concat_padding_mask": True,
                "crossattn_emb_channels": self.crossattn_emb_channels, "pos_emb_cls": "rope3d",
                "pos_emb_learnable": True, "pos_emb_interpolation": "crop", "min_fps": 1, "max_fps": 30,
                "use_adaln_lora": True, "adaln_lora_dim": self.adaln_lora_dim, "num_blocks": self.num_blocks,
                "num_heads": self.num_heads, "extra_per_block_abs_pos_emb": False,
                "rope_h_extrapolation_ratio": self.rope_h_extrapolation_ratio,
                "rope_w_extrapolation_ratio": self.rope_w_extrapolation_ratio,
                "rope_t_extrapolation_ratio": self.rope_t_extrapolation_ratio,
                "extra_h_extrapolation_ratio": 1.0, "extra_w_extrapolation_ratio": 1.0,
                "extra_t_extrapolation_ratio": 1.0, "rope_enable_fps_modulation": False}

    def facts(self) -> dict[str, Any]:
        facts = asdict(self)
        facts.pop("adapter")
        facts["image_model"] = "anima"
        return facts

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "AnimaConfig":
        """The structure under `prefix` from names and shapes only (never tensor data)."""
        shape = shape_reader(tensors, prefix, AnimaConfigError, "Anima")
        if prefix + "extra_pos_embedder.pos_emb_h" in tensors:
            raise AnimaConfigError("Anima: per-block absolute position embeddings (Cosmos-Predict2's "
                                   "extra_pos_embedder) are not supported")
        width, patch_in = shape("x_embedder.proj.1.weight")
        per_patch = PATCH_SPATIAL * PATCH_SPATIAL * PATCH_TEMPORAL
        if patch_in % per_patch:
            raise AnimaConfigError(f"Anima: x_embedder takes {patch_in} inputs, not whole 1x2x2 patches")
        in_channels = patch_in // per_patch - 1  # less the padding-mask channel
        out_rows, _ = shape("final_layer.linear.weight")
        blocks = 0
        while f"{prefix}blocks.{blocks}.mlp.layer1.weight" in tensors:
            blocks += 1
        if blocks == 0:
            raise AnimaConfigError(f"Anima: no {prefix}blocks.0.mlp.layer1.weight")
        mlp_hidden, _ = shape("blocks.0.mlp.layer1.weight")
        _, context = shape("blocks.0.cross_attn.k_proj.weight")
        lora_dim, _ = shape("blocks.0.adaln_modulation_self_attn.1.weight")
        lora_rows, _ = shape("t_embedder.1.linear_2.weight")
        if lora_rows != 3 * width:
            raise AnimaConfigError(f"Anima: t_embedder.1.linear_2 has {lora_rows} rows; AdaLN-LoRA needs {3 * width}")
        heads = 40 if width == 5120 else 16
        h, w, t = rope_ratios(in_channels, width)
        adapter = LLMAdapterConfig.detect_from_weights(tensors, prefix + "llm_adapter.", AnimaConfigError)
        if adapter.target_dim != context:
            raise AnimaConfigError(f"Anima: the LLM adapter gives {adapter.target_dim}-wide tokens, the "
                                   f"cross-attention takes {context}")
        return cls(in_channels=in_channels, out_channels=out_rows // per_patch, model_channels=width, num_blocks=blocks,
                   num_heads=heads, mlp_hidden=mlp_hidden, crossattn_emb_channels=context, adaln_lora_dim=lora_dim,
                   rope_h_extrapolation_ratio=h, rope_w_extrapolation_ratio=w, rope_t_extrapolation_ratio=t,
                   adapter=adapter)


def sinusoid(timesteps: torch.Tensor, dim: int) -> torch.Tensor:
    """Cosmos' timestep embedding `[...] -> [..., dim]` float32: `cat(cos, sin)` of `t * f_i`,
    `f_i = exp(-ln(10000) i / (dim/2))`."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / half)
    angles = timesteps.float()[..., None] * freqs
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


def rope_3d(t: int, h: int, w: int, head_dim: int, ratios: tuple[float, float, float],
            device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos / sin `[t*h*w, head_dim/2]` float32 of the 3-axis RoPE (see the module docstring): the
    half-dims are [t channels, h channels, w channels], tokens in (t, h, w) order."""
    dim_h = (head_dim // 6) * 2
    dim_t = head_dim - 2 * dim_h
    h_ratio, w_ratio, t_ratio = ratios

    def freqs(n: int, ratio: float) -> torch.Tensor:
        theta = ROPE_THETA * ratio ** (n / (n - 2))
        return 1.0 / theta ** (torch.arange(0, n, 2, dtype=torch.float32, device=device)[: n // 2] / n)

    ang_t = torch.arange(t, dtype=torch.float32, device=device)[:, None] * freqs(dim_t, t_ratio)  # [t, dim_t/2]
    ang_h = torch.arange(h, dtype=torch.float32, device=device)[:, None] * freqs(dim_h, h_ratio)
    ang_w = torch.arange(w, dtype=torch.float32, device=device)[:, None] * freqs(dim_h, w_ratio)
    angles = torch.cat([ang_t[:, None, None].expand(t, h, w, -1), ang_h[None, :, None].expand(t, h, w, -1),
                        ang_w[None, None, :].expand(t, h, w, -1)], dim=-1).reshape(t * h * w, head_dim // 2)
    return angles.cos(), angles.sin()


def rotate_split_half(x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """x `[B, S, H, d]`: pairs (x_i, x_{i+d/2}) rotated by the angles of `rope` (cos, sin `[S, d/2]`),
    in float32, returned in x's dtype."""
    cos, sin = (r[None, :, None, :] for r in rope)
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


class Attention(nn.Module):
    """Cosmos-Predict2's attention (self- when `context_dim` is None, else cross-)."""

    def __init__(self, dim: int, context_dim: int | None, heads: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.is_selfattn = context_dim is None
        self.n_heads = heads
        self.head_dim = dim // heads
        inner = dim
        context_dim = dim if context_dim is None else context_dim
        self.q_proj = ops.Linear(dim, inner, bias=False, **factory)
        self.q_norm = RMSNorm(self.head_dim, **factory)
        self.k_proj = ops.Linear(context_dim, inner, bias=False, **factory)
        self.k_norm = RMSNorm(self.head_dim, **factory)
        self.v_proj = ops.Linear(context_dim, inner, bias=False, **factory)
        self.v_norm = nn.Identity()  # ComfyUI's (no weights): packs re-implementing compute_qkv call it
        self.output_proj = ops.Linear(inner, dim, bias=False, **factory)

    def compute_qkv(self, x: torch.Tensor, context: torch.Tensor | None = None, rope_emb: Any = None,
                    transformer_options: dict[str, Any] | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x `[B, S, D]`, context `[B, N, C]` (None: x) -> q, k, v `[B, S|N, H, d]`: projected,
        q / k RMS-normed, RoPE (`rope_emb`, cos / sin) on the self-attention's q / k; the
        `attn1_patch` / `attn2_patch` hooks of `transformer_options` run first (ComfyUI's split of
        Cosmos-Predict2's attention into `compute_qkv` and `compute_attention`, which packs patch)."""
        options = {} if transformer_options is None else transformer_options
        context = x if context is None else context
        q_in, k_in, v_in = x, context, context
        rope = rope_emb
        patches = (options.get("patches") or {}).get("attn1_patch" if self.is_selfattn else "attn2_patch")
        if patches:
            extra = dict(options)
            extra["n_heads"] = self.n_heads
            extra["dim_head"] = self.head_dim
            for patch in patches:
                out = patch(q_in, k_in, v_in, pe=rope, attn_mask=None, extra_options=extra)
                q_in, k_in, v_in = out.get("q", q_in), out.get("k", k_in), out.get("v", v_in)
                rope = out.get("pe", rope)
        b, s = q_in.shape[0], q_in.shape[1]
        q = self.q_norm(self.q_proj(q_in).view(b, s, self.n_heads, self.head_dim))  # [B, S, H, d]
        k = self.k_norm(self.k_proj(k_in).view(k_in.shape[0], k_in.shape[1], self.n_heads, self.head_dim))
        v = self.v_norm(self.v_proj(v_in).view(v_in.shape[0], v_in.shape[1], self.n_heads, self.head_dim))
        if self.is_selfattn and rope is not None:
            q, k = rotate_split_half(q, rope), rotate_split_half(k, rope)
        return q, k, v

    def compute_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        """q, k, v `[B, S|N, H, d]` -> the output projection of their attention `[B, S, D]`."""
        out = calling.attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), self.n_heads, skip_reshape=True,
                             transformer_options={} if transformer_options is None else transformer_options)
        return self.output_proj(out)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, rope_emb: Any = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        """x `[B, S, D]`, context `[B, N, C]` (None: x) -> `[B, S, D]`."""
        q, k, v = self.compute_qkv(x, context, rope_emb=rope_emb, transformer_options=transformer_options)
        return self.compute_attention(q, k, v, transformer_options=transformer_options)


class FeedForward(nn.Module):
    """GPT-2's MLP without biases: `layer2(GELU(layer1(x)))`."""

    def __init__(self, dim: int, hidden: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.layer1 = ops.Linear(dim, hidden, bias=False, **factory)
        self.layer2 = ops.Linear(hidden, dim, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer2(F.gelu(self.layer1(x)))


def adaln_lora(dim: int, lora_dim: int, chunks: int, ops: Any, factory: dict[str, Any]) -> nn.Sequential:
    """SiLU, linear to the LoRA width, linear to `chunks * dim` (indices 1 and 2 hold the weights)."""
    return nn.Sequential(nn.SiLU(), ops.Linear(dim, lora_dim, bias=False, **factory),
                         ops.Linear(lora_dim, chunks * dim, bias=False, **factory))


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x `[B, T, H, W, D]`, shift / scale `[B, T, D]`: affine-free LayerNorm, then the AdaLN terms."""
    normed = F.layer_norm(x, (x.shape[-1],), eps=1e-6)
    return normed * (1 + scale[:, :, None, None]) + shift[:, :, None, None]


class Block(nn.Module):
    """One Cosmos-Predict2 block: self-attention, cross-attention, MLP, each AdaLN-modulated."""

    def __init__(self, config: AnimaConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim, lora = config.model_channels, config.adaln_lora_dim
        self.self_attn = Attention(dim, None, config.num_heads, ops, factory)
        self.cross_attn = Attention(dim, config.crossattn_emb_channels, config.num_heads, ops, factory)
        self.mlp = FeedForward(dim, config.mlp_hidden, ops, factory)
        self.adaln_modulation_self_attn = adaln_lora(dim, lora, 3, ops, factory)
        self.adaln_modulation_cross_attn = adaln_lora(dim, lora, 3, ops, factory)
        self.adaln_modulation_mlp = adaln_lora(dim, lora, 3, ops, factory)

    def forward(self, x: torch.Tensor, emb: torch.Tensor, context: torch.Tensor, rope: Any, lora: torch.Tensor,
                transformer_options: dict[str, Any]) -> torch.Tensor:
        """x `[B, T, H, W, D]` (the residual dtype), emb / lora `[B, T, D]` / `[B, T, 3D]` (the compute
        dtype), context `[B, N, C]`."""
        residual, compute = x.dtype, emb.dtype
        b, t, h, w, d = x.shape
        mods = [(m(emb) + lora).chunk(3, dim=-1) for m in (self.adaln_modulation_self_attn,
                                                           self.adaln_modulation_cross_attn,
                                                           self.adaln_modulation_mlp)]
        (s1, c1, g1), (s2, c2, g2), (s3, c3, g3) = mods

        def gated(gate: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
            return gate[:, :, None, None].to(residual) * value.to(residual)

        normed = _modulate(x, s1, c1).to(compute).reshape(b, t * h * w, d)
        x = x + gated(g1, self.self_attn(normed, None, rope, transformer_options).view(b, t, h, w, d))
        normed = _modulate(x, s2, c2).to(compute).reshape(b, t * h * w, d)
        x = x + gated(g2, self.cross_attn(normed, context, rope, transformer_options).view(b, t, h, w, d))
        normed = _modulate(x, s3, c3).to(compute)
        patches = (transformer_options.get("patches") or {}).get("mlp_patch")
        if patches:
            args = {"x": normed, "transformer_options": transformer_options}
            for patch in patches:
                args = patch(args)
            normed = args["x"]
        return x + gated(g3, self.mlp(normed))


class FinalLayer(nn.Module):
    def __init__(self, config: AnimaConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim = config.model_channels
        self.hidden_size = dim
        self.linear = ops.Linear(dim, PATCH_SPATIAL ** 2 * PATCH_TEMPORAL * config.out_channels, bias=False, **factory)
        self.adaln_modulation = adaln_lora(dim, config.adaln_lora_dim, 2, ops, factory)

    def forward(self, x: torch.Tensor, emb: torch.Tensor, lora: torch.Tensor) -> torch.Tensor:
        shift, scale = (self.adaln_modulation(emb) + lora[..., : 2 * self.hidden_size]).chunk(2, dim=-1)
        return self.linear(_modulate(x, shift, scale))


class TimestepEmbedding(nn.Module):
    """AdaLN-LoRA's time branch (`t_embedder.1`): linear, SiLU, linear to 3D, no biases."""

    def __init__(self, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(dim, dim, bias=False, **factory)
        self.linear_2 = ops.Linear(dim, 3 * dim, bias=False, **factory)

    def forward(self, sample: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(sample)))


class _Sinusoid(nn.Module):
    """`t_embedder.0` (no weights)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, timesteps: torch.Tensor) -> torch.Tensor:
        return sinusoid(timesteps, self.dim)


class PatchEmbed(nn.Module):
    """`x_embedder`: `[B, C, T, H, W]` -> `[B, T/1, H/2, W/2, D]` through `proj.1` (channel order
    `(c, r, m, n)` of a patch, as Cosmos' `Rearrange`)."""

    def __init__(self, in_channels: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.proj = nn.Sequential(nn.Identity(), ops.Linear(in_channels * PATCH_SPATIAL ** 2 * PATCH_TEMPORAL, dim,
                                                            bias=False, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = x.shape
        p, pt = PATCH_SPATIAL, PATCH_TEMPORAL
        x = x.reshape(b, c, t // pt, pt, h // p, p, w // p, p).permute(0, 2, 4, 6, 1, 3, 5, 7)
        return self.proj(x.reshape(b, t // pt, h // p, w // p, c * pt * p * p))


@comfyui_name("Anima")
class AnimaDiT(nn.Module):
    """Cosmos-Predict2's MiniTrainDIT with Anima's LLM adapter (see the module docstring)."""

    # DIFFUSION_MODEL wrappers' positional arguments, ComfyUI's `_forward` order (comfy_core/models/diffusion.py)
    wrapper_arguments = ("x", "timesteps", "context", "fps", "padding_mask")  # transformer_options: a keyword

    def __init__(self, config: AnimaConfig, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        dim = config.model_channels
        self.model_channels = dim
        self.in_channels = config.in_channels
        self.out_channels = config.out_channels
        self.patch_spatial, self.patch_temporal = PATCH_SPATIAL, PATCH_TEMPORAL
        self.t_embedder = nn.Sequential(_Sinusoid(dim), TimestepEmbedding(dim, ops, factory))
        self.t_embedding_norm = RMSNorm(dim, **factory)
        self.x_embedder = PatchEmbed(config.in_channels + 1, dim, ops, factory)
        self.blocks = nn.ModuleList(Block(config, ops, factory) for _ in range(config.num_blocks))
        self.final_layer = FinalLayer(config, ops, factory)
        self.llm_adapter = LLMAdapter(config.adapter, ops, factory)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target (`comfy_core.lora.dit_keymap`; the spellings: `keys.lora_key_map`)."""
        from comfy_core.families.anima.keys import lora_key_map

        return lora_key_map(names)

    def preprocess_text_embeds(self, text_embeds: torch.Tensor, text_ids: torch.Tensor | None,
                               t5xxl_weights: torch.Tensor | None = None) -> torch.Tensor:
        """ComfyUI's `Anima.preprocess_text_embeds`: the LLM states `[B, N, C]` read by the adapter
        at the T5 token ids `[B, M]`, times the T5 weights `[B, M, 1]`, zero-padded to 512 tokens;
        without ids, the states as they are."""
        if text_ids is None:
            return text_embeds
        out = self.llm_adapter(text_embeds, text_ids)
        if t5xxl_weights is not None:
            out = out * t5xxl_weights.to(out)
        if out.shape[1] < MIN_CONTEXT_TOKENS:
            out = F.pad(out, (0, 0, 0, MIN_CONTEXT_TOKENS - out.shape[1]))
        return out

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor, fps: Any = None,
                padding_mask: Any = None, transformer_options: Mapping[str, Any] | None = None,
                **kwargs: Any) -> torch.Tensor:
        """x `[B, C, T, H, W]` or `[B, C, H, W]`, timesteps (sigma) `[B]`, context `[B, N, C]` (the
        adapter's output; or the LLM states with `t5xxl_ids` / `t5xxl_weights` among the kwargs) ->
        the velocity in x's shape (the DIFFUSION_MODEL wrappers run around this call:
        `DiffusionModel`)."""
        ids = kwargs.pop("t5xxl_ids", None)
        if ids is not None:
            context = self.preprocess_text_embeds(context, ids, kwargs.pop("t5xxl_weights", None))
        options = dict(transformer_options or {})
        for key in ("y", "control", "attention_mask", "num_tokens"):
            kwargs.pop(key, None)
        return self._forward(x, timesteps, context, options)

    def _forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
                 transformer_options: dict[str, Any]) -> torch.Tensor:
        if x.ndim not in (4, 5):
            raise AnimaInputError(f"Anima: the latent must be [B, C, H, W] or [B, C, T, H, W], got {tuple(x.shape)}")
        flat = x.ndim == 4
        x5 = x[:, :, None] if flat else x
        if x5.shape[1] != self.in_channels:
            raise AnimaInputError(f"Anima: the latent has {x5.shape[1]} channels, the network takes {self.in_channels}")
        if context.ndim != 3 or context.shape[-1] != self.config.crossattn_emb_channels:
            raise AnimaInputError(f"Anima: context must be [B, tokens, {self.config.crossattn_emb_channels}], got "
                                  f"{tuple(context.shape)}")
        b, _, t0, h0, w0 = x5.shape
        p, pt = PATCH_SPATIAL, PATCH_TEMPORAL
        pad = (0, (-w0) % p, 0, (-h0) % p, 0, (-t0) % pt)
        x5 = F.pad(x5, pad, mode="circular") if any(pad) else x5  # ComfyUI's pad_to_patch_size
        mask = torch.zeros(b, 1, *x5.shape[2:], dtype=x5.dtype, device=x5.device)
        img = self.x_embedder(torch.cat([x5, mask], dim=1))  # [B, T, H, W, D]: the padding-mask channel appended
        _, t, h, w, _ = img.shape
        steps = timesteps.reshape(b, -1) if timesteps.ndim > 1 else timesteps.reshape(b, 1)  # [B, T']
        sin = self.t_embedder[0](steps).to(img.dtype)  # [B, T', D]
        lora = self.t_embedder[1](sin)  # [B, T', 3D]
        emb = self.t_embedding_norm(sin)
        options = transformer_options
        patches = options.get("patches") or {}
        if patches.get("post_input"):
            options["model_patch_data"] = {}
            for patch in patches["post_input"]:
                img = patch({"img": img, "x": x5, "transformer_options": options})["img"]
        rope = rope_3d(t, h, w, self.config.head_dim, (self.config.rope_h_extrapolation_ratio,
                                                       self.config.rope_w_extrapolation_ratio,
                                                       self.config.rope_t_extrapolation_ratio), img.device)
        if img.dtype == torch.float16:  # ComfyUI: the residual stream in float32, the modules in fp16
            img = img.float()
        context = context.to(emb.dtype)
        for index, block in enumerate(self.blocks):
            options["block_index"] = index
            img = block(img, emb, context, rope, lora, options)
        out = self.final_layer(img.to(emb.dtype), emb, lora)  # [B, T, H, W, p*p*pt*C]
        c = self.out_channels
        out = out.reshape(b, t, h, w, p, p, pt, c).permute(0, 7, 1, 6, 2, 4, 3, 5)
        out = out.reshape(b, c, t * pt, h * p, w * p)[:, :, :t0, :h0, :w0]
        return out[:, :, 0] if flat else out


__all__ = ["AnimaConfig", "AnimaConfigError", "AnimaDiT", "AnimaInputError", "MIN_CONTEXT_TOKENS", "rope_3d",
           "rope_ratios", "sinusoid"]

"""OmniGen2's diffusion transformer and `OmniGen2Config` read from weights.

Architecture of VectorSpaceLab's OmniGen2 (Wu et al. 2025, "OmniGen2: Exploration to Advanced
Multimodal Generation", github.com/VectorSpaceLab/OmniGen2 `transformer_omnigen2.py`), a Lumina-2
style single-stream DiT with a second image stream for reference images:

- the text states are embedded (`time_caption_embed.caption_embedder`: RMSNorm + linear) and
  refined by `context_refiner` blocks without modulation;
- the noisy latent's 2x2 patches (`x_embedder`) are refined by `noise_refiner` blocks; the
  reference latents' patches (`ref_image_patch_embedder`, plus `image_index_embedding[j]` for
  reference j) by `ref_image_refiner` blocks, both modulated by the timestep embedding;
- the sequence `[text, references, image]` goes through `layers` (joint self-attention with
  separate `to_q` / `to_k` / `to_v`, per-head RMS-normed q and k, grouped key/value heads, 3-axis
  RoPE; a SwiGLU feed-forward `linear_2(silu(linear_1 x) * linear_3 x)`; RMS norms before and
  after each branch; with modulation `norm1.linear(silu(t))` gives scale / gate for both branches,
  gates through tanh) and `norm_out` (LayerNorm without affine scaled by `1 + linear_1(silu(t))`,
  then `linear_2`);
- the timestep embedding is the sinusoid of `(1 - sigma) * timestep_scale` (cos half first)
  through `time_caption_embed.timestep_embedder.linear_1/2` (SiLU between), `min(width, 1024)` wide.

Positions (ComfyUI's `OmniGen2RotaryPosEmbed`, RoPE base 10000 over (index, row, col)): text token
i sits at (i, i, i); reference j at (s_j, row, col) where s_0 is the text length and each
reference adds max(its rows, its columns) of patches; the image at (s, row, col) with s after the
last reference. The refiners see their own part's rotations (text rotations of positions past
`num_tokens` are zero), the main layers the whole sequence's.

The state-dict names, constructor facts and forward arguments are those of ComfyUI's
`comfy/ldm/omnigen/omnigen2.py` (`OmniGen2Transformer2DModel`, `forward(x, timesteps, context,
num_tokens, ref_latents=None, attention_mask=None, **kwargs)`, which are diffusers-style names),
written here; it returns the negated prediction (its training target runs from noise to image).
A text attention mask that masks tokens cannot be honoured by the main layers' positions (ComfyUI
fails there with a shape error): it is refused with `OmniGen2InputError`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.attention.rope import rope_frequencies, rotate_pairs
from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.families.zimage.nextdit import RMSNorm
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

FREQUENCY_DIM = 256  # the sinusoidal timestep embedding's width
ROPE_THETA = 10000.0
TIMESTEP_SCALE = 1000.0  # ComfyUI's model_detection for OmniGen2
AXES_LENS = (1024, 1664, 1664)  # ComfyUI's model_detection (not used by the forward pass)
NORM_EPS = 1e-5
MULTIPLE_OF = 256


class OmniGen2ConfigError(ValueError):
    """The OmniGen2 weights are incomplete or inconsistent, or the parameters are impossible."""


class OmniGen2InputError(ValueError):
    """Inputs the OmniGen2 network cannot take (too many references, a masked text, bad shapes)."""


@dataclass(frozen=True)
class OmniGen2Config:
    """The network's structure (the released OmniGen2's defaults: 2520 wide, 21 query heads of 120
    sharing 7 key/value heads, 32 layers, 2 refiner blocks per stream, 2048-wide text states).
    `ffn_hidden`: the SwiGLU width (ComfyUI rounds `4 * width` up to a multiple of 256);
    `t_hidden`: the timestep MLP's width (`min(width, 1024)`); `index_embeddings`: how many
    reference images the index table holds."""

    patch_size: int = 2
    in_channels: int = 16
    out_channels: int = 16
    hidden_size: int = 2520
    num_layers: int = 32
    num_refiner_layers: int = 2
    num_attention_heads: int = 21
    num_kv_heads: int = 7
    ffn_hidden: int = 10240
    norm_eps: float = NORM_EPS
    text_feat_dim: int = 2048
    t_hidden: int = 1024
    index_embeddings: int = 5
    axes_dim_rope: tuple[int, ...] = (40, 40, 40)
    axes_lens: tuple[int, ...] = AXES_LENS
    rope_theta: float = ROPE_THETA
    timestep_scale: float = TIMESTEP_SCALE

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes_dim_rope", tuple(int(a) for a in self.axes_dim_rope))
        object.__setattr__(self, "axes_lens", tuple(int(a) for a in self.axes_lens))
        if self.num_attention_heads <= 0 or self.hidden_size % self.num_attention_heads:
            raise OmniGen2ConfigError(f"OmniGen2: width {self.hidden_size} is not a multiple of "
                                      f"{self.num_attention_heads} heads")
        if self.num_kv_heads <= 0 or self.num_attention_heads % self.num_kv_heads:
            raise OmniGen2ConfigError(f"OmniGen2: {self.num_attention_heads} query heads cannot share "
                                      f"{self.num_kv_heads} key/value heads")
        if sum(self.axes_dim_rope) != self.head_dim or any(a % 2 for a in self.axes_dim_rope):
            raise OmniGen2ConfigError(f"OmniGen2: RoPE axes {list(self.axes_dim_rope)} must be even and sum to the "
                                      f"head width {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def latent_channels(self) -> int:
        return self.in_channels

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` of this model (`model_detection`'s "omnigen2" entry)."""
        return {"image_model": "omnigen2", "axes_dim_rope": list(self.axes_dim_rope),
                "axes_lens": list(self.axes_lens), "ffn_dim_multiplier": None, "hidden_size": self.hidden_size,
                "in_channels": self.in_channels, "multiple_of": MULTIPLE_OF, "norm_eps": self.norm_eps,
                "num_attention_heads": self.num_attention_heads, "num_kv_heads": self.num_kv_heads,
                "num_layers": self.num_layers, "num_refiner_layers": self.num_refiner_layers,
                "out_channels": None if self.out_channels == self.in_channels else self.out_channels,
                "patch_size": self.patch_size, "text_feat_dim": self.text_feat_dim,
                "timestep_scale": self.timestep_scale}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "OmniGen2Config":
        """The structure from names and shapes under `prefix` (ComfyUI's layout). What the weights
        cannot show is OmniGen2's: 2x2 patches, RoPE base 10000 over head thirds, timestep scale 1000."""
        shape = shape_reader(tensors, prefix, OmniGen2ConfigError, "OmniGen2")
        hidden, x_in = shape("x_embedder.weight")
        if shape("ref_image_patch_embedder.weight") != (hidden, x_in):
            raise OmniGen2ConfigError(f"OmniGen2: ref_image_patch_embedder.weight has shape "
                                      f"{shape('ref_image_patch_embedder.weight')}, expected {(hidden, x_in)}")
        patch = 2
        if x_in % (patch * patch):
            raise OmniGen2ConfigError(f"OmniGen2: x_embedder's {x_in} inputs are not 2x2 patches")
        caption_out, text_feat_dim = shape("time_caption_embed.caption_embedder.1.weight")
        t_hidden, frequency = shape("time_caption_embed.timestep_embedder.linear_1.weight")
        if caption_out != hidden or frequency != FREQUENCY_DIM:
            raise OmniGen2ConfigError(f"OmniGen2: caption embedder gives {caption_out} (width {hidden}) or the "
                                      f"timestep embedder takes {frequency} (expected {FREQUENCY_DIM})")
        head_dim = shape("layers.0.attn.norm_q.weight")[0]
        q_rows = shape("layers.0.attn.to_q.weight")[0]
        k_rows = shape("layers.0.attn.to_k.weight")[0]
        if head_dim <= 0 or q_rows != hidden or hidden % head_dim or k_rows % head_dim:
            raise OmniGen2ConfigError(f"OmniGen2: to_q / to_k give {q_rows} / {k_rows} rows for a width of {hidden} "
                                      f"and heads of {head_dim}")
        if head_dim % 6:
            raise OmniGen2ConfigError(f"OmniGen2: a head of {head_dim} channels cannot be split in three even "
                                      "RoPE axes")
        out_rows = shape("norm_out.linear_2.weight")[0]
        if out_rows % (patch * patch):
            raise OmniGen2ConfigError(f"OmniGen2: norm_out.linear_2 gives {out_rows} outputs, not 2x2 patches")
        index_rows, index_width = shape("image_index_embedding")
        if index_width != hidden:
            raise OmniGen2ConfigError(f"OmniGen2: image_index_embedding is {index_width} wide, not {hidden}")
        refiners = {group: count_numbered(tensors, prefix, group, OmniGen2ConfigError, "OmniGen2")
                    for group in ("noise_refiner", "ref_image_refiner", "context_refiner")}
        if len(set(refiners.values())) != 1:
            raise OmniGen2ConfigError(f"OmniGen2: refiner depths differ: {refiners}")
        layers = count_numbered(tensors, prefix, "layers", OmniGen2ConfigError, "OmniGen2")
        third = head_dim // 3
        return cls(patch_size=patch, in_channels=x_in // (patch * patch), out_channels=out_rows // (patch * patch),
                   hidden_size=hidden, num_layers=layers, num_refiner_layers=refiners["noise_refiner"],
                   num_attention_heads=hidden // head_dim, num_kv_heads=k_rows // head_dim,
                   ffn_hidden=shape("layers.0.feed_forward.linear_1.weight")[0], text_feat_dim=text_feat_dim,
                   t_hidden=t_hidden, index_embeddings=index_rows, axes_dim_rope=(third, third, third))


def timestep_sinusoid(t: torch.Tensor, scale: float, dim: int = FREQUENCY_DIM) -> torch.Tensor:
    """`[B] -> [B, dim]` float32: cos then sin of `scale * (t * f_i)`, `f_i = 10000^(-i/(dim/2))`
    (diffusers' `get_timestep_embedding` with `flip_sin_to_cos`, no frequency shift; the scale
    applied after the product, as there)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = scale * (t[:, None].float() * freqs[None])  # [B, half]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class Attention(nn.Module):
    """Self-attention: `to_q` / `to_k` / `to_v` (no biases), per-head RMS norms `norm_q` / `norm_k`
    (eps 1e-5), RoPE on q and k, grouped key/value heads, `to_out.0`."""

    def __init__(self, config: OmniGen2Config, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        dim, d = config.hidden_size, config.head_dim
        self.heads, self.kv_heads, self.head_dim = config.num_attention_heads, config.num_kv_heads, d
        self.to_q = ops.Linear(dim, self.heads * d, bias=False, **factory)
        self.to_k = ops.Linear(dim, self.kv_heads * d, bias=False, **factory)
        self.to_v = ops.Linear(dim, self.kv_heads * d, bias=False, **factory)
        self.norm_q = RMSNorm(d, 1e-5, **factory)
        self.norm_k = RMSNorm(d, 1e-5, **factory)
        self.to_out = nn.ModuleList([ops.Linear(self.heads * d, dim, bias=False, **factory)])

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, transformer_options: Mapping[str, Any]) -> torch.Tensor:
        """x `[B, L, dim]`, freqs `[B, L, 1, D/2, 2, 2]` -> `[B, L, dim]`."""
        b, n, _ = x.shape
        d = self.head_dim
        q = self.norm_q(self.to_q(x).view(b, n, self.heads, d))  # [B, L, H, D]
        k = self.norm_k(self.to_k(x).view(b, n, self.kv_heads, d))
        v = self.to_v(x).view(b, n, self.kv_heads, d)
        q = rotate_pairs(q, freqs, q.dtype, fused=False)  # ComfyUI's omnigen2 `apply_rotary_emb`: product, then sum
        k = rotate_pairs(k, freqs, k.dtype, fused=False)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, L, D]
        if self.kv_heads < self.heads:
            rep = self.heads // self.kv_heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        out = calling.attend(q, k, v, self.heads, skip_reshape=True, transformer_options=transformer_options)
        return self.to_out[0](out)  # [B, L, H*D] -> [B, L, dim]


class FeedForward(nn.Module):
    """SwiGLU (Shazeer 2020): `linear_2(silu(linear_1 x) * linear_3 x)`, no biases."""

    def __init__(self, dim: int, hidden: int, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(dim, hidden, bias=False, **factory)
        self.linear_2 = ops.Linear(hidden, dim, bias=False, **factory)
        self.linear_3 = ops.Linear(dim, hidden, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)) * self.linear_3(x))


class ModulatedNorm(nn.Module):
    """Lumina's RMS norm with zero-initialised modulation: `linear(silu(t))` gives the attention
    scale and gate and the feed-forward scale and gate; returns `norm(x) * (1 + scale_msa)` and
    the other three `[B, dim]`."""

    def __init__(self, dim: int, t_hidden: int, eps: float, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.linear = ops.Linear(t_hidden, 4 * dim, bias=True, **factory)
        self.norm = RMSNorm(dim, eps, **factory)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        scale_msa, gate_msa, scale_mlp, gate_mlp = self.linear(F.silu(temb)).chunk(4, dim=1)
        return self.norm(x) * (1 + scale_msa[:, None]), gate_msa, scale_mlp, gate_mlp


class TransformerBlock(nn.Module):
    """One block: attention and feed-forward, each between two RMS norms; modulated blocks scale
    the first norms and gate both branches with `tanh` (`ModulatedNorm`)."""

    def __init__(self, config: OmniGen2Config, modulation: bool, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        dim, eps = config.hidden_size, config.norm_eps
        self.modulation = modulation
        self.attn = Attention(config, factory, ops)
        self.feed_forward = FeedForward(dim, config.ffn_hidden, factory, ops)
        self.norm1 = (ModulatedNorm(dim, config.t_hidden, eps, factory, ops) if modulation
                      else RMSNorm(dim, eps, **factory))
        self.norm2 = RMSNorm(dim, eps, **factory)
        self.ffn_norm1 = RMSNorm(dim, eps, **factory)
        self.ffn_norm2 = RMSNorm(dim, eps, **factory)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, temb: torch.Tensor | None = None,
                transformer_options: Mapping[str, Any] | None = None) -> torch.Tensor:
        options = transformer_options if transformer_options is not None else {}
        if not self.modulation:
            x = x + self.norm2(self.attn(self.norm1(x), freqs, options))
            return x + self.ffn_norm2(self.feed_forward(self.ffn_norm1(x)))
        normed, gate_msa, scale_mlp, gate_mlp = self.norm1(x, temb)
        x = x + gate_msa[:, None].tanh() * self.norm2(self.attn(normed, freqs, options))
        ffn = self.feed_forward(self.ffn_norm1(x) * (1 + scale_mlp[:, None]))
        return x + gate_mlp[:, None].tanh() * self.ffn_norm2(ffn)


class NormOut(nn.Module):
    """LayerNorm without affine (eps 1e-6) scaled by `1 + linear_1(silu(t))`, then `linear_2`."""

    def __init__(self, config: OmniGen2Config, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        dim = config.hidden_size
        self.linear_1 = ops.Linear(config.t_hidden, dim, bias=True, **factory)
        self.norm = ops.LayerNorm(dim, eps=1e-6, elementwise_affine=False, **factory)
        self.linear_2 = ops.Linear(dim, config.patch_size ** 2 * config.out_channels, bias=True, **factory)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        scale = self.linear_1(F.silu(temb).to(x.dtype))  # [B, dim]
        return self.linear_2(self.norm(x) * (1 + scale)[:, None])


class TimestepEmbedding(nn.Module):
    """`linear_2(silu(linear_1(sinusoid)))`."""

    def __init__(self, hidden: int, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(FREQUENCY_DIM, hidden, bias=True, **factory)
        self.linear_2 = ops.Linear(hidden, hidden, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class TimeCaptionEmbedding(nn.Module):
    """The timestep embedding (`timestep_embedder`) and the caption embedder (RMS norm + linear)."""

    def __init__(self, config: OmniGen2Config, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.timestep_scale = config.timestep_scale
        self.timestep_embedder = TimestepEmbedding(config.t_hidden, factory, ops)
        width = config.text_feat_dim
        self.caption_embedder = nn.Sequential(RMSNorm(width, config.norm_eps, **factory),
                                              ops.Linear(width, config.hidden_size, bias=True, **factory))

    def forward(self, t: torch.Tensor, text: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        temb = self.timestep_embedder(timestep_sinusoid(t, self.timestep_scale).to(dtype))
        return temb, self.caption_embedder(text)


def patchify(x: torch.Tensor, p: int) -> torch.Tensor:
    """`[B, C, H, W]` (H, W multiples of p) -> `[B, H/p * W/p, p*p*C]` (patch rows, then columns, then channels)."""
    b, c, h, w = x.shape
    return x.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), p * p * c)


def grid_ids(start: int, rows: int, cols: int) -> torch.Tensor:
    """Position ids `[rows*cols, 3]`: `(start, row, col)` in row-major order."""
    ids = torch.empty(rows * cols, 3, dtype=torch.float32)
    ids[:, 0] = start
    ids[:, 1] = torch.arange(rows, dtype=torch.float32).repeat_interleave(cols)
    ids[:, 2] = torch.arange(cols, dtype=torch.float32).repeat(rows)
    return ids


@comfyui_name("OmniGen2Transformer2DModel")
class OmniGen2Transformer(nn.Module):
    """OmniGen2's transformer (see the module docstring), built from an `OmniGen2Config`."""

    label = "OmniGen2"  # the network's name in input errors (a derived network sets its own)
    input_error: type[ValueError] = OmniGen2InputError

    def __init__(self, config: OmniGen2Config, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.patch_size = config.patch_size
        self.out_channels = config.out_channels
        self.hidden_size = config.hidden_size
        patch_width = config.patch_size ** 2 * config.in_channels
        self.x_embedder = ops.Linear(patch_width, config.hidden_size, bias=True, **factory)
        self.ref_image_patch_embedder = ops.Linear(patch_width, config.hidden_size, bias=True, **factory)
        self.time_caption_embed = TimeCaptionEmbedding(config, factory, ops)
        refiners = range(config.num_refiner_layers)
        self.noise_refiner = nn.ModuleList(TransformerBlock(config, True, factory, ops) for _ in refiners)
        self.ref_image_refiner = nn.ModuleList(TransformerBlock(config, True, factory, ops) for _ in refiners)
        self.context_refiner = nn.ModuleList(TransformerBlock(config, False, factory, ops) for _ in refiners)
        self.layers = nn.ModuleList(TransformerBlock(config, True, factory, ops) for _ in range(config.num_layers))
        self.norm_out = NormOut(config, factory, ops)
        self.image_index_embedding = nn.Parameter(torch.empty(config.index_embeddings, config.hidden_size, **factory))

    @classmethod
    def from_config(cls, config: OmniGen2Config, **kwargs: Any) -> "OmniGen2Transformer":
        return cls(config, **kwargs)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target (ComfyUI's generic names: its OmniGen2 names are the modules' own)."""
        from comfy_core.families.lora_keys import native_key_map

        return native_key_map(names)

    def _rope(self, ids: torch.Tensor) -> torch.Tensor:
        """Position ids `[B, L, 3]` -> rotations `[B, L, 1, D/2, 2, 2]` (a heads axis to broadcast)."""
        config = self.config
        return torch.cat([rope_frequencies(ids[..., i], d, config.rope_theta)
                          for i, d in enumerate(config.axes_dim_rope)], dim=-3).unsqueeze(2)

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor, num_tokens: Any = None,
                ref_latents: Sequence[torch.Tensor] | None = None, attention_mask: torch.Tensor | None = None,
                transformer_options: Mapping[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, C, H, W]`, timesteps (sigma) `[B]`, context `[B, Lt, text_feat_dim]`, `num_tokens`
        (the text length; None: `Lt`), `ref_latents`: reference latents `[B, C, h, w]` each ->
        `[B, C, H, W]`, the negated network output."""
        options = dict(transformer_options or {})
        config = self.config
        p = self.patch_size
        if x.dim() != 4:
            raise self.input_error(f"{self.label}: the latent must be [B, C, H, W], got {tuple(x.shape)}")
        bsz, _, h, w = x.shape
        text_len = context.shape[1]
        tokens = text_len if num_tokens is None else int(num_tokens)
        if tokens != text_len or (attention_mask is not None and not bool(attention_mask.bool().all())):
            raise self.input_error(f"{self.label}: the text must be unpadded ({text_len} states, "
                                   f"num_tokens {tokens}, "
                                     "a mask that masks tokens): the joint positions count every text state")
        refs = list(ref_latents or ())
        if len(refs) > config.index_embeddings:
            raise self.input_error(f"{self.label}: {len(refs)} reference images, the model takes at most "
                                     f"{config.index_embeddings}")
        x = pad_to_patch_size(x, (p, p))
        hp, wp = x.shape[-2] // p, x.shape[-1] // p
        device = x.device

        temb, text = self.time_caption_embed(1.0 - timesteps, context, x.dtype)  # [B, t_hidden], [B, Lt, dim]

        # Positions: text (i, i, i); reference j at (shift_j, row, col); the image after them.
        text_ids = torch.arange(text_len, dtype=torch.float32).view(-1, 1).expand(text_len, 3)
        ref_ids, ref_tokens = [], []
        shift = text_len
        for index, ref in enumerate(refs):
            if ref.dim() != 4 or ref.shape[0] != bsz:
                raise self.input_error(f"{self.label}: reference latent {index} has shape {tuple(ref.shape)}, "
                                       f"expected "
                                         f"[{bsz}, C, h, w]")
            ref = pad_to_patch_size(ref.to(device=device, dtype=x.dtype), (p, p))
            rows, cols = ref.shape[-2] // p, ref.shape[-1] // p
            ref_ids.append(grid_ids(shift, rows, cols))
            embedded = self.ref_image_patch_embedder(patchify(ref, p))  # [B, rows*cols, dim]
            index_row = self.image_index_embedding[index].to(device=device, dtype=embedded.dtype)
            ref_tokens.append(embedded + index_row)
            shift += max(rows, cols)
        img_ids = grid_ids(shift, hp, wp)
        freqs = self._rope(torch.cat([text_ids, *ref_ids, img_ids], dim=0).to(device)[None].expand(bsz, -1, -1))
        text_freqs = freqs[:, :text_len]
        ref_len = sum(t.shape[1] for t in ref_tokens)
        ref_freqs, img_freqs = freqs[:, text_len:text_len + ref_len], freqs[:, text_len + ref_len:]

        for block in self.context_refiner:
            text = block(text, text_freqs, transformer_options=options)

        img = self.x_embedder(patchify(x, p))  # [B, hp*wp, dim]
        for block in self.noise_refiner:
            img = block(img, img_freqs, temb, transformer_options=options)
        if ref_tokens:
            ref_seq = torch.cat(ref_tokens, dim=1)
            for block in self.ref_image_refiner:
                ref_seq = block(ref_seq, ref_freqs, temb, transformer_options=options)
            img = torch.cat([ref_seq, img], dim=1)

        seq = self._joint(text, img, freqs, temb, options)  # [B, Lt + refs + hp*wp, dim]
        out = self.norm_out(seq, temb)[:, -hp * wp:]  # [B, hp*wp, p*p*C]
        c = self.out_channels
        out = out.reshape(bsz, hp, wp, p, p, c).permute(0, 5, 1, 3, 2, 4).reshape(bsz, c, hp * p, wp * p)
        return -out[:, :, :h, :w]

    def _joint(self, text: torch.Tensor, img: torch.Tensor, freqs: torch.Tensor, temb: torch.Tensor,
               options: dict) -> torch.Tensor:
        """The refined text `[B, Lt, dim]` and image (references first) tokens through the joint
        blocks -> the sequence `[B, Lt + Li, dim]` (`freqs` cover both); a derived network (Boogu)
        runs blocks of its own first."""
        seq = torch.cat([text, img], dim=1)
        for block in self.layers:
            seq = block(seq, freqs, temb, transformer_options=options)
        return seq


__all__ = ["OmniGen2Config", "OmniGen2ConfigError", "OmniGen2InputError", "OmniGen2Transformer", "timestep_sinusoid"]

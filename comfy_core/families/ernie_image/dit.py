"""ERNIE-Image's diffusion transformer and `ErnieImageConfig` read from weights.

Architecture of Baidu's ERNIE-Image (2026; diffusers' `ErnieImageTransformer2DModel`, ComfyUI's
`comfy/ldm/ernie/model.py`: `ErnieImageModel`), written here from those descriptions: a single-stream
DiT over one sequence `[image patches, text states]`:

- the latent's `p x p` patches (`x_embedder.proj`, a strided convolution; the released models use
  p = 1 on Flux.2's 128-channel latents) and the text states projected to the width (`text_proj`, no
  bias; absent when the text is already as wide);
- the timestep: a sinusoid as wide as the model (sin half first, frequencies
  `10000^(-i / (width/2))`), then `time_embedding.linear_1` / SiLU / `linear_2`; one shared
  modulation for every block, `adaLN_modulation.1(silu(c))` -> shift / scale / gate for the
  attention and the MLP;
- each block: RMSNorm (`adaLN_sa_ln`), `x * (1 + scale) + shift`, self-attention (`to_q` / `to_k` /
  `to_v` without biases, per-head RMSNorm `norm_q` / `norm_k`, RoPE, `to_out.0`), gated residual;
  RMSNorm (`adaLN_mlp_ln`), modulation, the GELU-gated MLP `linear_fc2(up_proj(x) * gelu(gate_proj(x)))`,
  gated residual; eps 1e-6 everywhere;
- the output: LayerNorm without affine, `* (1 + scale) + shift` with `final_norm.linear(c)` giving
  (scale, shift), `final_linear`, the image positions unpatchified.

Positions (3 axes of 32 / 48 / 48 channels of a 128-channel head, base 256): text token i at
(i, 0, 0); image patch (r, c) at (T, r, c) with T the text length (ComfyUI's: the padded length
of the context it is given; the masked text of diffusers is not used by ComfyUI, which passes every
state unmasked). The rotation is Megatron's non-interleaved one that diffusers and ComfyUI apply:
the angle list `a_0 .. a_{D/2-1}` (the axes' frequencies side by side) is repeated element-wise to
D entries `a_0, a_0, a_1, a_1, ...`, and `x * cos + rotate_half(x) * sin` with
`rotate_half(x) = [-x_hi, x_lo]`. ScaleROPE's `rope_options` stretch and move the image grid and
move its index as ComfyUI's does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.attention.rope import ROPE_OPTIONS, rope_axis_positions
from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.families.zimage.nextdit import RMSNorm
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

HEAD_DIM = 128  # ComfyUI / diffusers: heads = width / 128 (not in the weights)
ROPE_THETA = 256.0
ROPE_AXES = (32, 48, 48)  # of a 128-channel head: (index, row, column)
EPS = 1e-6


class ErnieImageConfigError(ValueError):
    """The ERNIE-Image weights are incomplete or inconsistent, or the parameters are impossible."""


class ErnieImageInputError(ValueError):
    """Inputs the ERNIE-Image network cannot take."""


@dataclass(frozen=True)
class ErnieImageConfig:
    """The network's structure (the released ERNIE-Image's: 4096 wide, 32 heads of 128, 36 layers,
    MLP 12288, 128 latent channels in 1x1 patches, 3072-wide Ministral 3 3B text states)."""

    hidden_size: int = 4096
    num_attention_heads: int = 32
    num_layers: int = 36
    ffn_hidden_size: int = 12288
    in_channels: int = 128
    out_channels: int = 128
    patch_size: int = 1
    text_in_dim: int = 3072
    rope_theta: float = ROPE_THETA
    rope_axes_dim: tuple[int, int, int] = ROPE_AXES

    def __post_init__(self) -> None:
        object.__setattr__(self, "rope_axes_dim", tuple(int(a) for a in self.rope_axes_dim))
        if self.num_attention_heads <= 0 or self.hidden_size % self.num_attention_heads:
            raise ErnieImageConfigError(f"ERNIE-Image: width {self.hidden_size} is not a multiple of "
                                        f"{self.num_attention_heads} heads")
        if sum(self.rope_axes_dim) != self.head_dim or any(a % 2 for a in self.rope_axes_dim):
            raise ErnieImageConfigError(f"ERNIE-Image: RoPE axes {list(self.rope_axes_dim)} must be even and sum "
                                        f"to the head width {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def latent_channels(self) -> int:
        return self.in_channels

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` of this model (`image_model` "ernie" and the constructor's
        arguments of `ErnieImageModel`)."""
        return {"image_model": "ernie", "hidden_size": self.hidden_size,
                "num_attention_heads": self.num_attention_heads, "num_layers": self.num_layers,
                "ffn_hidden_size": self.ffn_hidden_size, "in_channels": self.in_channels,
                "out_channels": self.out_channels, "patch_size": self.patch_size, "text_in_dim": self.text_in_dim,
                "rope_theta": int(self.rope_theta), "rope_axes_dim": list(self.rope_axes_dim)}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "ErnieImageConfig":
        """The structure from names and shapes under `prefix` (ComfyUI's = diffusers' names). Heads
        of 128 (so the RoPE split is 32 / 48 / 48) and base 256 are ERNIE-Image's, not in the weights."""
        shape = shape_reader(tensors, prefix, ErnieImageConfigError, "ERNIE-Image")
        embed = shape("x_embedder.proj.weight")
        if len(embed) != 4 or embed[2] != embed[3]:
            raise ErnieImageConfigError(f"ERNIE-Image: x_embedder.proj.weight has shape {embed}, expected "
                                        "[width, channels, p, p]")
        hidden, in_channels, patch = embed[0], embed[1], embed[2]
        if hidden % HEAD_DIM:
            raise ErnieImageConfigError(f"ERNIE-Image: width {hidden} is not a multiple of its "
                                        f"{HEAD_DIM}-channel heads")
        text_in = shape("text_proj.weight")[1] if prefix + "text_proj.weight" in tensors else hidden
        out_rows = shape("final_linear.weight")[0]
        if out_rows % (patch * patch):
            raise ErnieImageConfigError(f"ERNIE-Image: final_linear gives {out_rows} outputs, not {patch}x{patch} "
                                        "patches")
        if shape("layers.0.self_attention.norm_q.weight") != (HEAD_DIM,):
            raise ErnieImageConfigError(f"ERNIE-Image: norm_q is {shape('layers.0.self_attention.norm_q.weight')} "
                                        f"wide, expected heads of {HEAD_DIM}")
        layers = count_numbered(tensors, prefix, "layers", ErnieImageConfigError, "ERNIE-Image")
        return cls(hidden_size=hidden, num_attention_heads=hidden // HEAD_DIM, num_layers=layers,
                   ffn_hidden_size=shape("layers.0.mlp.gate_proj.weight")[0], in_channels=in_channels,
                   out_channels=out_rows // (patch * patch), patch_size=patch, text_in_dim=text_in)


def timestep_sinusoid(t: torch.Tensor, dim: int) -> torch.Tensor:
    """`[B] -> [B, dim]` float32: sin then cos of `t * 10000^(-i / (dim/2))` (diffusers' `Timesteps`
    without `flip_sin_to_cos` and without a frequency shift)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]  # [B, half]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=-1)


def rope_angles(ids: torch.Tensor, axes: tuple[int, ...], theta: float) -> torch.Tensor:
    """Position ids `[B, L, 3]` -> angles `[B, L, D]` float32: per axis `pos * theta^(-2j / d)`
    (j < d/2), the axes side by side, each angle repeated twice in place (`a0, a0, a1, a1, ...`).
    Computed in float64 as ComfyUI does where the device has it."""
    work = torch.float32 if ids.device.type == "mps" else torch.float64
    parts = []
    for axis, dim in enumerate(axes):
        omega = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=work, device=ids.device) / dim))  # [d/2]
        parts.append(ids[..., axis].to(work)[..., None] * omega)  # [B, L, d/2]
    angles = torch.cat(parts, dim=-1).float()  # [B, L, D/2]
    return angles.repeat_interleave(2, dim=-1)  # [B, L, D]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x `[B, L, H, D]`, cos / sin `[B, L, 1, D]` -> `x cos + rotate_half(x) sin` (Megatron's
    non-interleaved form), computed in float32, returned in x's dtype."""
    xf = x.float()
    lo, hi = xf.chunk(2, dim=-1)
    return (xf * cos + torch.cat([-hi, lo], dim=-1) * sin).to(x.dtype)


class Attention(nn.Module):
    """Self-attention with per-head RMS-normed q / k and RoPE (no biases)."""

    def __init__(self, config: ErnieImageConfig, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        dim, d = config.hidden_size, config.head_dim
        self.heads, self.head_dim = config.num_attention_heads, d
        self.to_q = ops.Linear(dim, dim, bias=False, **factory)
        self.to_k = ops.Linear(dim, dim, bias=False, **factory)
        self.to_v = ops.Linear(dim, dim, bias=False, **factory)
        self.norm_q = RMSNorm(d, EPS, **factory)
        self.norm_k = RMSNorm(d, EPS, **factory)
        self.to_out = nn.ModuleList([ops.Linear(dim, dim, bias=False, **factory)])

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                transformer_options: Mapping[str, Any]) -> torch.Tensor:
        """x `[B, L, dim]` -> `[B, L, dim]`."""
        b, n, _ = x.shape
        q = self.norm_q(self.to_q(x).view(b, n, self.heads, self.head_dim))  # [B, L, H, D]
        k = self.norm_k(self.to_k(x).view(b, n, self.heads, self.head_dim))
        v = self.to_v(x).view(b, n, self.heads, self.head_dim)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        out = calling.attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), self.heads, skip_reshape=True,
                             transformer_options=transformer_options)  # [B, L, H*D]
        return self.to_out[0](out)


class FeedForward(nn.Module):
    """`linear_fc2(up_proj(x) * gelu(gate_proj(x)))` (exact GELU), no biases."""

    def __init__(self, dim: int, hidden: int, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.gate_proj = ops.Linear(dim, hidden, bias=False, **factory)
        self.up_proj = ops.Linear(dim, hidden, bias=False, **factory)
        self.linear_fc2 = ops.Linear(hidden, dim, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(self.up_proj(x) * F.gelu(self.gate_proj(x)))


class Block(nn.Module):
    """One block under the shared modulation (ComfyUI's `ErnieImageSharedAdaLNBlock`)."""

    def __init__(self, config: ErnieImageConfig, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.adaLN_sa_ln = RMSNorm(config.hidden_size, EPS, **factory)
        self.self_attention = Attention(config, factory, ops)
        self.adaLN_mlp_ln = RMSNorm(config.hidden_size, EPS, **factory)
        self.mlp = FeedForward(config.hidden_size, config.ffn_hidden_size, factory, ops)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mod: list[torch.Tensor],
                transformer_options: Mapping[str, Any]) -> torch.Tensor:
        """x `[B, L, dim]`, mod: shift / scale / gate for attention and MLP, each `[B, 1, dim]`."""
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mod
        h = self.adaLN_sa_ln(x) * (1 + scale_msa) + shift_msa
        x = x + gate_msa * self.self_attention(h, rope, transformer_options)
        h = self.adaLN_mlp_ln(x) * (1 + scale_mlp) + shift_mlp
        return x + gate_mlp * self.mlp(h)


class PatchEmbed(nn.Module):
    """`p x p` patches by a strided convolution: `[B, C, H, W] -> [B, (H/p)(W/p), dim]`."""

    def __init__(self, config: ErnieImageConfig, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        p = config.patch_size
        self.proj = ops.Conv2d(config.in_channels, config.hidden_size, kernel_size=p, stride=p, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class TimestepEmbedding(nn.Module):
    def __init__(self, dim: int, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(dim, dim, bias=True, **factory)
        self.linear_2 = ops.Linear(dim, dim, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class FinalNorm(nn.Module):
    """LayerNorm without affine, `* (1 + scale) + shift` with (scale, shift) = `linear(c)`."""

    def __init__(self, dim: int, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.linear = ops.Linear(dim, 2 * dim, bias=True, **factory)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        scale, shift = self.linear(c).chunk(2, dim=-1)  # [B, dim] each
        return F.layer_norm(x, (x.shape[-1],), eps=EPS) * (1 + scale[:, None]) + shift[:, None]


@comfyui_name("ErnieImageModel")
class ErnieImageTransformer(nn.Module):
    """ERNIE-Image's transformer (see the module docstring), built from an `ErnieImageConfig`."""

    def __init__(self, config: ErnieImageConfig, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.patch_size = config.patch_size
        self.out_channels = config.out_channels
        self.hidden_size = config.hidden_size
        dim = config.hidden_size
        self.x_embedder = PatchEmbed(config, factory, ops)
        self.text_proj = (ops.Linear(config.text_in_dim, dim, bias=False, **factory)
                          if config.text_in_dim != dim else None)
        self.time_embedding = TimestepEmbedding(dim, factory, ops)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), ops.Linear(dim, 6 * dim, bias=True, **factory))
        self.layers = nn.ModuleList(Block(config, factory, ops) for _ in range(config.num_layers))
        self.final_norm = FinalNorm(dim, factory, ops)
        self.final_linear = ops.Linear(dim, config.patch_size ** 2 * config.out_channels, bias=True, **factory)

    @classmethod
    def from_config(cls, config: ErnieImageConfig, **kwargs: Any) -> "ErnieImageTransformer":
        return cls(config, **kwargs)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target: ComfyUI's generic names (its ERNIE names are the modules' own)
        and diffusers' / PEFT's `transformer.<module>` (the same module names)."""
        from comfy_core.families.ernie_image.keys import lora_key_map

        return lora_key_map(names)

    def positions(self, batch: int, text_len: int, rows: int, cols: int, rope_options: Mapping[str, Any] | None,
                  device: Any) -> torch.Tensor:
        """Position ids `[B, rows*cols + text_len, 3]` float32: the image grid (index `text_len`),
        then the text (index i)."""
        index = float(text_len)
        if rope_options is not None:
            index += float(rope_options.get("shift_t", 0.0))
        ys = rope_axis_positions(rows, "y", rope_options, device=device, dtype=torch.float32)
        xs = rope_axis_positions(cols, "x", rope_options, device=device, dtype=torch.float32)
        grid = torch.stack([torch.full((rows, cols), index, device=device),
                            ys[:, None].expand(rows, cols), xs[None, :].expand(rows, cols)], dim=-1)
        text = torch.zeros(text_len, 3, device=device)
        text[:, 0] = torch.arange(text_len, dtype=torch.float32, device=device)
        return torch.cat([grid.reshape(-1, 3), text], dim=0)[None].expand(batch, -1, -1)

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
                transformer_options: Mapping[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, C, H, W]`, timesteps `[B]` (sigma x 1000), context `[B, T, text_in_dim]` -> `[B, C, H, W]`."""
        options = dict(transformer_options or {})
        config = self.config
        if x.dim() != 4:
            raise ErnieImageInputError(f"ERNIE-Image: the latent must be [B, C, H, W], got {tuple(x.shape)}")
        if context.dim() != 3 or context.shape[-1] != config.text_in_dim:
            raise ErnieImageInputError(f"ERNIE-Image: the text states must be [B, T, {config.text_in_dim}], got "
                                       f"{tuple(context.shape)} (a text encoder of another model?)")
        bsz, _, h, w = x.shape
        p = self.patch_size
        x = pad_to_patch_size(x, (p, p))
        rows, cols = x.shape[-2] // p, x.shape[-1] // p
        count = rows * cols
        img = self.x_embedder(x)  # [B, rows*cols, dim]
        text = context.to(img.dtype)
        if self.text_proj is not None and text.numel() > 0:
            text = self.text_proj(text)  # [B, T, dim]
        if text.shape[0] != bsz:
            text = text.expand(bsz, -1, -1) if text.shape[0] == 1 else text
        seq = torch.cat([img, text], dim=1)  # [B, rows*cols + T, dim]

        ids = self.positions(bsz, text.shape[1], rows, cols, options.get(ROPE_OPTIONS), x.device)
        angles = rope_angles(ids, config.rope_axes_dim, config.rope_theta)[:, :, None]  # [B, L, 1, D]
        rope = (torch.cos(angles), torch.sin(angles))

        c = self.time_embedding(timestep_sinusoid(timesteps, config.hidden_size).to(img.dtype))  # [B, dim]
        mod = [m[:, None] for m in self.adaLN_modulation(c).chunk(6, dim=-1)]  # 6 x [B, 1, dim]
        for block in self.layers:
            seq = block(seq, rope, mod, options)
        out = self.final_linear(self.final_norm(seq, c).to(seq.dtype))[:, :count]  # [B, rows*cols, p*p*C]
        oc = self.out_channels
        out = out.reshape(bsz, rows, cols, p, p, oc).permute(0, 5, 1, 3, 2, 4).reshape(bsz, oc, rows * p, cols * p)
        return out[:, :, :h, :w]


__all__ = ["ErnieImageConfig", "ErnieImageConfigError", "ErnieImageInputError", "ErnieImageTransformer",
           "apply_rope", "rope_angles", "timestep_sinusoid"]

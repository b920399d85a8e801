"""PixelDiT (NVIDIA 2026, "PixelDiT: Pixel Diffusion Transformers for Image Generation",
huggingface.co/nvidia/PixelDiT-1300M-1024px) and PiD, its pixel diffusion decoder: a dual-level DiT in
pixel space (behaviour read from ComfyUI's `comfy/ldm/pixeldit/model.py`, `modules.py`, `pid.py`;
code written here).

Patch level (`patch_blocks`, MMDiT): the image cut into P x P patches (`s_embedder`: a linear over
the unfolded `[C * P * P]` patch), the text states through `y_embedder` (linear + RMSNorm) plus a
learned position table (`y_pos_embedding`, the first `Ltxt` rows); each block modulates both streams
from `c = silu(t_emb)` (`x * (1 + scale) + shift` after an RMSNorm, tanh-free gates), runs one joint
attention over `[text, image]` with per-stream q / k / v, RMS-normed q / k and per-stream RoPE (the
image: 2-D RoPE with the x / y frequencies interleaved pairwise, positions `linspace(0, 16, n)`
along each axis; the text: 1-D RoPE over its index), then a SwiGLU MLP per stream:

    s, y <- s + g1 * attn(...), y + g1' * attn(...);  s <- s + g2 * swiglu(n(s) (1 + b2) + a2)

Pixel level (`pixel_blocks`, PiT): every pixel a `pixel_hidden`-wide token (a linear over RGB plus
2-D sin / cos positions, MAE's layout), grouped by patch; `s = silu(t_emb + s)` conditions each
pixel of its patch through per-pixel adaLN tables (`adaLN_modulation_msa` / `_mlp`: one linear to
`3 * pixel_hidden * P * P`); the attention compresses each patch's `P*P` pixel tokens to one token
(`compress_to_attn`), attends across patches with 2-D RoPE, and expands back; a GELU (tanh) MLP per
pixel. `final_layer` (RMSNorm + linear) gives RGB per pixel, folded back to the image: the velocity.
Timesteps are ComfyUI's flow convention (sigma x 1000) through a 256-wide sinusoid of period 10.

PiD (`pid.py`: `PiDNet`): the same network plus `lq_proj`, which turns a low-resolution latent (Flux / SD3 /
Flux.2 / Z-Image, 4x smaller than the output after the VAE's factor) into patch-grid features: the
latent aligned to the patch grid (unpatchified for Flux.2's 128 channels, nearest-resized or folded),
two 3x3 convolutions and ResNet blocks (GroupNorm 4, SiLU), one linear head per gated patch block
(every `lq_interval`-th), each added through a sigma-aware gate
`x + sigmoid(content_proj([x, lq]) - exp(log_alpha) * degrade_sigma) * lq`; v1.5 files add a head
gated into `s` before the pixel blocks (`pit_head`, `pit_lq_gate`). Its RoPE is NTK-aware: per axis
`theta * (n / n_ref) ^ (d / (d - 2))` with the reference grid `rope_ref / P`.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.attention.rope import apply_rope, rope_frequencies
from comfy_core.families.sd3.mmdit_blocks import Mlp
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.swiglu import SwiGLUFeedForward
from comfy_core.models.unet_blocks import operations_or_default, timestep_embedding
from comfy_core.models.weight_shapes import shape_reader

ROPE_SPAN = 16.0  # image RoPE positions run over linspace(0, 16, n) on each axis
TIME_PERIOD = 10.0  # the timestep sinusoid's max period (ComfyUI's TimestepEmbedder(max_period=10))
RMS_EPS = 1e-6


class PixelDiTConfigError(ValueError):
    """The PixelDiT / PiD weights are incomplete or inconsistent."""


class PixelDiTInputError(ValueError):
    """An input the network cannot take (no text, no PiD latent, wrong latent channels)."""


@dataclass(frozen=True)
class PiDConfig:
    """PiD's low-quality-latent branch (`lq_proj`); ComfyUI's `PidNet` arguments."""

    lq_latent_channels: int = 16
    lq_hidden_dim: int = 512
    lq_num_res_blocks: int = 4
    lq_interval: int = 2
    lq_num_outputs: int = 7
    sr_scale: int = 4
    latent_spatial_down_factor: int = 8
    lq_latent_unpatchify_factor: int = 1
    lq_conv_padding_mode: str = "zeros"
    lq_gate_per_token: bool = False
    pit_lq_inject: bool = False
    rope_ref_h: int = 1024
    rope_ref_w: int = 1024


@dataclass(frozen=True)
class PixelDiTConfig:
    """The network's shape (the released 1.3B's defaults); `pid` set for PiD files."""

    in_channels: int = 3
    hidden_size: int = 1536
    num_groups: int = 24
    pixel_hidden_size: int = 16
    pixel_attn_hidden_size: int = 1152
    pixel_num_groups: int = 16
    patch_depth: int = 14
    pixel_depth: int = 2
    patch_size: int = 16
    txt_embed_dim: int = 2304
    txt_max_length: int = 300
    mlp_hidden: int = 4096  # SwiGLU width of the patch blocks (int(2 * 4 * hidden / 3))
    pixel_mlp_hidden: int = 64  # the pixel MLP's width (4 * pixel_hidden)
    time_freq_dim: int = 256
    use_text_rope: bool = True
    text_rope_theta: float = 10000.0
    pid: PiDConfig | None = None

    @property
    def image_model(self) -> str:
        return "pid" if self.pid is not None else "pixeldit"

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config`: `image_model` plus our arguments (PiD's flattened in)."""
        out = {"image_model": self.image_model, **{k: v for k, v in asdict(self).items() if k != "pid"}}
        if self.pid is not None:
            out.update(asdict(self.pid))
        return out

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "PixelDiTConfig":
        """The structure under `prefix` (ComfyUI's names) from names and shapes only: widths from
        the embedders, heads from the q-norm widths, depths by counting blocks, the text table's
        length from `y_pos_embedding`; PiD's branch when `lq_proj.latent_proj.0.weight` is there.
        Raises `PixelDiTConfigError` naming the key otherwise."""
        shape = shape_reader(tensors, prefix, PixelDiTConfigError, "PixelDiT")
        pixel_hidden, in_channels = shape("pixel_embedder.proj.weight")
        hidden, patch_in = shape("s_embedder.proj.weight")
        patch = int(round(math.sqrt(patch_in / max(in_channels, 1))))
        if in_channels <= 0 or patch * patch * in_channels != patch_in:
            raise PixelDiTConfigError(f"PixelDiT: {prefix}s_embedder.proj.weight takes {patch_in} inputs, not "
                                      f"{in_channels} x P x P")
        _, txt_dim = shape("y_embedder.proj.weight")
        _, txt_len, _ = shape("y_pos_embedding")
        (head_dim,) = shape("patch_blocks.0.attn.q_norm_x.weight")
        attn_dim, _ = shape("pixel_blocks.0.compress_to_attn.weight")
        (pixel_head_dim,) = shape("pixel_blocks.0.attn.q_norm.weight")
        if hidden % head_dim or attn_dim % pixel_head_dim or head_dim % 4 or pixel_head_dim % 4:
            raise PixelDiTConfigError(f"PixelDiT: widths {hidden} / {attn_dim} do not split in heads of "
                                      f"{head_dim} / {pixel_head_dim} (multiples of 4)")
        mlp_hidden, _ = shape("patch_blocks.0.mlp_x.w1.weight")
        pixel_mlp, _ = shape("pixel_blocks.0.mlp.fc1.weight")
        _, freq = shape("t_embedder.mlp.0.weight")
        config = cls(in_channels=in_channels, hidden_size=hidden, num_groups=hidden // head_dim,
                     pixel_hidden_size=pixel_hidden, pixel_attn_hidden_size=attn_dim,
                     pixel_num_groups=attn_dim // pixel_head_dim,
                     patch_depth=_count(tensors, prefix + "patch_blocks."),
                     pixel_depth=_count(tensors, prefix + "pixel_blocks."), patch_size=patch,
                     txt_embed_dim=txt_dim, txt_max_length=txt_len, mlp_hidden=mlp_hidden,
                     pixel_mlp_hidden=pixel_mlp, time_freq_dim=freq,
                     pid=_detect_pid(tensors, prefix, shape) if prefix + LQ_MARKER in tensors else None)
        p2 = patch * patch
        expected = {"pixel_blocks.0.adaLN_modulation_msa.weight": (3 * pixel_hidden * p2, hidden),
                    "pixel_blocks.0.expand_from_attn.weight": (p2 * pixel_hidden, attn_dim),
                    "final_layer.linear.weight": (in_channels, pixel_hidden),
                    "patch_blocks.0.adaLN_modulation_img.0.weight": (6 * hidden, hidden)}
        for key, want in expected.items():
            if shape(key) != want:
                raise PixelDiTConfigError(f"PixelDiT: {prefix}{key} is {list(shape(key))}, expected {list(want)}")
        return config


LQ_MARKER = "lq_proj.latent_proj.0.weight"


def _count(tensors: Mapping[str, Any], head: str) -> int:
    pattern = re.compile(re.escape(head) + r"(\d+)\.")
    found = {int(m.group(1)) for name in tensors if (m := pattern.match(name))}
    if not found or found != set(range(len(found))):
        raise PixelDiTConfigError(f"PixelDiT: blocks {head}N missing or not numbered 0..n-1")
    return len(found)


def _detect_pid(tensors: Mapping[str, Any], prefix: str, shape: Any) -> PiDConfig:
    """PiD's branch from its names and shapes (ComfyUI's `model_detection` rules): the latent's
    channels from the first convolution (Flux.2's 128 as 32 unpatchified by 2 in v1.5 files, as 128
    before; 16x down for Flux.2, else 8x), the gate count and so the interval, per-token gates (a
    1-wide `content_proj`) and the pixel-stage head (`pit_head`); v1.5 files (the pixel head) use
    replicate padding and a 2048-pixel RoPE reference."""
    hidden_dim, in_ch = shape(LQ_MARKER)[:2]
    head = prefix + "lq_proj.latent_proj."
    res_blocks = len({int(m.group(1)) for name in tensors
                      if (m := re.match(re.escape(head) + r"(\d+)\.block\.", name))})
    gates = len({int(m.group(1)) for name in tensors
                 if (m := re.match(re.escape(prefix + "lq_proj.gate_modules.") + r"(\d+)\.", name))})
    if gates == 0:
        raise PixelDiTConfigError(f"PiD: no {prefix}lq_proj.gate_modules.N")
    depth = _count(tensors, prefix + "patch_blocks.")
    v15 = prefix + "lq_proj.pit_head.weight" in tensors
    if v15 and in_ch == 32:
        channels, down, unpatchify = 128, 16, 2
    else:
        channels, down, unpatchify = in_ch, 16 if in_ch >= 64 else 8, 1
    per_token = shape("lq_proj.gate_modules.0.content_proj.weight")[0] == 1
    return PiDConfig(lq_latent_channels=channels, lq_hidden_dim=hidden_dim, lq_num_res_blocks=res_blocks,
                     lq_interval=(depth + gates - 1) // gates, lq_num_outputs=gates,
                     latent_spatial_down_factor=down, lq_latent_unpatchify_factor=unpatchify,
                     lq_conv_padding_mode="replicate" if v15 else "zeros", lq_gate_per_token=per_token,
                     pit_lq_inject=v15, rope_ref_h=2048 if v15 else 1024, rope_ref_w=2048 if v15 else 1024)


def split_pixel_adaln(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """PiD v1.5's one pixel adaLN table per PiT block (`pixel_blocks.N.adaLN_modulation.0`,
    `[P*P * 6 * pixel_hidden, hidden]`, rows ordered (pixel, six tables, channel)) split into
    ComfyUI's `adaLN_modulation_msa` (tables 0..2) and `adaLN_modulation_mlp` (3..5)."""
    out: dict[str, torch.Tensor] = {}
    pd = int(state["pixel_embedder.proj.weight"].shape[0])
    for name, tensor in state.items():
        match = re.match(r"(pixel_blocks\.\d+\.)adaLN_modulation\.0\.(weight|bias)$", name)
        if match is None:
            out[name] = tensor
            continue
        rows = tensor.shape[0]
        if rows % (6 * pd):
            raise PixelDiTConfigError(f"PiD: {name} has {rows} rows, not a multiple of 6 x {pd}")
        grouped = tensor.reshape(rows // (6 * pd), 6, pd, *tensor.shape[1:])
        for part, tables in (("msa", slice(0, 3)), ("mlp", slice(3, 6))):
            out[f"{match.group(1)}adaLN_modulation_{part}.{match.group(2)}"] = (
                grouped[:, tables].reshape(rows // 2, *tensor.shape[1:]).contiguous())
    return out


# -- positions ------------------------------------------------------------------------------------

def rope_2d(dim: int, height: int, width: int, theta: float = 10000.0, ref_grid: tuple[int, int] | None = None,
            scale_x: float = 1.0, scale_y: float = 1.0, shift_x: float = 0.0, shift_y: float = 0.0,
            device: Any = None) -> torch.Tensor:
    """2-D RoPE rotations `[H*W, dim/2, 2, 2]` (float32) for a `height x width` grid: each axis
    `dim/2` channels, x and y pairs interleaved (x0, y0, x1, y1, ...), positions
    `linspace(shift, 16 * scale + shift, n)`; with `ref_grid` (rows, cols) NTK-aware: the axis'
    base `theta * (n / n_ref) ^ (d / (d - 2))` (d = dim/2, when d > 2)."""
    axis = dim // 2
    h_ntk = w_ntk = 1.0
    if ref_grid is not None and axis > 2:
        h_ntk = (height / ref_grid[0]) ** (axis / (axis - 2))
        w_ntk = (width / ref_grid[1]) ** (axis / (axis - 2))
    xs = torch.linspace(shift_x, ROPE_SPAN * scale_x + shift_x, width, device=device)
    ys = torch.linspace(shift_y, ROPE_SPAN * scale_y + shift_y, height, device=device)
    grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
    rot_x = rope_frequencies(grid_x.reshape(1, -1), axis, theta * w_ntk)[0]  # [HW, axis/2, 2, 2]
    rot_y = rope_frequencies(grid_y.reshape(1, -1), axis, theta * h_ntk)[0]
    return torch.stack([rot_x, rot_y], dim=2).reshape(height * width, dim // 2, 2, 2)


_ROPE_KEYS = ("scale_x", "scale_y", "shift_x", "shift_y")


def rope_options(transformer_options: Mapping[str, Any]) -> dict[str, float]:
    """The x / y entries of `transformer_options["rope_options"]` (ComfyUI's ScaleROPE) this
    network reads."""
    options = transformer_options.get("rope_options") or {}
    return {key: float(options[key]) for key in _ROPE_KEYS if key in options}


def sincos_2d(dim: int, height: int, width: int, device: Any = None) -> torch.Tensor:
    """MAE's 2-D sin / cos positions `[H*W, dim]`: the first half the column, the second the row,
    each `[sin(p w_i), cos(p w_i)]` with `w_i = 10000 ^ (-i / (dim / 4))`."""
    omega = 1.0 / 10000.0 ** (torch.arange(dim // 4, dtype=torch.float32, device=device) / (dim / 4.0))
    rows, cols = torch.meshgrid(torch.arange(height, dtype=torch.float32, device=device),
                                torch.arange(width, dtype=torch.float32, device=device), indexing="ij")

    def one(pos: torch.Tensor) -> torch.Tensor:
        angles = torch.outer(pos.reshape(-1), omega)
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)

    return torch.cat([one(cols), one(rows)], dim=1)


# -- layers ---------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    """RMS normalisation over the last axis with a learned `weight` (eps 1e-6)."""

    def __init__(self, dim: int, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight=self.weight.to(dtype=x.dtype, device=x.device), eps=RMS_EPS)


def _gelu_tanh() -> nn.Module:
    return nn.GELU(approximate="tanh")


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`x * (1 + scale) + shift` (ComfyUI's `apply_adaln_`)."""
    return torch.addcmul(x, x, scale) + shift


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, transformer_options: Mapping[str, Any]) -> torch.Tensor:
    """`[B, H, L, D]` -> `[B, L, H*D]` with the attention in force."""
    return calling.attend(q, k, v, q.shape[1], skip_reshape=True, transformer_options=dict(transformer_options))


def _heads(x: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`[B, L, 3 * H * D]` -> q, k, v `[B, H, L, D]`."""
    b, n, width = x.shape
    return x.reshape(b, n, 3, heads, width // (3 * heads)).permute(2, 0, 3, 1, 4).unbind(0)


class JointAttention(nn.Module):
    """Per-stream q / k / v and output projections, RMS-normed q / k, each stream rotated by its own
    RoPE, one attention over `[text, image]`."""

    def __init__(self, dim: int, heads: int, ops: Any, factory: dict) -> None:
        super().__init__()
        self.num_heads = heads
        head_dim = dim // heads
        self.qkv_x = ops.Linear(dim, 3 * dim, bias=False, **factory)
        self.qkv_y = ops.Linear(dim, 3 * dim, bias=False, **factory)
        self.q_norm_x, self.k_norm_x = RMSNorm(head_dim, **factory), RMSNorm(head_dim, **factory)
        self.q_norm_y, self.k_norm_y = RMSNorm(head_dim, **factory), RMSNorm(head_dim, **factory)
        self.proj_x = ops.Linear(dim, dim, **factory)
        self.proj_y = ops.Linear(dim, dim, **factory)

    def forward(self, x: torch.Tensor, y: torch.Tensor, pos_img: torch.Tensor, pos_txt: torch.Tensor | None,
                transformer_options: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        qx, kx, vx = _heads(self.qkv_x(x), self.num_heads)  # [B, H, Nx, D]
        qy, ky, vy = _heads(self.qkv_y(y), self.num_heads)  # [B, H, Ny, D]
        qx, kx = apply_rope(self.q_norm_x(qx), self.k_norm_x(kx), pos_img[None, None])
        qy, ky = self.q_norm_y(qy), self.k_norm_y(ky)
        if pos_txt is not None:
            qy, ky = apply_rope(qy, ky, pos_txt[None, None])
        out = _attend(torch.cat([qy, qx], dim=2), torch.cat([ky, kx], dim=2), torch.cat([vy, vx], dim=2),
                      transformer_options)  # [B, Ny + Nx, H*D]
        ny = y.shape[1]
        return self.proj_x(out[:, ny:]), self.proj_y(out[:, :ny])


class PatchBlock(nn.Module):
    """One MMDiT block of the patch level (ComfyUI's `MMDiTBlockT2I`)."""

    def __init__(self, dim: int, heads: int, mlp_hidden: int, ops: Any, factory: dict) -> None:
        super().__init__()
        self.norm_x1, self.norm_y1 = RMSNorm(dim, **factory), RMSNorm(dim, **factory)
        self.attn = JointAttention(dim, heads, ops, factory)
        self.norm_x2, self.norm_y2 = RMSNorm(dim, **factory), RMSNorm(dim, **factory)
        self.mlp_x = SwiGLUFeedForward(dim, mlp_hidden, 1, None, {"operations": ops, **factory})
        self.mlp_y = SwiGLUFeedForward(dim, mlp_hidden, 1, None, {"operations": ops, **factory})
        self.adaLN_modulation_img = nn.Sequential(ops.Linear(dim, 6 * dim, bias=True, **factory))
        self.adaLN_modulation_txt = nn.Sequential(ops.Linear(dim, 6 * dim, bias=True, **factory))

    def forward(self, x: torch.Tensor, y: torch.Tensor, c: torch.Tensor, pos_img: torch.Tensor,
                pos_txt: torch.Tensor | None,
                transformer_options: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        mx = self.adaLN_modulation_img(c).chunk(6, dim=-1)  # each [B, 1, D]
        my = self.adaLN_modulation_txt(c).chunk(6, dim=-1)
        ax, ay = self.attn(modulate(self.norm_x1(x), mx[0], mx[1]), modulate(self.norm_y1(y), my[0], my[1]),
                           pos_img, pos_txt, transformer_options)
        x = torch.addcmul(x, mx[2], ax)
        y = torch.addcmul(y, my[2], ay)
        x = torch.addcmul(x, mx[5], self.mlp_x(modulate(self.norm_x2(x), mx[3], mx[4])))
        y = torch.addcmul(y, my[5], self.mlp_y(modulate(self.norm_y2(y), my[3], my[4])))
        return x, y


class RotaryAttention(nn.Module):
    """Self-attention over the compressed patch tokens with RMS-normed q / k and 2-D RoPE."""

    def __init__(self, dim: int, heads: int, ops: Any, factory: dict) -> None:
        super().__init__()
        self.num_heads = heads
        self.qkv = ops.Linear(dim, 3 * dim, bias=False, **factory)
        self.q_norm, self.k_norm = RMSNorm(dim // heads, **factory), RMSNorm(dim // heads, **factory)
        self.proj = ops.Linear(dim, dim, **factory)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, transformer_options: Mapping[str, Any]) -> torch.Tensor:
        q, k, v = _heads(self.qkv(x), self.num_heads)
        q, k = apply_rope(self.q_norm(q), self.k_norm(k), pos[None, None])
        return self.proj(_attend(q, k, v, transformer_options))


class PixelBlock(nn.Module):
    """One PiT block (ComfyUI's `PiTBlock`): per-pixel adaLN from the patch features, patch-compressed
    attention, a per-pixel MLP. `x` `[B*L, P*P, pixel]`, `s_cond` `[B*L, hidden]`."""

    mlp_chunk = 1 << 20  # pixel tokens per MLP call (memory only)

    def __init__(self, config: PixelDiTConfig, ops: Any, factory: dict) -> None:
        super().__init__()
        pd, p2, attn = config.pixel_hidden_size, config.patch_size ** 2, config.pixel_attn_hidden_size
        self.pixel_dim, self.attn_dim, self.num_heads = pd, attn, config.pixel_num_groups
        self.compress_to_attn = ops.Linear(p2 * pd, attn, bias=True, **factory)
        self.expand_from_attn = ops.Linear(attn, p2 * pd, bias=True, **factory)
        self.norm1 = RMSNorm(pd, **factory)
        self.attn = RotaryAttention(attn, config.pixel_num_groups, ops, factory)
        self.norm2 = RMSNorm(pd, **factory)
        self.mlp = Mlp(pd, config.pixel_mlp_hidden, act_layer=_gelu_tanh, operations=ops, **factory)
        self.adaLN_modulation_msa = ops.Linear(config.hidden_size, 3 * pd * p2, bias=True, **factory)
        self.adaLN_modulation_mlp = ops.Linear(config.hidden_size, 3 * pd * p2, bias=True, **factory)

    def forward(self, x: torch.Tensor, s_cond: torch.Tensor, batch: int, pos: torch.Tensor,
                transformer_options: Mapping[str, Any]) -> torch.Tensor:
        bl, p2, pd = x.shape
        shift, scale, gate = self.adaLN_modulation_msa(s_cond).view(bl, p2, 3 * pd).chunk(3, dim=-1)
        compressed = self.compress_to_attn(modulate(self.norm1(x), shift, scale).reshape(bl, p2 * pd))
        attended = self.attn(compressed.view(batch, bl // batch, self.attn_dim), pos, transformer_options)
        x = torch.addcmul(x, gate, self.expand_from_attn(attended.reshape(bl, self.attn_dim)).view(bl, p2, pd))
        shift, scale, gate = self.adaLN_modulation_mlp(s_cond).view(bl, p2, 3 * pd).chunk(3, dim=-1)
        normed = modulate(self.norm2(x), shift, scale)
        step = max(1, self.mlp_chunk // p2)
        update = torch.cat([self.mlp(normed[i:i + step]) for i in range(0, bl, step)], dim=0)
        return torch.addcmul(x, gate, update)


class Embedder(nn.Module):
    """`proj` (linear), then an RMSNorm `norm` when asked (the text embedder)."""

    def __init__(self, dim_in: int, dim: int, norm: bool, ops: Any, factory: dict) -> None:
        super().__init__()
        self.proj = ops.Linear(dim_in, dim, bias=True, **factory)
        self.norm = RMSNorm(dim, **factory) if norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.proj(x))


class TimestepEmbedder(nn.Module):
    """`mlp(sinusoid(t))`: Linear, SiLU, Linear over the cos-first sinusoid of period 10."""

    def __init__(self, dim: int, freq: int, ops: Any, factory: dict) -> None:
        super().__init__()
        self.freq = freq
        self.mlp = nn.Sequential(ops.Linear(freq, dim, bias=True, **factory), nn.SiLU(),
                                 ops.Linear(dim, dim, bias=True, **factory))

    def forward(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.mlp(timestep_embedding(t, self.freq, max_period=TIME_PERIOD).to(dtype))


def _pad_to_patch(x: torch.Tensor, patch: int) -> torch.Tensor:
    from comfy_core.families.flux.dit import pad_to_patch_size

    return pad_to_patch_size(x, (patch, patch))


@comfyui_name("PixDiT_T2I")
class PixelDiT(nn.Module):
    """The PixelDiT text-to-image network (see the module docstring); `params` are
    `PixelDiTConfig`'s fields."""

    def __init__(self, config: PixelDiTConfig, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.in_channels = self.out_channels = config.in_channels
        self.patch_size = config.patch_size
        self.hidden_size = config.hidden_size
        dim = config.hidden_size
        self.pixel_embedder = Embedder(config.in_channels, config.pixel_hidden_size, False, ops, factory)
        self.s_embedder = Embedder(config.in_channels * config.patch_size ** 2, dim, False, ops, factory)
        self.t_embedder = TimestepEmbedder(dim, config.time_freq_dim, ops, factory)
        self.y_embedder = Embedder(config.txt_embed_dim, dim, True, ops, factory)
        self.y_pos_embedding = nn.Parameter(torch.empty(1, config.txt_max_length, dim, **factory))
        self.patch_blocks = nn.ModuleList(PatchBlock(dim, config.num_groups, config.mlp_hidden, ops, factory)
                                          for _ in range(config.patch_depth))
        self.pixel_blocks = nn.ModuleList(PixelBlock(config, ops, factory) for _ in range(config.pixel_depth))
        self.final_layer = nn.Module()
        self.final_layer.norm = RMSNorm(config.pixel_hidden_size, **factory)
        self.final_layer.linear = ops.Linear(config.pixel_hidden_size, config.in_channels, bias=True, **factory)

    @classmethod
    def from_config(cls, config: PixelDiTConfig, **kwargs: Any) -> "PixelDiT":
        """The network `config` describes as this class (PiD's: `pid.build_network`)."""
        return cls(config, **kwargs)

    # positions (PiD's are NTK-aware)
    def rope_ref_grid(self) -> tuple[int, int] | None:
        return None

    def patch_positions(self, rows: int, cols: int, head_dim: int, options: Mapping[str, float],
                        device: Any, dtype: torch.dtype) -> torch.Tensor:
        return rope_2d(head_dim, rows, cols, ref_grid=self.rope_ref_grid(), device=device, **options).to(dtype)

    def pixel_embed(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, C, H, W]` -> `[B*L, P*P, pixel]`: each pixel projected plus its 2-D position, grouped by patch."""
        b, _, h, w = x.shape
        p, pd = self.patch_size, self.config.pixel_hidden_size
        tokens = self.pixel_embedder(x.permute(0, 2, 3, 1))  # [B, H, W, pd]
        tokens = tokens + sincos_2d(pd, h, w, device=x.device).to(tokens.dtype).view(1, h, w, pd)
        tokens = tokens.view(b, h // p, p, w // p, p, pd).permute(0, 1, 3, 2, 4, 5)
        return tokens.reshape(b * (h // p) * (w // p), p * p, pd)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target: ComfyUI's native and kohya spellings of every tensor."""
        from comfy_core.families.lora_keys import native_key_map

        return native_key_map(names)

    # hooks PiD fills in
    def prepare(self, x: torch.Tensor, rows: int, cols: int, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def before_patch_block(self, s: torch.Tensor, index: int, state: Mapping[str, Any]) -> torch.Tensor:
        return s

    def before_pixel_blocks(self, s: torch.Tensor, state: Mapping[str, Any]) -> torch.Tensor:
        return s

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, transformer_options: Mapping[str, Any] = {},
                **kwargs: Any) -> torch.Tensor:
        """x `[B, 3, H, W]` (pixels in -1..1, noised), timestep `[B]` (sigma x 1000), context
        `[B, Lt, txt_embed_dim]` (the first `txt_max_length` tokens read) -> the velocity
        `[B, 3, H, W]`. `attention_mask` is accepted and not applied, as in ComfyUI."""
        if context is None or context.dim() != 3:
            raise PixelDiTInputError("PixelDiT needs the text states as context [B, L, D]")
        h0, w0 = x.shape[-2:]
        p, dim = self.patch_size, self.hidden_size
        x = _pad_to_patch(x, p)
        b, _, h, w = x.shape
        rows, cols = h // p, w // p
        state = self.prepare(x, rows, cols, kwargs)
        options = rope_options(transformer_options)
        pos_img = self.patch_positions(rows, cols, dim // self.config.num_groups, options, x.device, x.dtype)
        t_emb = self.t_embedder(timestep.reshape(-1).to(x.device), x.dtype).view(b, 1, dim)  # [B, 1, D]
        n_txt = min(context.shape[1], self.config.txt_max_length)
        y = self.y_embedder(context[:, :n_txt].to(x.dtype))
        y = y + self.y_pos_embedding[:, :n_txt].to(y)
        pos_txt = None
        if self.config.use_text_rope:
            index = torch.arange(n_txt, dtype=torch.float32, device=x.device).reshape(1, -1)
            pos_txt = rope_frequencies(index, dim // self.config.num_groups, self.config.text_rope_theta)[0].to(x.dtype)
        condition = F.silu(t_emb)
        s = self.s_embedder(F.unfold(x, kernel_size=p, stride=p).transpose(1, 2))  # [B, L, D]
        for index, block in enumerate(self.patch_blocks):
            s = self.before_patch_block(s, index, state)
            s, y = block(s, y, condition, pos_img, pos_txt, transformer_options)
        s = self.before_pixel_blocks(F.silu(t_emb + s), state)
        s_cond = s.reshape(b * rows * cols, dim)
        pixels = self.pixel_embed(x)
        pixel_pos = self.patch_positions(rows, cols, self.config.pixel_attn_hidden_size // self.config.pixel_num_groups,
                                         options, x.device, x.dtype)
        for block in self.pixel_blocks:
            pixels = block(pixels, s_cond, b, pixel_pos, transformer_options)
        out = self.final_layer.linear(self.final_layer.norm(pixels))  # [B*L, P*P, C]
        c = self.out_channels
        out = out.view(b, rows * cols, p * p, c).permute(0, 3, 2, 1).reshape(b, c * p * p, rows * cols)
        return F.fold(out, (h, w), kernel_size=p, stride=p)[:, :, :h0, :w0]


__all__ = ["LQ_MARKER", "PiDConfig", "PixelDiT", "PixelDiTConfig", "PixelDiTConfigError",
           "PixelDiTInputError", "rope_2d", "sincos_2d", "split_pixel_adaln"]

"""The CogVideoX 3-D transformer (Yang et al. 2024, "CogVideoX: Text-to-Video Diffusion Models with
An Expert Transformer"), in ComfyUI's layout (`comfy/ldm/cogvideo/model.py`, whose behaviour this
follows; written here): an expert-adaLN DiT over `[text, video]` tokens in one joint attention.

- Patches: CogVideoX 1.0 (2B, 5B) embeds each latent frame by a `p x p` convolution
  (`patch_embed.proj` 4-D); CogVideoX 1.5 and the models built on it (CogVideoX-Fun V1.5, Netflix's
  VOID) by a linear layer over `p_t x p x p` patches (`patch_embed.proj` 2-D, p_t = p = 2, the only
  values released). `patch_embed.text_proj` takes the T5 states (4096 wide) into the width.
- Positions: the 2B model adds 3-D sin/cos embeddings to the video tokens (zeros on the text;
  temporal a third of the width, then rows and columns); the others rotate q / k of the video tokens
  only with 3-D interleaved-pair RoPE (t a quarter of the head, rows and columns 3/8 each, base
  10000): 1.0 with rows / columns at `i * spatial_interpolation_scale` (1.875), 1.5 at `i`
  (ComfyUI's "linspace" and "slice" modes).
- Blocks: one LayerNorm (eps 1e-5) modulated separately for the video and the text stream by
  `norm.linear(silu(t))` (shift, scale, gate x 2), q / k LayerNormed per head (eps 1e-6), one joint
  attention, a tanh-GELU MLP shared by both streams, gated residuals per stream.
- Time: the sinusoidal embedding of the DDPM timestep (sin / cos flipped) at the full width through
  a two-layer SiLU MLP; CogVideoX 1.5 I2V adds an `ofs` embedding the same way.
- Output: LayerNorm, the adaLN (shift, scale) of the time vector, a linear back to patches.

Widths, heads (the q-norm width is the head), depth, channels, the time width and the patch layout
are read from the weights; what they cannot show (the RoPE kind of 1.0: rotary unless the width is
the 2B's 1920, as the released models are) is written here.
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

WIDTH_2B = 1920  # the one released width with sin/cos positions instead of RoPE
SPATIAL_INTERPOLATION = 1.875
TEMPORAL_INTERPOLATION = 1.0


class CogVideoXConfigError(ValueError):
    """The CogVideoX weights are incomplete or inconsistent."""


class CogVideoXInputError(ValueError):
    """The inputs of a CogVideoX forward do not fit the network."""


@dataclass(frozen=True)
class CogVideoXConfig:
    """ComfyUI's CogVideoX `unet_config` entries that shape the network."""

    num_attention_heads: int = 30
    attention_head_dim: int = 64
    in_channels: int = 16
    out_channels: int = 16
    time_embed_dim: int = 512
    ofs_embed_dim: int | None = None
    text_embed_dim: int = 4096
    num_layers: int = 30
    patch_size: int = 2
    patch_size_t: int | None = None
    use_rotary_positional_embeddings: bool = False
    use_learned_positional_embeddings: bool = False
    patch_bias: bool = True
    max_text_seq_length: int = 226
    learned_positions: int = 0  # rows of the learned table (text + video), CogVideoX 1.0 I2V

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            metadata: Mapping[str, str] | None = None) -> "CogVideoXConfig":
        shape = shape_reader(tensors, prefix, CogVideoXConfigError, "CogVideoX")
        depth = count_numbered(tensors, prefix, "blocks", CogVideoXConfigError, "CogVideoX")
        if depth == 0:
            raise CogVideoXConfigError(f"CogVideoX: no {prefix}blocks.N found")
        inner, text_dim = shape("patch_embed.text_proj.weight")
        head_dim = shape("blocks.0.norm_q.weight")[0]
        if inner % head_dim:
            raise CogVideoXConfigError(f"CogVideoX: width {inner} is not a whole number of {head_dim}-wide heads")
        proj = shape("patch_embed.proj.weight")
        time_dim = shape("time_embedding_linear_1.weight")[0]
        out_rows = shape("proj_out.weight")[0]
        if len(proj) == 4:  # CogVideoX 1.0: a per-frame convolution
            patch, patch_t = proj[2], None
            in_channels = proj[1]
            out_channels = out_rows // (patch * patch)
        elif len(proj) == 2:  # CogVideoX 1.5: a linear layer over p_t x p x p patches (2 x 2 x 2 as released)
            patch, patch_t = 2, 2
            in_channels = proj[1] // (patch * patch * patch_t)
            out_channels = out_rows // (patch * patch * patch_t)
        else:
            raise CogVideoXConfigError(f"CogVideoX: patch_embed.proj has shape {proj}")
        if proj[0] != inner:
            raise CogVideoXConfigError(f"CogVideoX: patch_embed.proj makes {proj[0]} features, the width is {inner}")
        ofs = prefix + "ofs_embedding_linear_1.weight"
        ofs_dim = tuple(tensors[ofs].shape)[0] if ofs in tensors else None
        table = prefix + "patch_embed.pos_embedding"
        learned = table in tensors
        return cls(num_attention_heads=inner // head_dim, attention_head_dim=head_dim, in_channels=in_channels,
                   out_channels=out_channels, time_embed_dim=time_dim, ofs_embed_dim=ofs_dim,
                   text_embed_dim=text_dim, num_layers=depth, patch_size=patch, patch_size_t=patch_t,
                   use_rotary_positional_embeddings=inner != WIDTH_2B,
                   use_learned_positional_embeddings=learned,
                   learned_positions=tuple(tensors[table].shape)[1] if learned else 0,
                   patch_bias=prefix + "patch_embed.proj.bias" in tensors)

    def comfy_unet_config(self) -> dict[str, Any]:
        import dataclasses

        out = dataclasses.asdict(self)
        out["image_model"] = "cogvideox"
        return out


# --- positions and time ----------------------------------------------------------------------------------

def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """DDPM sinusoidal embedding `[B] -> [B, dim]`, cos half first (diffusers' flip_sin_to_cos, shift 0)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


def _sincos(dim: int, pos: torch.Tensor) -> torch.Tensor:
    """Positions `[M]` -> `[M, dim]`, cos half first (ComfyUI's order; diffusers' CogVideoX table
    puts sin first, splits the width 1/4 : 3/4 and columns before rows: ComfyUI's 2B positions
    are its own)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=pos.device) / half)
    args = pos.float().reshape(-1)[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


def sincos_3d(dim: int, frames: int, rows: int, cols: int, device: Any) -> torch.Tensor:
    """ComfyUI's 3-D sin/cos table `[frames*rows*cols, dim]`: a third of the width for time, then
    rows and columns a third each (positions divided by the interpolation scales)."""
    spatial, temporal = 2 * (dim // 3), dim // 3
    r = torch.arange(rows, dtype=torch.float32, device=device) / SPATIAL_INTERPOLATION
    c = torch.arange(cols, dtype=torch.float32, device=device) / SPATIAL_INTERPOLATION
    t = torch.arange(frames, dtype=torch.float32, device=device) / TEMPORAL_INTERPOLATION
    rr, cc = torch.meshgrid(r, c, indexing="ij")
    space = torch.cat([_sincos(spatial // 2, rr), _sincos(spatial // 2, cc)], dim=-1)  # [rows*cols, spatial]
    time = _sincos(temporal, t)  # [frames, temporal]
    table = torch.cat([time[:, None].expand(-1, rows * cols, -1), space[None].expand(frames, -1, -1)], dim=-1)
    return table.reshape(-1, temporal + spatial)


def _rope_axis(dim: int, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32, device=pos.device) / dim))
    angles = torch.outer(pos.float(), freqs)  # [n, dim/2]
    return angles.cos().repeat_interleave(2, -1), angles.sin().repeat_interleave(2, -1)


def rope_3d(head_dim: int, frames: int, rows: int, cols: int, scale: float,
            device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Interleaved-pair RoPE tables `(cos, sin)`, each `[frames*rows*cols, head_dim]`: time on a
    quarter of the head, rows and columns on 3/8 each; spatial positions `i * scale`."""
    dt, ds = head_dim // 4, head_dim // 8 * 3
    t = _rope_axis(dt, torch.arange(frames, device=device, dtype=torch.float32))
    r = _rope_axis(ds, torch.arange(rows, device=device, dtype=torch.float32) * scale)
    c = _rope_axis(ds, torch.arange(cols, device=device, dtype=torch.float32) * scale)
    out = []
    for k in range(2):  # cos, then sin
        table = torch.cat([t[k][:, None, None].expand(-1, rows, cols, -1),
                           r[k][None, :, None].expand(frames, -1, cols, -1),
                           c[k][None, None, :].expand(frames, rows, -1, -1)], dim=-1)
        out.append(table.reshape(frames * rows * cols, -1))
    return out[0], out[1]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x `[B, N, H, D]` rotated in (even, odd) pairs by the tables `[N, D]` (computed in fp32)."""
    real, imag = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    rotated = torch.stack([-imag, real], dim=-1).flatten(-2)
    return (x.float() * cos[None, :, None] + rotated * sin[None, :, None]).to(x.dtype)


# --- blocks ---------------------------------------------------------------------------------------------

class ExpertNorm(nn.Module):
    """One LayerNorm, modulated per stream: `linear(silu(t))` = shift, scale, gate for the video,
    then for the text."""

    def __init__(self, time_dim: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear = ops.Linear(time_dim, 6 * dim, **factory)
        self.norm = ops.LayerNorm(dim, eps=1e-5, elementwise_affine=True, **factory)

    def forward(self, x: torch.Tensor, txt: torch.Tensor, temb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        shift, scale, gate, t_shift, t_scale, t_gate = self.linear(F.silu(temb)).chunk(6, dim=1)
        x = self.norm(x) * (1 + scale[:, None]) + shift[:, None]
        txt = self.norm(txt) * (1 + t_scale[:, None]) + t_shift[:, None]
        return x, txt, gate[:, None], t_gate[:, None]


class OutputNorm(nn.Module):
    def __init__(self, time_dim: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear = ops.Linear(time_dim, 2 * dim, **factory)
        self.norm = ops.LayerNorm(dim, eps=1e-5, elementwise_affine=True, **factory)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        shift, scale = self.linear(F.silu(temb)).chunk(2, dim=1)
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None]


class CogVideoXBlock(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int, time_dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.norm1 = ExpertNorm(time_dim, dim, ops, factory)
        self.q = ops.Linear(dim, dim, **factory)
        self.k = ops.Linear(dim, dim, **factory)
        self.v = ops.Linear(dim, dim, **factory)
        self.norm_q = ops.LayerNorm(head_dim, eps=1e-6, elementwise_affine=True, **factory)
        self.norm_k = ops.LayerNorm(head_dim, eps=1e-6, elementwise_affine=True, **factory)
        self.attn_out = ops.Linear(dim, dim, **factory)
        self.norm2 = ExpertNorm(time_dim, dim, ops, factory)
        self.ff_proj = ops.Linear(dim, 4 * dim, **factory)
        self.ff_out = ops.Linear(4 * dim, dim, **factory)

    def forward(self, x: torch.Tensor, txt: torch.Tensor, temb: torch.Tensor, rope: tuple | None,
                options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        n_txt = txt.shape[1]
        nx, nt, gate, t_gate = self.norm1(x, txt, temb)
        joint = torch.cat([nt, nx], dim=1)  # [B, L, dim], text first
        b, length, _ = joint.shape
        q = self.norm_q(self.q(joint).view(b, length, self.heads, self.head_dim))
        k = self.norm_k(self.k(joint).view(b, length, self.heads, self.head_dim))
        v = self.v(joint)
        if rope is not None:  # the video tokens only
            q = torch.cat([q[:, :n_txt], apply_rope(q[:, n_txt:], *rope)], dim=1)
            k = torch.cat([k[:, :n_txt], apply_rope(k[:, n_txt:], *rope)], dim=1)
        out = self.attn_out(calling.attend(q.flatten(2), k.flatten(2), v, self.heads, transformer_options=options))
        x = x + gate * out[:, n_txt:]
        txt = txt + t_gate * out[:, :n_txt]
        nx, nt, gate, t_gate = self.norm2(x, txt, temb)
        ff = self.ff_out(F.gelu(self.ff_proj(torch.cat([nt, nx], dim=1)), approximate="tanh"))
        return x + gate * ff[:, n_txt:], txt + t_gate * ff[:, :n_txt]


class CogVideoXTransformer(nn.Module):
    """`forward(x [B, C, T, H, W], timestep [B] (DDPM timesteps), context [B, L, 4096], ofs=None)`
    -> the prediction `[B, out_channels, T, H, W]`; ComfyUI's `CogVideoXTransformer3DModel`."""

    def __init__(self, config: CogVideoXConfig, operations: Any = None, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config, self.dtype = config, dtype
        dim = config.inner_dim
        self.in_channels, self.out_channels = config.in_channels, config.out_channels
        self.patch_size, self.patch_size_t = config.patch_size, config.patch_size_t
        self.patch_embed = nn.Module()
        p, pt = config.patch_size, config.patch_size_t
        if pt is None:
            self.patch_embed.proj = ops.Conv2d(config.in_channels, dim, kernel_size=p, stride=p,
                                               bias=config.patch_bias, **factory)
        else:
            self.patch_embed.proj = ops.Linear(config.in_channels * p * p * pt, dim, bias=config.patch_bias, **factory)
        self.patch_embed.text_proj = ops.Linear(config.text_embed_dim, dim, **factory)
        if config.use_learned_positional_embeddings:  # CogVideoX 1.0 I2V: the video rows of the file's table
            self.patch_embed.register_buffer("pos_embedding", torch.zeros(1, config.learned_positions, dim, **factory))
        self.time_embedding_linear_1 = ops.Linear(dim, config.time_embed_dim, **factory)
        self.time_embedding_linear_2 = ops.Linear(config.time_embed_dim, config.time_embed_dim, **factory)
        self.ofs_proj_dim = config.ofs_embed_dim
        if config.ofs_embed_dim:
            self.ofs_embedding_linear_1 = ops.Linear(config.ofs_embed_dim, config.ofs_embed_dim, **factory)
            self.ofs_embedding_linear_2 = ops.Linear(config.ofs_embed_dim, config.ofs_embed_dim, **factory)
        self.blocks = nn.ModuleList([CogVideoXBlock(dim, config.num_attention_heads, config.attention_head_dim,
                                                    config.time_embed_dim, ops, factory)
                                     for _ in range(config.num_layers)])
        self.norm_final = ops.LayerNorm(dim, eps=1e-5, elementwise_affine=True, **factory)
        self.norm_out = OutputNorm(config.time_embed_dim, dim, ops, factory)
        self.proj_out = ops.Linear(dim, p * p * (pt or 1) * config.out_channels, **factory)

    def _patchify(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, T, C, H, W]` -> video tokens `[B, N, dim]` (frame, row, column order)."""
        b, t, c, h, w = x.shape
        p = self.patch_size
        if self.patch_size_t is None:
            y = self.patch_embed.proj(x.reshape(b * t, c, h, w))  # [B*T, dim, h/p, w/p]
            return y.view(b, t, y.shape[1], -1).transpose(2, 3).flatten(1, 2)
        pt = self.patch_size_t
        y = x.permute(0, 1, 3, 4, 2).reshape(b, t // pt, pt, h // p, p, w // p, p, c)
        y = y.permute(0, 1, 3, 5, 7, 2, 4, 6).flatten(4, 7).flatten(1, 3)  # features (c, pt, p, p)
        return self.patch_embed.proj(y)

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor, ofs: Any = None,
                transformer_options: dict[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        options = transformer_options if transformer_options is not None else {}
        if x.ndim != 5 or x.shape[1] != self.in_channels:
            raise CogVideoXInputError(f"CogVideoX: expected a latent [B, {self.in_channels}, T, H, W], "
                                      f"got {tuple(x.shape)}")
        from comfy_core.families.sd3.mmdit_blocks import pad_to_patch_size

        _, _, t0, h0, w0 = x.shape
        p, pt = self.patch_size, self.patch_size_t
        x = pad_to_patch_size(x, (pt or 1, p, p)).permute(0, 2, 1, 3, 4)  # [B, T, C, H, W]
        b, t, _, h, w = x.shape
        temb = timestep_embedding(timestep.reshape(-1), self.config.inner_dim).to(x.dtype)
        emb = self.time_embedding_linear_2(F.silu(self.time_embedding_linear_1(temb)))
        if self.ofs_proj_dim and ofs is not None:
            ofs = torch.as_tensor(ofs, device=x.device).reshape(-1)
            o = timestep_embedding(ofs, self.ofs_proj_dim).to(x.dtype)
            emb = emb + self.ofs_embedding_linear_2(F.silu(self.ofs_embedding_linear_1(o)))
        txt = self.patch_embed.text_proj(context.to(x.dtype))
        video = self._patchify(x)
        frames, rows, cols = t // (pt or 1), h // p, w // p
        rope = None
        if self.config.use_rotary_positional_embeddings:
            scale = 1.0 if pt is not None else SPATIAL_INTERPOLATION
            rope = rope_3d(self.config.attention_head_dim, frames, rows, cols, scale, x.device)
        if self.config.use_learned_positional_embeddings:  # added even beside RoPE, as ComfyUI does
            start = self.config.max_text_seq_length
            table = self.patch_embed.pos_embedding[:, start:start + video.shape[1]]
            if table.shape[1] != video.shape[1]:
                raise CogVideoXInputError(f"CogVideoX: the learned position table covers {table.shape[1]} video "
                                          f"tokens, the latent makes {video.shape[1]}")
            video = video + table.to(device=video.device, dtype=video.dtype)
        elif not self.config.use_rotary_positional_embeddings:
            video = video + sincos_3d(self.config.inner_dim, frames, rows, cols, x.device).to(video.dtype)[None]
        for block in self.blocks:
            video, txt = block(video, txt, emb, rope, options)
        video = self.proj_out(self.norm_out(self.norm_final(video), emb))
        if pt is None:
            out = video.reshape(b, t, rows, cols, -1, p, p).permute(0, 1, 4, 2, 5, 3, 6).flatten(5, 6).flatten(3, 4)
        else:
            out = video.reshape(b, frames, rows, cols, -1, pt, p, p)
            out = out.permute(0, 1, 5, 4, 2, 6, 3, 7).flatten(6, 7).flatten(4, 5).flatten(1, 2)
        return out.permute(0, 2, 1, 3, 4)[:, :, :t0, :h0, :w0]

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        from comfy_core.families.cogvideox.keys import lora_key_map

        return lora_key_map(names)

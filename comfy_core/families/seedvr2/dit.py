"""SeedVR2's NaDiT (ByteDance-Seed/SeedVR, "SeedVR2: One-Step Video Restoration via Diffusion
Adversarial Post-Training", Wang et al. 2025), as today's ComfyUI runs it (comfy/ldm/seedvr/model.py).

A dual-stream (MM-DiT) transformer over the video tokens and a fixed text embedding, with
window attention instead of full attention:

- input: the noisy latent (16 channels) concatenated with the condition (the input video's latent
  plus a ones mask, 17 channels), patchified 1 x 2 x 2 and projected (`vid_in.proj`); the text
  (the positive / negative embedding the file carries, 5120 wide) projected by `txt_in`;
- time: a 256-wide sinusoidal embedding ([sin, cos], no shift) through three linears with SiLU,
  giving 6 x width of modulation shared by every block ("AdaSingle": each block adds its own
  learnt shift / scale / gate vectors to the shared ones);
- blocks: affine-free RMS norm, modulation, attention, gate, residual; the same for the MLP. The
  first `mm_layers` blocks have separate video / text weights (`.vid.` / `.txt.`), the rest one
  shared set (`.all.`). Attention is over windows of the latent grid, alternately regular and
  shifted by half a window (Swin, Liu et al. 2021), sized for a 720p frame
  (`window_slices`): each window's video tokens attend jointly with the whole text, whose outputs
  are averaged over the windows;
- position: the 3B's multimodal 3-axis RoPE (text token i at (i, i, i), a window's video token at
  (text length + t, h, w) in window coordinates, RoFormer frequencies base 10000) on q / k of both
  streams; the 7B's "pixel" RoPE (positions spread over -1..1 per window axis, frequencies
  1..128 x pi) on the video q / k only. Either rotates the first 3 x (rope_dim // 3) channels of a
  head, pairwise interleaved;
- output: the 3B an RMS norm and the "out" modulation before `vid_out.proj`, the 7B the projection
  alone; unpatchified to 16 channels.

Variants by structure: a SwiGLU MLP (`proj_in_gate`) with the output norm is the 3B layout, a
GELU(tanh) MLP with biases the 7B's (ComfyUI tells them by width 3072). Every width, depth, head
count and the dual-stream depth come from the weights.

Each batch row is run on its own (the windows and the text differ per row), its context the row's
own (ComfyUI pairs the cond / uncond halves crosswise and swaps the outputs back, which is the
same whenever both halves hold the same noisy latent, as in every sampler).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

PATCH = (1, 2, 2)
SINUSOIDAL_DIM = 256
WINDOW_GRID = (4, 3, 3)  # windows per (t, h, w) at the 720p reference size
REFERENCE_AREA = 45 * 80  # a 720p frame's latent patches (720/16 x 1280/16)
MAX_TEMPORAL_WINDOW = 30
ROPE_THETA = 10000.0
PIXEL_ROPE_MAX_FREQ = 256.0
NORM_EPS = 1e-5
POSITIVE_TOKENS = 58
NEGATIVE_TOKENS = 64


class SeedVR2ConfigError(ValueError):
    """Weights that are not a SeedVR2 NaDiT, or an input the network cannot take."""


@dataclass(frozen=True)
class SeedVR2Config:
    vid_dim: int = 2560
    txt_in_dim: int = 5120
    in_channels: int = 33
    out_channels: int = 16
    heads: int = 20
    head_dim: int = 128
    num_layers: int = 32
    mm_layers: int = 10
    mlp_type: str = "swiglu"  # "swiglu" (3B) or "normal" (7B)
    mlp_hidden: int = 6912
    vid_out_norm: bool = True
    rope_dim: int = 128
    positive_tokens: int = POSITIVE_TOKENS
    negative_tokens: int = NEGATIVE_TOKENS

    @property
    def variant(self) -> str:
        """"3b": multimodal RoPE on both streams, last block video-only; "7b": pixel RoPE on the video."""
        return "3b" if self.mlp_type == "swiglu" else "7b"

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "SeedVR2Config":
        def shape(name: str) -> tuple[int, ...]:
            if prefix + name not in tensors:
                raise SeedVR2ConfigError(f"SeedVR2: no {prefix}{name}")
            return tuple(tensors[prefix + name].shape)

        vid_dim, patch_in = shape("vid_in.proj.weight")
        txt = shape("txt_in.weight")
        layers = 0
        while (f"{prefix}blocks.{layers}.attn.proj_qkv.vid.weight" in tensors
               or f"{prefix}blocks.{layers}.attn.proj_qkv.all.weight" in tensors):
            layers += 1
        if layers == 0:
            raise SeedVR2ConfigError("SeedVR2: no transformer blocks (blocks.0.attn.proj_qkv.*)")
        mm = 0
        while mm < layers and f"{prefix}blocks.{mm}.attn.proj_qkv.vid.weight" in tensors:
            mm += 1
        branch = "vid" if mm > 0 else "all"
        head_dim = shape(f"blocks.0.attn.norm_q.{branch}.weight")[0]
        qkv = shape(f"blocks.0.attn.proj_qkv.{branch}.weight")[0]
        if qkv % (3 * head_dim):
            raise SeedVR2ConfigError(f"SeedVR2: q/k/v width {qkv} is not 3 x heads x {head_dim}")
        swiglu = f"{prefix}blocks.0.mlp.{branch}.proj_in_gate.weight" in tensors
        hidden = shape(f"blocks.0.mlp.{branch}.proj_in.weight")[0]
        out = shape("vid_out.proj.weight")[0]
        per_patch = PATCH[0] * PATCH[1] * PATCH[2]
        positive = tuple(tensors[prefix + "positive_conditioning"].shape) if prefix + "positive_conditioning" in tensors else (POSITIVE_TOKENS,)
        negative = tuple(tensors[prefix + "negative_conditioning"].shape) if prefix + "negative_conditioning" in tensors else (NEGATIVE_TOKENS,)
        return cls(vid_dim=vid_dim, txt_in_dim=txt[1], in_channels=patch_in // per_patch, out_channels=out // per_patch,
                   heads=qkv // (3 * head_dim), head_dim=head_dim, num_layers=layers, mm_layers=mm,
                   mlp_type="swiglu" if swiglu else "normal", mlp_hidden=hidden,
                   vid_out_norm=f"{prefix}vid_out_norm.weight" in tensors, rope_dim=head_dim,
                   positive_tokens=positive[0], negative_tokens=negative[0])

    def facts(self) -> dict[str, Any]:
        facts = asdict(self)
        facts["image_model"] = "seedvr2"
        facts["variant"] = self.variant
        return facts

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` of the detected network (`image_model` "seedvr2")."""
        return {"image_model": "seedvr2", "vid_dim": self.vid_dim, "heads": self.heads, "head_dim": self.head_dim,
                "num_layers": self.num_layers, "mm_layers": self.mm_layers, "mlp_type": self.mlp_type,
                "vid_in_channels": self.in_channels, "vid_out_channels": self.out_channels,
                "txt_in_dim": self.txt_in_dim, "norm_eps": NORM_EPS, "rope_dim": self.rope_dim,
                "vid_out_norm": "fusedrms" if self.vid_out_norm else None}


# --- windows ------------------------------------------------------------------------------------

def window_slices(size: tuple[int, int, int], shifted: bool,
                  grid: tuple[int, int, int] = WINDOW_GRID) -> list[tuple[slice, slice, slice]]:
    """The attention windows of a (t, h, w) patch grid, after ByteDance's `720pwin_by_size_bysize`
    (and the shifted `720pswin`): the window size is the grid's share of a 720p-area frame
    (`grid` windows per axis there, at most 30 frames deep); a shifted tiling starts half a window
    early on each axis the window does not cover, so border windows are partial. Every cell lies
    in exactly one window."""
    t, h, w = size
    scale = math.sqrt(REFERENCE_AREA / (h * w))
    win_h = math.ceil(round(h * scale) / grid[1])
    win_w = math.ceil(round(w * scale) / grid[2])
    win_t = math.ceil(min(t, MAX_TEMPORAL_WINDOW) / grid[0])

    def axis(length: int, win: int) -> list[slice]:
        if not shifted:
            return [slice(i * win, min((i + 1) * win, length)) for i in range(math.ceil(length / win))
                    if min((i + 1) * win, length) > i * win]
        offset = 0.5 if win < length else 0.0
        count = math.ceil((length - offset) / win) + 1 if offset > 0 else 1
        out = []
        for i in range(count):
            start, stop = max(int((i - offset) * win), 0), min(int((i - offset + 1) * win), length)
            if stop > start:
                out.append(slice(start, stop))
        return out

    # ByteDance's order: width outermost, then height, then time.
    return [(st, sh, sw) for sw in axis(w, win_w) for sh in axis(h, win_h) for st in axis(t, win_t)]


# --- rotary embeddings --------------------------------------------------------------------------

def _rotate_interleaved(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (x[2i], x[2i+1]) of the first 2 x angles.shape[-1] channels by `angles`
    (x `[N, heads, d]`, angles `[N, r]`), the rest unchanged; computed in float32."""
    rot = 2 * angles.shape[-1]
    head = x[..., :rot].float().unflatten(-1, (-1, 2))  # [N, H, r, 2]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    a, b = head[..., 0], head[..., 1]
    rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    return torch.cat((rotated.to(x.dtype), x[..., rot:]), dim=-1)


def lang_frequencies(axis_dim: int, device: Any = None) -> torch.Tensor:
    """RoFormer's frequencies for one axis of `axis_dim` channels: base^(-2i / axis_dim)."""
    return 1.0 / (ROPE_THETA ** (torch.arange(0, axis_dim, 2, device=device)[:axis_dim // 2].float() / axis_dim))


def pixel_frequencies(axis_dim: int, device: Any = None) -> torch.Tensor:
    """The "pixel" RoPE's frequencies: evenly from 1 to max_freq / 2, times pi."""
    return torch.linspace(1.0, PIXEL_ROPE_MAX_FREQ / 2, axis_dim // 2, device=device) * math.pi


def mm_rope_angles(window: tuple[int, int, int], text_len: int, axis_dim: int,
                   device: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The 3B's multimodal RoPE: (video angles `[t*h*w, 3*axis_dim/2]`, text angles `[L, same]`).
    A video cell (t, h, w) of the window sits at (L + t, h, w), text token i at (i, i, i)."""
    freqs = lang_frequencies(axis_dim, device)
    t, h, w = window
    pos_t = torch.arange(text_len, text_len + t, device=device, dtype=torch.float32)
    grid = torch.meshgrid(pos_t, torch.arange(h, device=device, dtype=torch.float32),
                          torch.arange(w, device=device, dtype=torch.float32), indexing="ij")
    video = torch.cat([g.reshape(-1, 1) * freqs for g in grid], dim=-1)
    text_pos = torch.arange(text_len, device=device, dtype=torch.float32)[:, None] * freqs
    return video, text_pos.repeat(1, 3)


def pixel_rope_angles(window: tuple[int, int, int], axis_dim: int, device: Any = None) -> torch.Tensor:
    """The 7B's RoPE: each window axis of n cells at n positions evenly over -1..1."""
    freqs = pixel_frequencies(axis_dim, device)
    axes = [torch.linspace(-1.0, 1.0, n, device=device) for n in window]
    grid = torch.meshgrid(*axes, indexing="ij")
    return torch.cat([g.reshape(-1, 1) * freqs for g in grid], dim=-1)


# --- layers -------------------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = NORM_EPS) -> torch.Tensor:
    """RMS norm over the last axis, in float32, returned in x's dtype."""
    y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(x.dtype)


class _Norm(nn.Module):
    def __init__(self, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight)


class _Ada(nn.Module):
    """A branch's own shift / scale / gate per layer, added to the shared modulation."""

    def __init__(self, dim: int, layers: tuple[str, ...], gates: bool, factory: dict[str, Any]) -> None:
        super().__init__()
        for layer in layers:
            setattr(self, f"{layer}_shift", nn.Parameter(torch.empty(dim, **factory)))
            setattr(self, f"{layer}_scale", nn.Parameter(torch.empty(dim, **factory)))
            if gates:
                setattr(self, f"{layer}_gate", nn.Parameter(torch.empty(dim, **factory)))

    def modulate(self, x: torch.Tensor, shared: torch.Tensor, layer: str) -> torch.Tensor:
        """x `[N, D]`, shared (shift, scale, gate) `[D, 3]`: x (scale_A + scale_B) + shift_A + shift_B."""
        shift = shared[:, 0] + getattr(self, f"{layer}_shift").to(shared.dtype)
        scale = shared[:, 1] + getattr(self, f"{layer}_scale").to(shared.dtype)
        return (x * scale.to(x.dtype) + shift.to(x.dtype))

    def gate(self, x: torch.Tensor, shared: torch.Tensor, layer: str) -> torch.Tensor:
        return x * (shared[:, 2] + getattr(self, f"{layer}_gate").to(shared.dtype)).to(x.dtype)


class _Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, swiglu: bool, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.swiglu = swiglu
        self.proj_in = ops.Linear(dim, hidden, bias=not swiglu, **factory)
        if swiglu:
            self.proj_in_gate = ops.Linear(dim, hidden, bias=False, **factory)
        self.proj_out = ops.Linear(hidden, dim, bias=not swiglu, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.proj_out(F.silu(self.proj_in_gate(x)) * self.proj_in(x))
        return self.proj_out(F.gelu(self.proj_in(x), approximate="tanh"))


class _Branches(nn.Module):
    """ComfyUI's MMModule: `vid` / `txt` modules, or one `all` module shared by both."""

    def __init__(self, make: Any, shared: bool, vid_only: bool = False) -> None:
        super().__init__()
        self.shared = shared
        self.vid_only = vid_only
        if shared:
            self.all = make()
        else:
            self.vid = make()
            if not vid_only:
                self.txt = make()

    def video(self) -> nn.Module:
        return self.all if self.shared else self.vid

    def text(self) -> nn.Module:
        return self.all if self.shared else self.txt


class _Attention(nn.Module):
    def __init__(self, config: SeedVR2Config, shared: bool, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim, inner = config.vid_dim, config.heads * config.head_dim
        self.heads, self.head_dim = config.heads, config.head_dim
        self.proj_qkv = _Branches(lambda: ops.Linear(dim, 3 * inner, bias=False, **factory), shared)
        self.proj_out = _Branches(lambda: ops.Linear(inner, dim, bias=True, **factory), shared)
        self.norm_q = _Branches(lambda: _Norm(config.head_dim, factory), shared)
        self.norm_k = _Branches(lambda: _Norm(config.head_dim, factory), shared)


class _Block(nn.Module):
    def __init__(self, config: SeedVR2Config, index: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        shared = index >= config.mm_layers
        self.shifted = index % 2 == 1
        self.variant = config.variant
        self.vid_only_mlp = config.variant == "3b" and index == config.num_layers - 1
        dim = config.vid_dim
        self.attn = _Attention(config, shared, ops, factory)
        self.mlp = _Branches(lambda: _Mlp(dim, config.mlp_hidden, config.mlp_type == "swiglu", ops, factory),
                             shared, self.vid_only_mlp)
        self.ada = _Branches(lambda: _Ada(dim, ("attn", "mlp"), True, factory), shared, self.vid_only_mlp)
        self.rope_axis = config.rope_dim // 3

    def _attention(self, vid: torch.Tensor, txt: torch.Tensor, grid: tuple[int, int, int],
                   transformer_options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """vid `[t*h*w, D]` (grid order), txt `[L, D]` -> both after window attention and proj_out."""
        attn = self.attn
        heads, hd = attn.heads, attn.head_dim
        vq, vk, vv = attn.proj_qkv.video()(vid).view(-1, 3, heads, hd).unbind(1)  # [N, H, hd] each
        tq, tk, tv = attn.proj_qkv.text()(txt).view(-1, 3, heads, hd).unbind(1)
        vq, tq = attn.norm_q.video()(vq), attn.norm_q.text()(tq)
        vk, tk = attn.norm_k.video()(vk), attn.norm_k.text()(tk)
        t, h, w = grid
        cells = torch.arange(t * h * w, device=vid.device).view(t, h, w)
        vid_out = torch.empty_like(vq)
        text_sum = torch.zeros_like(tq, dtype=torch.float32)
        windows = window_slices(grid, self.shifted)
        length = txt.shape[0]
        for st, sh, sw in windows:
            index = cells[st, sh, sw].reshape(-1)
            shape = (st.stop - st.start, sh.stop - sh.start, sw.stop - sw.start)
            q, k = vq[index], vk[index]
            wq, wk = tq, tk
            if self.variant == "3b":
                video_angles, text_angles = mm_rope_angles(shape, length, self.rope_axis, vid.device)
                q, k = _rotate_interleaved(q, video_angles), _rotate_interleaved(k, video_angles)
                wq, wk = _rotate_interleaved(tq, text_angles), _rotate_interleaved(tk, text_angles)
            else:
                angles = pixel_rope_angles(shape, self.rope_axis, vid.device)
                q, k = _rotate_interleaved(q, angles), _rotate_interleaved(k, angles)
            qq = torch.cat((q, wq)).transpose(0, 1)  # [H, n + L, hd]
            kk = torch.cat((k, wk)).transpose(0, 1)
            vv_ = torch.cat((vv[index], tv)).transpose(0, 1)
            out = F.scaled_dot_product_attention(qq[None], kk[None], vv_[None])[0].transpose(0, 1)  # [n + L, H, hd]
            vid_out[index] = out[:index.numel()]
            text_sum += out[index.numel():].float()
        txt_out = (text_sum / len(windows)).to(tq.dtype)
        return (attn.proj_out.video()(vid_out.flatten(1)), attn.proj_out.text()(txt_out.flatten(1)))

    def forward(self, vid: torch.Tensor, txt: torch.Tensor, emb: torch.Tensor, grid: tuple[int, int, int],
                transformer_options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """vid `[N, D]`, txt `[L, D]`, emb `[D, 2, 3]` (the shared (shift, scale, gate) per layer)."""
        attn_mod, mlp_mod = emb[:, 0], emb[:, 1]
        # The 3B's last block modulates (and runs the MLP of) the video stream only.
        ada_v, ada_t = self.ada.video(), (None if self.vid_only_mlp else self.ada.text())
        v = ada_v.modulate(rms_norm(vid), attn_mod, "attn")
        t = ada_t.modulate(rms_norm(txt), attn_mod, "attn") if ada_t is not None else rms_norm(txt)
        v, t = self._attention(v, t, grid, transformer_options)
        vid = vid + ada_v.gate(v, attn_mod, "attn")
        txt = txt + (ada_t.gate(t, attn_mod, "attn") if ada_t is not None else t)
        v = self.mlp.video()(ada_v.modulate(rms_norm(vid), mlp_mod, "mlp"))
        vid = vid + ada_v.gate(v, mlp_mod, "mlp")
        if not self.vid_only_mlp:
            t = self.mlp.text()(ada_t.modulate(rms_norm(txt), mlp_mod, "mlp"))
            txt = txt + ada_t.gate(t, mlp_mod, "mlp")
        return vid, txt


class _Projection(nn.Module):
    """`vid_in` / `vid_out`: one linear named `proj`."""

    def __init__(self, features_in: int, features_out: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.proj = ops.Linear(features_in, features_out, **factory)


class _TimeEmbedding(nn.Module):
    def __init__(self, dim: int, out: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.proj_in = ops.Linear(SINUSOIDAL_DIM, dim, **factory)
        self.proj_hid = ops.Linear(dim, dim, **factory)
        self.proj_out = ops.Linear(dim, out, **factory)

    def forward(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        emb = sinusoidal_embedding(t).to(dtype)
        return self.proj_out(F.silu(self.proj_hid(F.silu(self.proj_in(emb)))))


def sinusoidal_embedding(t: torch.Tensor, dim: int = SINUSOIDAL_DIM) -> torch.Tensor:
    """[sin(t f_i), cos(t f_i)] with f_i = 10000^(-i / (dim / 2)) (no frequency shift, sine first)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat((args.sin(), args.cos()), dim=-1)


class SeedVR2DiT(nn.Module):
    """The NaDiT of a `SeedVR2Config` under ComfyUI's names (see the module docstring)."""

    def __init__(self, config: SeedVR2Config, operations: Any = None, device: Any = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        ops = operations if operations is not None else nn
        factory = {"device": device, "dtype": dtype}
        self.config = config
        dim = config.vid_dim
        self.register_buffer("positive_conditioning", torch.empty(config.positive_tokens, config.txt_in_dim, **factory))
        self.register_buffer("negative_conditioning", torch.empty(config.negative_tokens, config.txt_in_dim, **factory))
        per_patch = PATCH[0] * PATCH[1] * PATCH[2]
        self.vid_in = _Projection(config.in_channels * per_patch, dim, ops, factory)
        self.txt_in = ops.Linear(config.txt_in_dim, dim, **factory)
        self.emb_in = _TimeEmbedding(dim, 6 * dim, ops, factory)
        self.blocks = nn.ModuleList([_Block(config, i, ops, factory) for i in range(config.num_layers)])
        if config.vid_out_norm:
            self.vid_out_norm = _Norm(dim, factory)
            self.vid_out_ada = _Ada(dim, ("out",), False, factory)
        self.vid_out = _Projection(dim, config.out_channels * per_patch, ops, factory)

    @property
    def lora_key_map(self) -> Any:
        from comfy_core.families.seedvr2.keys import lora_key_map

        return lora_key_map

    def _row(self, x: torch.Tensor, condition: torch.Tensor, t: torch.Tensor, context: torch.Tensor,
             transformer_options: dict[str, Any]) -> torch.Tensor:
        """x `[16, T, H, W]`, condition `[17, T, H, W]`, t `[1]`, context `[L, 5120]` -> `[16, T, H, W]`."""
        config = self.config
        c, frames, height, width = x.shape
        if height % PATCH[1] or width % PATCH[2]:
            raise SeedVR2ConfigError(f"SeedVR2: latent {width}x{height} is not a multiple of the 2x2 patch")
        vid = torch.cat((x, condition.to(x.dtype)), dim=0).permute(1, 2, 3, 0)  # [T, H, W, 33]
        gh, gw = height // PATCH[1], width // PATCH[2]
        vid = vid.reshape(frames, gh, PATCH[1], gw, PATCH[2], -1).permute(0, 1, 3, 2, 4, 5)
        vid = self.vid_in.proj(vid.reshape(frames * gh * gw, -1))  # [N, D], features (ph, pw, c)
        txt = self.txt_in(context.to(vid.dtype))
        emb = self.emb_in(t, vid.dtype)[0]  # [6D]
        shared = emb.view(config.vid_dim, 2, 3)
        grid = (frames, gh, gw)
        for block in self.blocks:
            vid, txt = block(vid, txt, shared, grid, transformer_options)
        if config.vid_out_norm:
            # The output modulation reads the first 3D values of the embedding as (shift, scale, -) per channel.
            out_mod = emb[:3 * config.vid_dim].view(config.vid_dim, 3)
            vid = self.vid_out_ada.modulate(self.vid_out_norm(vid), out_mod, "out")
        vid = self.vid_out.proj(vid)  # [N, 4 * 16]
        vid = vid.view(frames, gh, gw, PATCH[1], PATCH[2], -1).permute(5, 0, 1, 3, 2, 4)
        return vid.reshape(-1, frames, height, width)

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor | None = None,
                condition: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None,
                **kwargs: Any) -> torch.Tensor:
        """x `[B, 16, T, h, w]`, timesteps `[B]` (sigma x 1000), context `[B, L, 5120]` (None: the
        positive embedding), condition `[B, 17, T, h, w]` -> the velocity `[B, 16, T, h, w]`."""
        if condition is None:
            raise SeedVR2ConfigError("SeedVR2 needs the condition latent: use SeedVR2Conditioning's output")
        if x.ndim != 5 or x.shape[1] != self.config.out_channels:
            raise SeedVR2ConfigError(f"SeedVR2: expected a latent [B, {self.config.out_channels}, T, h, w], got "
                                     f"{tuple(x.shape)}")
        expected = self.config.in_channels - x.shape[1]
        if condition.ndim != 5 or condition.shape[1] != expected or condition.shape[2:] != x.shape[2:]:
            raise SeedVR2ConfigError(f"SeedVR2: the condition must be [B, {expected}, {', '.join(map(str, x.shape[2:]))}]"
                                     f", got {tuple(condition.shape)}")
        options = transformer_options or {}
        rows = []
        for b in range(x.shape[0]):
            ctx = self.positive_conditioning if context is None or context.numel() == 0 else context[b % context.shape[0]]
            cond = condition[b % condition.shape[0]]
            rows.append(self._row(x[b], cond, timesteps.reshape(-1)[b % timesteps.numel()].reshape(1), ctx, options))
        return torch.stack(rows)


__all__ = ["SeedVR2Config", "SeedVR2ConfigError", "SeedVR2DiT", "mm_rope_angles", "pixel_rope_angles",
           "rms_norm", "sinusoidal_embedding", "window_slices"]

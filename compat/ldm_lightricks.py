"""ComfyUI's `comfy.ldm.lightricks` functions and patchifier in its shapes, over our LTX-Video
network (comfy_core/families/ltxv/dit.py) and VAE (comfy_core/models/ltxv_vae.py), for node packs
(ComfyUI-LTXVideo, KJNodes) that call them: ComfyUI 0.3.64's signatures, where RoPE tables are
`(cos, sin)` pairs `[B, N, dim]` and patch coordinates `[B, 3, N]` (or `[B, 3, N, 2]` start / end
with `start_end=True`, today's LTXVAddGuide layout)."""
from __future__ import annotations

import functools
import math
from enum import Enum
from typing import Any, Mapping, Sequence

import torch
from torch import nn


def get_timestep_embedding(timesteps: torch.Tensor, embedding_dim: int, flip_sin_to_cos: bool = False,
                           downscale_freq_shift: float = 1, scale: float = 1, max_period: int = 10000) -> torch.Tensor:
    """DDPM's sinusoidal embedding of `[N]` timesteps -> `[N, embedding_dim]`: frequencies
    `exp(-ln(max_period) i / (half - downscale_freq_shift))`, sines then cosines (cosines first
    with `flip_sin_to_cos`), scaled arguments, zero-padded to an odd width."""
    if timesteps.ndim != 1:
        raise ValueError(f"get_timestep_embedding: timesteps must be 1-D, got {tuple(timesteps.shape)}")
    half = embedding_dim // 2
    exponent = -math.log(max_period) * torch.arange(half, dtype=torch.float32, device=timesteps.device)
    frequencies = torch.exp(exponent / (half - downscale_freq_shift))
    angles = scale * timesteps[:, None].float() * frequencies[None, :]
    parts = [torch.cos(angles), torch.sin(angles)] if flip_sin_to_cos else [torch.sin(angles), torch.cos(angles)]
    embedding = torch.cat(parts, dim=-1)
    if embedding_dim % 2:
        embedding = torch.nn.functional.pad(embedding, (0, 1))
    return embedding


class LTXRopeType(str, Enum):
    """How an LTX-2 network lays out its RoPE: `interleaved` channel pairs (LTX-Video 0.9) or
    `split` halves per head; `KEY` is the config key naming it (ComfyUI's enum)."""

    INTERLEAVED = "interleaved"
    SPLIT = "split"
    KEY = "rope_type"

    @classmethod
    def from_dict(cls, kwargs: Mapping[str, Any], default: Any = None) -> "LTXRopeType":
        """The layout a network config names (`kwargs["rope_type"]`), else `default` (interleaved)."""
        return cls(kwargs.get(cls.KEY.value, cls.INTERLEAVED if default is None else default))


class LTXFrequenciesPrecision(str, Enum):
    """The precision the RoPE frequency grid is computed in (`float64` through numpy: LTX-2's
    JAX-compatible grid; else float32 torch); `KEY` is the config key naming it."""

    FLOAT32 = "float32"
    FLOAT64 = "float64"
    KEY = "frequencies_precision"

    @classmethod
    def from_dict(cls, kwargs: Mapping[str, Any], default: Any = None) -> "LTXFrequenciesPrecision":
        return cls(kwargs.get(cls.KEY.value, cls.FLOAT32 if default is None else default))


@functools.lru_cache(maxsize=5)
def generate_freq_grid_np(positional_embedding_theta: float, positional_embedding_max_pos_count: int,
                          inner_dim: int, _: Any = None) -> torch.Tensor:
    """The RoPE frequency grid `[inner_dim // (2 axes)]` float32 on the CPU, computed in float64:
    `theta ** linspace(0, 1) * pi / 2` over `axes = positional_embedding_max_pos_count` position
    axes (the engine's LTX-2 grid, comfy_core/families/ltx2/rope.py; the fourth argument, a
    device in the float32 twin's signature, is ignored, as ComfyUI's)."""
    from comfy_core.families.ltx2.rope import frequency_grid

    return frequency_grid(positional_embedding_theta, positional_embedding_max_pos_count, inner_dim,
                          double_precision=True, device=None)


def generate_freq_grid_pytorch(positional_embedding_theta: float, positional_embedding_max_pos_count: int,
                               inner_dim: int, device: Any) -> torch.Tensor:
    """`generate_freq_grid_np`'s float32 twin, computed on `device`."""
    from comfy_core.families.ltx2.rope import frequency_grid

    return frequency_grid(positional_embedding_theta, positional_embedding_max_pos_count, inner_dim,
                          double_precision=False, device=device)


class _EmbeddingClass(type):
    """`isinstance(m, TimestepEmbedding)` is also true for the LTX-Video network's own time
    embedder (comfy_core/families/ltxv/dit.py `TimestepEmbedder`, built by our loaders)."""

    def __instancecheck__(cls, obj: Any) -> bool:
        from comfy_core.families.ltxv.dit import TimestepEmbedder

        return type.__instancecheck__(cls, obj) or isinstance(obj, TimestepEmbedder)


class TimestepEmbedding(nn.Module, metaclass=_EmbeddingClass):
    """ComfyUI's (diffusers') `TimestepEmbedding` with ComfyUI's constructor, for packs that build
    their own networks from it (RES4LYF's HiDream rebuild): `linear_2(SiLU(linear_1(sample +
    cond_proj(condition))))`, `linear_1` `in_channels -> time_embed_dim`, `linear_2` to `out_dim`
    (default `time_embed_dim`), biases per `sample_proj_bias` (ComfyUI's activation is SiLU whatever
    `act_fn` says, and no post-activation)."""

    def __init__(self, in_channels: int, time_embed_dim: int, act_fn: str = "silu", out_dim: int | None = None,
                 post_act_fn: str | None = None, cond_proj_dim: int | None = None, sample_proj_bias: bool = True,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        from comfy_core.models.unet_blocks import operations_or_default

        ops = operations_or_default(operations)
        self.linear_1 = ops.Linear(in_channels, time_embed_dim, sample_proj_bias, dtype=dtype, device=device)
        self.cond_proj = (None if cond_proj_dim is None else
                          ops.Linear(cond_proj_dim, in_channels, bias=False, dtype=dtype, device=device))
        self.act = nn.SiLU()
        self.linear_2 = ops.Linear(time_embed_dim, out_dim or time_embed_dim, sample_proj_bias, dtype=dtype,
                                   device=device)
        self.post_act = None

    def forward(self, sample: torch.Tensor, condition: torch.Tensor | None = None) -> torch.Tensor:
        if condition is not None:
            sample = sample + self.cond_proj(condition)
        return self.linear_2(self.act(self.linear_1(sample)))


def interleaved_freqs_cis(freqs: torch.Tensor, pad_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE angles `[B, T, F]` -> the interleaved `(cos, sin)` `[B, T, pad_size + 2F]`: each angle
    for a channel pair, the first `pad_size` channels unrotated (cos 1, sin 0). ComfyUI's LTX-2
    helper of early 2026 (since folded into `freqs_cis_matrix`), which ComfyUI-LTXVideo imports."""
    cos, sin = freqs.cos().repeat_interleave(2, dim=-1), freqs.sin().repeat_interleave(2, dim=-1)
    if pad_size:
        cos = torch.cat([torch.ones_like(cos[..., :pad_size]), cos], dim=-1)
        sin = torch.cat([torch.zeros_like(sin[..., :pad_size]), sin], dim=-1)
    return cos, sin


def split_freqs_cis(freqs: torch.Tensor, pad_size: int, num_attention_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE angles `[B, T, F]` -> the split-layout `(cos, sin)` `[B, heads, T, (pad_size + F) / heads]`
    (the first `pad_size` angles unrotated), as `interleaved_freqs_cis`'s twin."""
    cos, sin = freqs.cos(), freqs.sin()
    if pad_size:
        cos = torch.cat([torch.ones_like(cos[..., :pad_size]), cos], dim=-1)
        sin = torch.cat([torch.zeros_like(sin[..., :pad_size]), sin], dim=-1)
    b, t = cos.shape[0], cos.shape[1]
    return (cos.reshape(b, t, num_attention_heads, -1).transpose(1, 2),
            sin.reshape(b, t, num_attention_heads, -1).transpose(1, 2))


class Timesteps(nn.Module):
    """ComfyUI's (diffusers') `Timesteps`: `[N]` timesteps -> their sinusoidal embedding `[N,
    num_channels]` (`get_timestep_embedding` with this module's settings; no weights)."""

    def __init__(self, num_channels: int, flip_sin_to_cos: bool, downscale_freq_shift: float, scale: float = 1) -> None:
        super().__init__()
        self.num_channels = num_channels
        self.flip_sin_to_cos = flip_sin_to_cos
        self.downscale_freq_shift = downscale_freq_shift
        self.scale = scale

    def forward(self, timesteps: torch.Tensor) -> torch.Tensor:
        return get_timestep_embedding(timesteps, self.num_channels, flip_sin_to_cos=self.flip_sin_to_cos,
                                      downscale_freq_shift=self.downscale_freq_shift, scale=self.scale)


def get_fractional_positions(indices_grid: torch.Tensor, max_pos: Sequence[float]) -> torch.Tensor:
    """`[B, 3, N]` positions -> `[B, N, 3]` divided by `max_pos` per axis."""
    return torch.stack([indices_grid[:, i] / max_pos[i] for i in range(3)], dim=-1)


def precompute_freqs_cis(indices_grid: torch.Tensor, dim: int, out_dtype: torch.dtype, theta: float = 10000.0,
                         max_pos: Sequence[int] = (20, 2048, 2048)) -> tuple[torch.Tensor, torch.Tensor]:
    """The LTX-Video RoPE tables `(cos, sin)` `[B, N, dim]` of pixel positions `[B, 3, N]` (time in seconds)."""
    from comfy_core.families.ltxv.dit import rope_cos_sin

    return rope_cos_sin(indices_grid.to(torch.float32), dim, theta, tuple(max_pos), out_dtype)


def apply_rotary_emb(input_tensor: torch.Tensor, freqs_cis: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Interleaved-pair rotation of `[B, N, dim]` by `(cos, sin)`."""
    from comfy_core.families.ltxv.dit import apply_rotary

    return apply_rotary(input_tensor, freqs_cis)


class Patchifier:
    """ComfyUI's patchifier base: `patch_size` is `(1, p, p)`."""

    def __init__(self, patch_size: int, start_end: bool = False) -> None:
        self._patch_size = (1, patch_size, patch_size)
        self.start_end = start_end

    @property
    def patch_size(self) -> tuple[int, int, int]:
        return self._patch_size

    def get_latent_coords(self, latent_num_frames: int, latent_height: int, latent_width: int, batch_size: int,
                          device: Any) -> torch.Tensor:
        """Each patch's top-left latent coordinates `[B, 3, N]` (`[B, 3, N, 2]` with its end too)."""
        t, p, q = self._patch_size
        grid = torch.meshgrid(torch.arange(0, latent_num_frames, t, device=device),
                              torch.arange(0, latent_height, p, device=device),
                              torch.arange(0, latent_width, q, device=device), indexing="ij")
        coords = torch.stack(grid).reshape(1, 3, -1).repeat(batch_size, 1, 1)
        if self.start_end:
            step = torch.tensor(self._patch_size, device=device).view(1, 3, 1)
            coords = torch.stack([coords, coords + step], dim=-1)
        return coords


class SymmetricPatchifier(Patchifier):
    """`[B, C, F, H, W]` <-> tokens `[B, F (H/p) (W/p), C p p]` (ComfyUI's `SymmetricPatchifier`)."""

    def patchify(self, latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, c, f, h, w = latents.shape
        _, p, q = self._patch_size
        coords = self.get_latent_coords(f, h, w, b, latents.device)
        x = latents.reshape(b, c, f, h // p, p, w // q, q).permute(0, 2, 3, 5, 1, 4, 6)
        return x.reshape(b, f * (h // p) * (w // q), c * p * q), coords

    def unpatchify(self, latents: torch.Tensor, output_height: int, output_width: int, output_num_frames: int,
                   out_channels: int) -> torch.Tensor:
        _, p, q = self._patch_size
        b = latents.shape[0]
        h, w = output_height // p, output_width // q
        x = latents.reshape(b, output_num_frames, h, w, out_channels, p, q).permute(0, 4, 1, 2, 5, 3, 6)
        return x.reshape(b, out_channels, output_num_frames, h * p, w * q)


def patchify(x: torch.Tensor, patch_size_hw: int, patch_size_t: int = 1) -> torch.Tensor:
    """The VAE's pixel patches `[B, C, F, H, W] -> [B, C p p, F, H/p, W/p]` (temporal patch 1)."""
    from comfy_core.models.ltxv_vae import patchify as ours

    if patch_size_t != 1:
        raise ValueError("LTX-Video VAE patchify: only a temporal patch of 1 exists")
    return ours(x, patch_size_hw)


def unpatchify(x: torch.Tensor, patch_size_hw: int, patch_size_t: int = 1) -> torch.Tensor:
    from comfy_core.models.ltxv_vae import unpatchify as ours

    if patch_size_t != 1:
        raise ValueError("LTX-Video VAE unpatchify: only a temporal patch of 1 exists")
    return ours(x, patch_size_hw)


class PixelNorm(nn.Module):
    """ComfyUI's `PixelNorm(dim=1, eps=1e-8)`: unit RMS along `dim`."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.sqrt(torch.mean(x * x, dim=self.dim, keepdim=True) + self.eps)


# --- comfy_extras.nodes_lt's module-level helpers ---

def conditioning_get_any_value(conditioning: list, key: str, default: Any = None) -> Any:
    """The first entry's value of `key`, else `default`."""
    for _, options in conditioning:
        if key in options:
            return options[key]
    return default


def get_keyframe_idxs(cond: list, latent_shape: Any = None) -> tuple[Any, int]:
    from nodes.ltxv_nodes import keyframe_count

    return keyframe_count(cond, latent_shape)


def append_guide_attention_entry(positive: list, negative: list, pre_filter_count: int, latent_shape: Any,
                                 strength: float = 1.0, attention_mask: Any = None) -> tuple[list, list]:
    """ComfyUI's `comfy_extras.nodes_lt._append_guide_attention_entry` (packs call it by that
    name: KJNodes' LTXV guide nodes)."""
    from nodes.ltxv_nodes import append_guide_attention_entry as append

    return append(positive, negative, pre_filter_count, latent_shape, strength, attention_mask)


def get_noise_mask(latent: dict) -> torch.Tensor:
    from nodes.ltxv_nodes import noise_mask_of

    return noise_mask_of(latent)


def preprocess(image: torch.Tensor, crf: int = 29) -> torch.Tensor:
    """One `[H, W, 3]` frame through H.264 at CRF `crf` (LTXVPreprocess's step)."""
    from nodes.ltxv_nodes import compress_frame

    return compress_frame(image, crf)

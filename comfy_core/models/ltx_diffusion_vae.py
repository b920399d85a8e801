"""LTX-2.4 / 2.5's video VAE with a diffusion decoder (Lightricks' `CausalDiffusionVAE`, the
"DiffVAE" of `ltx-2.5-video-vae-bf16`), as ComfyUI's `comfy/ldm/lightricks/vae/
na_diffusion_decoder.py` (`NADiffusionDecoder`, `CausalDiffusionVAE`) runs it; written here.

The encoder is LTX-2's causal convolutional one (`ltxv_vae.Encoder`, the layout read from the
weights as for LTX-2's VAE; the per-channel latent statistics likewise). The decoder:

1. Stages 1-4 (deterministic): the un-normalised latent `[B, 128, T, h, w]`, its last frame
   repeated `2 * (k_t // 2)` times (NATTEN's border mitigation, `k_t` the first stage's temporal
   kernel), channels-last through a linear `conv_in`, then per stage its neighbourhood-attention
   blocks (pre-RMS-norm, 3-D neighbourhood attention, SwiGLU) and a linear pixel-shuffle upsample
   (a linear widening by the stride's volume / a reduction, then channels to (t, h, w); a
   temporal x2 drops its duplicated leading frame). The repeated frames are cropped off after.
2. Stage 5 (diffusion): Gaussian pixels `x_t` `[B, 3, T', 4 h', 4 w']` (torch's generator seeded
   0 on the latent's device, as ComfyUI's `decode`), patchified 4x4 (channels ordered c, w, h),
   a linear `conv_in_x_t`, then per block: the context added through `context_proj`, the
   attention and the SwiGLU under a shared adaLN scale / shift (`shared_adaln` of the timestep
   embedding — sinusoidal 256 (cos, sin) of `1000 t`, MLP to `t_emb_dim` — plus each block's
   `scale_shift_table`; ungated residuals), a final RMS norm and linear, unpatchified. With
   `default_num_inference_steps` timesteps `linspace(1, 1/n, n)`, each step predicts x0
   ("x0" output) or a velocity ("v"); one step (the 2.4 / 2.5 release) returns the x0.

Neighbourhood attention (NATTEN's `na3d`, dilation 1): each query attends exactly the
`kernel` window around it per axis, shifted inward at the borders (start `clamp(i - k // 2, 0,
L - k)`; the whole axis when it is shorter than the kernel); q and k RMS-normed per head (with
weights) then rotated by an absolute per-axis RoPE (head split `(d_t, d_hw, d_hw)`, pairs
interleaved, theta 10 000, 0-based positions), scale `1 / sqrt(head_dim)`. Computed here exactly,
tile by tile: a tile of queries attends the bounding box of its windows with a mask, so the cost
is the tile times the box, not the whole clip squared. Names are the checkpoint's (fused
`attn.qkv`, `t_embedder.mlp.{0,2}`, `shared_adaln.proj`); the `vae` section of the file's `config`
metadata gives the layout (ComfyUI's defaults `LTX_24_VAE_CONFIG` otherwise).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.ltxv_vae import Encoder, LTXVVAE, LTXVVAEConfig, PerChannelStatistics
from comfy_core.models.vae import VAEConfigError

MARKER = "decoder.conv_in_x_t.weight"  # ComfyUI's test for the LTX 2.4 diffusion VAE decoder
DECODER_DEFAULTS: dict[str, Any] = {  # ComfyUI's LTX_24_VAE_CONFIG["decoder"]
    "in_channels": 128, "out_channels": 3, "patch_size": 4, "head_dim": 64,
    "stage_channels": [2048, 1024, 512, 512, 256], "stage_depths": [4, 6, 4, 2, 8],
    "stage_kernels": [[3, 7, 7], [3, 7, 7], [3, 5, 5], [3, 5, 5], [11, 11, 11]],
    "upsamples": [[[1, 2, 2], 2], [[2, 1, 1], 2], [[2, 2, 2], 1], [[2, 2, 2], 2]],
    "stage5_kernel": [11, 11, 11], "t_emb_dim": 384, "timestep_scale_multiplier": 1000.0,
    "default_num_inference_steps": 1,
}
QUERY_TILE = (4, 8, 8)  # queries per attention tile (t, h, w)


# --- neighbourhood attention ---

def window_starts(length: int, kernel: int, device: torch.device | None = None) -> tuple[torch.Tensor, int]:
    """(start [L] of each position's window, window size) along one axis (see the module doc)."""
    size = min(kernel, length)
    index = torch.arange(length, device=device)
    return (index - kernel // 2).clamp(0, length - size), size


def neighborhood_attention_3d(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel: tuple[int, int, int],
                              scale: float, tile: tuple[int, int, int] = QUERY_TILE) -> torch.Tensor:
    """q, k, v `[B, T, H, W, heads, d]` -> `[B, T, H, W, heads, d]`: each query over its 3-D
    window (see the module doc), computed tile by tile over the windows' bounding boxes."""
    batch, t_len, h_len, w_len, heads, dim = q.shape
    lengths = (t_len, h_len, w_len)
    windows = [window_starts(n, kk, q.device) for n, kk in zip(lengths, kernel)]
    out = torch.empty_like(q)
    ranges = [range(0, n, step) for n, step in zip(lengths, tile)]
    for t0 in ranges[0]:
        for h0 in ranges[1]:
            for w0 in ranges[2]:
                query_box = [(a, min(a + s, n)) for a, s, n in zip((t0, h0, w0), tile, lengths)]
                key_box, allowed = [], []
                for (a, b), (starts, size) in zip(query_box, windows):
                    lo, hi = int(starts[a]), int(starts[b - 1]) + size
                    key_box.append((lo, hi))
                    pos = torch.arange(lo, hi, device=q.device)[None, :]
                    s = starts[a:b][:, None]
                    allowed.append((pos >= s) & (pos < s + size))  # [queries on the axis, keys on the axis]
                (qt0, qt1), (qh0, qh1), (qw0, qw1) = query_box
                (kt0, kt1), (kh0, kh1), (kw0, kw1) = key_box
                mask = (allowed[0][:, None, None, :, None, None] & allowed[1][None, :, None, None, :, None]
                        & allowed[2][None, None, :, None, None, :])
                nq, nk = mask.shape[0] * mask.shape[1] * mask.shape[2], mask.shape[3] * mask.shape[4] * mask.shape[5]
                qs = q[:, qt0:qt1, qh0:qh1, qw0:qw1].reshape(batch, nq, heads, dim).transpose(1, 2)
                ks = k[:, kt0:kt1, kh0:kh1, kw0:kw1].reshape(batch, nk, heads, dim).transpose(1, 2)
                vs = v[:, kt0:kt1, kh0:kh1, kw0:kw1].reshape(batch, nk, heads, dim).transpose(1, 2)
                attended = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask.reshape(nq, nk), scale=scale)
                out[:, qt0:qt1, qh0:qh1, qw0:qw1] = attended.transpose(1, 2).reshape(
                    batch, qt1 - qt0, qh1 - qh0, qw1 - qw0, heads, dim)
    return out


def rope_split(head_dim: int) -> tuple[int, int, int]:
    """The head's (time, height, width) RoPE widths (ComfyUI's `default_rope_dim_split`)."""
    d_t = (head_dim // 4) // 2 * 2
    d_hw = (head_dim - d_t) // 2
    if d_hw % 2:
        d_t -= 2
        d_hw = (head_dim - d_t) // 2
    return d_t, d_hw, d_hw


def rope_angles(lengths: tuple[int, int, int], head_dim: int, theta: float,
                device: torch.device) -> torch.Tensor:
    """Angles `[T, H, W, head_dim / 2]` float32 of the per-axis absolute RoPE (pairs: time's, then
    height's, then width's; frequencies computed in float64 as ComfyUI's)."""
    parts = []
    for axis, (length, dim) in enumerate(zip(lengths, rope_split(head_dim))):
        inv = (1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)).to(torch.float32).to(device)
        angle = torch.arange(length, dtype=torch.float32, device=device)[:, None] * inv[None, :]  # [L, dim / 2]
        shape = [1, 1, 1, angle.shape[1]]
        shape[axis] = length
        parts.append(angle.reshape(shape).expand(*lengths, angle.shape[1]))
    return torch.cat(parts, dim=-1)


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x `[..., d]` with each interleaved pair (2i, 2i + 1) rotated by its angle (cos / sin `[..., d / 2]`)."""
    pairs = x.unflatten(-1, (-1, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


class NeighborhoodAttention3D(nn.Module):
    def __init__(self, dim: int, kernel: tuple[int, int, int], head_dim: int = 64, rope_theta: float = 10000.0) -> None:
        super().__init__()
        self.heads, self.head_dim, self.kernel, self.rope_theta = dim // head_dim, head_dim, tuple(kernel), rope_theta
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.proj = nn.Linear(dim, dim, bias=True)
        self.q_norm = RMSNorm(head_dim)
        self.k_norm = RMSNorm(head_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x `[B, T, H, W, C]` (already normed / modulated) -> the attention's output, projected."""
        batch, t, h, w, _ = x.shape
        q, k, v = self.qkv(x).unflatten(-1, (3, self.heads, self.head_dim)).unbind(-3)  # [B, T, H, W, heads, d]
        angles = rope_angles((t, h, w), self.head_dim, self.rope_theta, x.device)[None, :, :, :, None, :]
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        q = rotate_pairs(self.q_norm(q), cos, sin)
        k = rotate_pairs(self.k_norm(k), cos, sin)
        out = neighborhood_attention_3d(q, k, v, self.kernel, self.head_dim ** -0.5)
        return self.proj(out.flatten(-2))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


def _mlp_width(dim: int, ratio: float = 4.0) -> int:
    return (int(dim * ratio) + 15) // 16 * 16


class NABlock(nn.Module):
    """Pre-norm block: neighbourhood attention then SwiGLU, residual."""

    def __init__(self, dim: int, kernel: tuple[int, int, int], head_dim: int) -> None:
        super().__init__()
        self.norm1 = RMSNorm(dim)
        self.attn = NeighborhoodAttention3D(dim, kernel, head_dim)
        self.norm2 = RMSNorm(dim)
        self.mlp = SwiGLU(dim, _mlp_width(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


ADALN_CHUNKS = 7  # scale / shift / gate x 2 and one unused: the gates are folded into the weights


class AdaLNZero(nn.Module):
    def __init__(self, dim: int, t_emb_dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(t_emb_dim, ADALN_CHUNKS * dim, bias=True)

    def forward(self, t_emb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(c[:, None, None, None, :] for c in self.proj(F.silu(t_emb)).chunk(ADALN_CHUNKS, dim=-1))


class DiffusionNABlock(nn.Module):
    def __init__(self, dim: int, kernel: tuple[int, int, int], context_channels: int, head_dim: int) -> None:
        super().__init__()
        self.context_proj = nn.Linear(context_channels, dim, bias=True)
        self.scale_shift_table = nn.Parameter(torch.zeros(ADALN_CHUNKS, dim))
        self.norm1 = RMSNorm(dim)
        self.attn = NeighborhoodAttention3D(dim, kernel, head_dim)
        self.norm2 = RMSNorm(dim)
        self.mlp = SwiGLU(dim, _mlp_width(dim))

    def forward(self, x: torch.Tensor, context: torch.Tensor, modulation: tuple[torch.Tensor, ...]) -> torch.Tensor:
        mods = [modulation[i] + self.scale_shift_table[i].to(x.dtype).view(1, 1, 1, 1, -1) for i in range(ADALN_CHUNKS)]
        scale_msa, shift_msa, _, scale_mlp, shift_mlp, _, _ = mods
        x = x + self.context_proj(context)
        x = x + self.attn(self.norm1(x) * (1.0 + scale_msa) + shift_msa)
        return x + self.mlp(self.norm2(x) * (1.0 + scale_mlp) + shift_mlp)


class LinearPixelShuffleUpsample(nn.Module):
    def __init__(self, channels: int, stride: tuple[int, int, int], reduction: int = 1) -> None:
        super().__init__()
        self.stride = tuple(stride)
        widened = math.prod(stride) * channels // reduction
        self.out_channels = widened // math.prod(stride)
        self.proj = nn.Linear(channels, widened, bias=True)

    def forward(self, x: torch.Tensor, drop_leading_frame: bool = True) -> torch.Tensor:
        batch, t, h, w, _ = x.shape
        p1, p2, p3 = self.stride
        y = self.proj(x).reshape(batch, t, h, w, self.out_channels, p1, p2, p3)
        y = y.permute(0, 1, 5, 2, 6, 3, 7, 4).reshape(batch, t * p1, h * p2, w * p3, self.out_channels)
        return y[:, 1:] if p1 == 2 and drop_leading_frame else y


class TimestepEmbedder(nn.Module):
    def __init__(self, t_emb_dim: int = 384, freq_dim: int = 256) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, t_emb_dim, bias=True), nn.SiLU(),
                                 nn.Linear(t_emb_dim, t_emb_dim, bias=True))

    def forward(self, timestep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=timestep.device) / half)
        args = timestep.flatten().float()[:, None] * freqs[None]
        return self.mlp(torch.cat([torch.cos(args), torch.sin(args)], dim=-1).to(dtype))


def patchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """`[B, C, T, H, W]` -> `[B, C * patch^2, T, H / patch, W / patch]` (channels c, w-offset, h-offset)."""
    b, c, t, h, w = x.shape
    x = x.reshape(b, c, t, h // patch, patch, w // patch, patch)  # q: h offset, r: w offset
    return x.permute(0, 1, 6, 4, 2, 3, 5).reshape(b, c * patch * patch, t, h // patch, w // patch)


def unpatchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    b, cpp, t, h, w = x.shape
    c = cpp // (patch * patch)
    x = x.reshape(b, c, patch, patch, t, h, w)  # c, r (w offset), q (h offset)
    return x.permute(0, 1, 4, 5, 3, 6, 2).reshape(b, c, t, h * patch, w * patch)


class NADiffusionDecoder(nn.Module):
    """Stages 1-4 and the stage-5 diffusion blocks (see the module doc); names are ComfyUI's."""

    def __init__(self, config: Mapping[str, Any], model_output_type: str = "x0") -> None:
        super().__init__()
        c = {**DECODER_DEFAULTS, **dict(config)}
        self.patch_size, self.out_channels = int(c["patch_size"]), int(c["out_channels"])
        self.timestep_scale_multiplier = float(c["timestep_scale_multiplier"])
        self.model_output_type = model_output_type
        self.steps = int(c["default_num_inference_steps"])
        channels = [int(v) for v in c["stage_channels"]]
        depths = [int(v) for v in c["stage_depths"]]
        kernels = [tuple(int(k) for k in v) for v in c["stage_kernels"]]
        upsamples = [(tuple(int(s) for s in stride), int(reduction)) for stride, reduction in c["upsamples"]]
        head_dim = int(c["head_dim"])
        if not (len(channels) == len(depths) == len(kernels) == len(upsamples) + 1):
            raise VAEConfigError(f"LTX diffusion VAE: stage lists of different lengths in the decoder config {c}")
        self.temporal_upscale = math.prod(s[0] for s, _ in upsamples)
        self.spatial_upscale = math.prod(s[1] for s, _ in upsamples) * self.patch_size
        self.trailing_pad = (kernels[0][0] // 2) * 2
        self.conv_in = nn.Linear(int(c["in_channels"]), channels[0], bias=True)
        self.det_stages = nn.ModuleList(nn.ModuleList(NABlock(channels[i], kernels[i], head_dim)
                                                      for _ in range(depths[i])) for i in range(len(upsamples)))
        self.upsamples = nn.ModuleList(LinearPixelShuffleUpsample(channels[i], stride, reduction)
                                       for i, (stride, reduction) in enumerate(upsamples))
        t_emb_dim = int(c["t_emb_dim"])
        self.t_embedder = TimestepEmbedder(t_emb_dim)
        c5, pixels = channels[-1], self.out_channels * self.patch_size ** 2
        self.conv_in_x_t = nn.Linear(pixels, c5, bias=True)
        self.shared_adaln = AdaLNZero(c5, t_emb_dim)
        stage5 = tuple(int(k) for k in c["stage5_kernel"])
        self.diff_blocks = nn.ModuleList(DiffusionNABlock(c5, stage5, c5, head_dim) for _ in range(depths[-1]))
        self.norm_out = RMSNorm(c5)
        self.conv_out = nn.Linear(c5, pixels, bias=True)

    def context(self, z: torch.Tensor) -> torch.Tensor:
        """Stages 1-4: latent `[B, C, T, h, w]` -> the stage-5 context `[B, T', H', W', C5]` (channels last)."""
        n = self.trailing_pad
        if n:
            z = torch.cat([z, z[:, :, -1:].expand(-1, -1, n, -1, -1)], dim=2)
        x = self.conv_in(z.permute(0, 2, 3, 4, 1))
        for blocks, upsample in zip(self.det_stages, self.upsamples):
            for block in blocks:
                x = block(x)
            x = upsample(x)
        return x[:, :-(n * self.temporal_upscale)] if n else x

    def denoise_step(self, context: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        x = self.conv_in_x_t(patchify(x_t, self.patch_size).permute(0, 2, 3, 4, 1))
        modulation = self.shared_adaln(self.t_embedder(self.timestep_scale_multiplier * t, x.dtype))
        for block in self.diff_blocks:
            x = block(x, context, modulation)
        x = self.conv_out(self.norm_out(x)).permute(0, 4, 1, 2, 3)
        return unpatchify(x, self.patch_size)

    def forward(self, z: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        context = self.context(z)
        batch, t5, h5, w5, _ = context.shape
        shape = (batch, self.out_channels, t5, h5 * self.patch_size, w5 * self.patch_size)
        x_t = torch.randn(shape, dtype=z.dtype, device=z.device, generator=generator)
        timesteps = torch.linspace(1.0, 1.0 / self.steps, self.steps, device=z.device)
        for i in range(self.steps):
            out = self.denoise_step(context, x_t, timesteps[i].expand(batch))
            if self.model_output_type == "x0":
                if i == self.steps - 1:
                    return out
                velocity = (x_t.float() - out.float()) / timesteps[i]
            else:
                velocity = out.float()
                if i == self.steps - 1:
                    return (x_t.float() - timesteps[i] * velocity).to(z.dtype)
            following = timesteps[i + 1] if i + 1 < self.steps else torch.zeros_like(timesteps[i])
            x_t = (x_t.float() - (timesteps[i] - following) * velocity).to(z.dtype)
        return x_t


class _EncoderShapes(Mapping[str, Any]):
    """A file's tensors plus the stand-in LTX-2 decoder input `ltxv_vae.LTXVVAEConfig` reads the
    latent width from (the diffusion decoder has no convolutional one)."""

    class _Shape:
        def __init__(self, shape: tuple[int, ...]) -> None:
            self.shape = shape

    def __init__(self, tensors: Mapping[str, Any], prefix: str, latent: int) -> None:
        self._tensors = tensors
        self._extra = {prefix + "decoder.conv_in.conv.weight": self._Shape((1, latent, 3, 3, 3))}

    def __getitem__(self, name: str) -> Any:
        return self._extra[name] if name in self._extra else self._tensors[name]

    def __iter__(self):
        yield from self._tensors
        yield from self._extra

    def __len__(self) -> int:
        return len(self._tensors) + len(self._extra)


def encoder_config(tensors: Mapping[str, Any], prefix: str = "", described: Mapping[str, Any] | None = None
                   ) -> LTXVVAEConfig:
    """The encoder's layout read from the weights (LTX-2's encoder), padding from the description."""
    try:
        latent = int(tensors[prefix + "decoder.conv_in.weight"].shape[1])
    except KeyError:
        raise VAEConfigError(f"LTX diffusion VAE key {prefix + 'decoder.conv_in.weight'!r} is missing") from None
    config = LTXVVAEConfig.detect_from_weights(_EncoderShapes(tensors, prefix, latent), prefix)
    encoder = (described or {}).get("encoder") or {}
    padding = encoder.get("spatial_padding_mode")
    if padding is not None:
        config = dataclasses.replace(config, encoder_padding=padding)
    return config


class LTXDiffusionVAE(LTXVVAE):
    """ComfyUI's `CausalDiffusionVAE` with the video-VAE surface of `LTXVVAE` (see the module doc)."""

    def __init__(self, config: LTXVVAEConfig, described: Mapping[str, Any] | None = None) -> None:
        nn.Module.__init__(self)
        described = dict(described or {})
        self.config = config
        self.described = described
        self.encoder = Encoder(config)
        self.decoder = NADiffusionDecoder(described.get("decoder") or {}, str(described.get("model_output_type", "x0")))
        self.per_channel_statistics = PerChannelStatistics(config.latent_channels)

    @property
    def timestep_conditioning(self) -> bool:
        return False

    def decode_raw(self, z: torch.Tensor, output_device: torch.device | str | None = None,
                   timestep: float = 0.0, noise_scale: float = 0.0) -> torch.Tensor:
        """The normalised latent `[B, 128, T', h, w]` -> pixels `[B, 3, 8 (T' - 1) + 1, 32 h, 32 w]`
        in about -1..1: the diffusion decoder from noise seeded 0 (ComfyUI's fixed seed)."""
        z = z.to(self._dtype())
        generator = torch.Generator(device=z.device)
        generator.manual_seed(0)
        out = self.decoder(self.per_channel_statistics.un_normalize(z), generator=generator)
        return out if output_device is None else out.to(output_device)

    def working_bytes(self, pixels: int, frames: int, dtype: torch.dtype) -> int:
        """ComfyUI's estimate: 1700 x latent volume x 512 elements."""
        size = torch.empty((), dtype=dtype).element_size()
        latent_volume = max(1, (frames + 7) // 8) * pixels // (self.downscale_ratio ** 2)
        return int(1700 * latent_volume * 512 * size)


__all__ = ["DECODER_DEFAULTS", "LTXDiffusionVAE", "MARKER", "NADiffusionDecoder", "encoder_config",
           "neighborhood_attention_3d", "patchify", "rope_angles", "rotate_pairs", "unpatchify", "window_starts"]

"""Wan Dancer (Wan 2.2 "WanToDance", music-driven dance video, 14B): the Wan 2.1 image-to-video DiT
with a music encoder and music injection, a second CLIP-vision embedding for a reference image, and
a second patch embedding / head for clips not at 30 fps. After ComfyUI's `comfy/ldm/wan/model_wandancer.py`
(`WanDancerModel`, `MusicEncoderLayer`, `MusicSelfAttention`, its `AudioInjector_WAN` use) and
`comfy/model_base.py`'s `WAN22_WanDancer`; read, written here. State-dict names are ComfyUI's.

Beyond the i2v network (`WanModel`, model type "i2v": 16 latent + 4 mask + 16 image channels,
`img_emb` for the first frame's CLIP-vision states):

- **music encoder**: the per-frame music features `audio_embed` `[B, N, 35]` (WanDancerEncodeAudio,
  comfy_core/families/wan/dancer_audio.py) -> `music_projection` (35 -> 256) -> 2 pre-norm
  transformer layers (`music_encoder.N`: LayerNorm, 4-head self-attention with 1-D RoPE over the
  frame index (theta 10000, the whole 64-channel head), LayerNorm, GELU FFN 256 -> 1024 -> 256) ->
  resized bilinearly (half-pixel centres) to `[B, 8 T, dim]` (T latent frames): 8 music tokens a latent frame.
- **music injection** (`music_injector`): after the blocks `MUSIC_INJECT_LAYERS` (ComfyUI's fixed
  0, 4, ..., 24, 27), the video tokens are cut into `8 T` consecutive groups; group g, LayerNormed
  (no affine, eps 1e-6), cross-attends (`injector.N`: q/k RMS-normed) to music token g alone -- so
  the softmax is 1 and the group gets `o(v(token g))` -- and `audio_inject_scale` times that is added.
- **reference image**: `clip_fea_ref` (ComfyUI's `clip_vision_output_ref` penultimate states) through
  `img_emb_refimage` (an `MLPProj`), its tokens before the first frame's (`[ref, first frame, text]`),
  both read by the blocks' image cross-attention.
- **frame rate**: `fps` (a constant; 30 unless given): when `round(fps) != 30`, the latent goes through
  `patch_embedding_global` and out through `head_global`, and the RoPE frame positions are spread
  to the 30 fps clock (`i * 30 / fps`, the last at `round(T * 30 / fps) - 1`).
- `reference_latent` through `ref_conv` (the weights have it; ComfyUI notes the reference pipeline does
  not use it): prepended, cut off before unpatchifying (ComfyUI's dancer gives it no RoPE frame).

The released file stores each music self-attention's q/k/v fused as `nn.MultiheadAttention` does
(`in_proj_weight` / `in_proj_bias`, `out_proj`); ComfyUI splits them into `q_proj` / `k_proj` /
`v_proj` on load. Either layout is read here: `WanConfig.music_fused_qkv` (from the names) builds
the module in the file's layout.

Without any CLIP-vision input ComfyUI hands the blocks a zero-length image context; here the blocks
then get none (`context_img_len` None), as the other Wan networks here.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.rope import apply_rope1
from comfy_core.families.flux.blocks import EmbedND
from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.families.wan.blocks import Head, MLPProj, attention, cast_param
from comfy_core.families.wan.dancer_config import MODEL_TYPE, MUSIC_HEADS, MUSIC_INJECT_LAYERS
from comfy_core.families.wan.dit import WanModel, _conv_in
from comfy_core.families.wan.s2v import AudioInjector
from comfy_core.models.unet_blocks import operations_or_default

MUSIC_TOKENS_PER_FRAME = 8
BASE_FPS = 30


class DancerError(ValueError):
    """Inputs the Dancer network cannot take (a token grid the music groups do not divide)."""


def global_rate(fps: float) -> bool:
    """Whether `fps` takes the "global" patch embedding and head (not 30 after rounding half up)."""
    return int(float(fps) + 0.5) != BASE_FPS


class MusicSelfAttention(nn.Module):
    """Multi-head self-attention over music frames with 1-D RoPE on q and k; q/k/v as three Linears
    (`q_proj`, `k_proj`, `v_proj`) or fused (`in_proj_weight` `[3 d, d]`, `in_proj_bias`)."""

    def __init__(self, dim: int, heads: int, fused: bool = False, ops: Any = None, **factory: Any) -> None:
        super().__init__()
        ops = operations_or_default(ops)
        self.heads, self.fused = heads, fused
        if fused:
            self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim, **factory))
            self.in_proj_bias = nn.Parameter(torch.empty(3 * dim, **factory))
        else:
            self.q_proj = ops.Linear(dim, dim, **factory)
            self.k_proj = ops.Linear(dim, dim, **factory)
            self.v_proj = ops.Linear(dim, dim, **factory)
        self.out_proj = ops.Linear(dim, dim, **factory)

    def qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.fused:
            return F.linear(x, cast_param(self.in_proj_weight, x), cast_param(self.in_proj_bias, x)).chunk(3, dim=-1)
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, options: Any = None) -> torch.Tensor:
        b, s, c = x.shape
        q, k, v = self.qkv(x)                                                    # [B, S, C] each
        q = apply_rope1(q.view(b, s, self.heads, -1), freqs).reshape(b, s, c)
        k = apply_rope1(k.view(b, s, self.heads, -1), freqs).reshape(b, s, c)
        return self.out_proj(attention(q, k, v, self.heads, options))


class MusicEncoderLayer(nn.Module):
    """Pre-norm transformer layer: `x + attn(norm1(x))`, then `x + linear2(gelu(linear1(norm2(x))))`."""

    def __init__(self, dim: int, heads: int, ffn_dim: int, fused: bool = False, ops: Any = None,
                 **factory: Any) -> None:
        super().__init__()
        ops = operations_or_default(ops)
        self.self_attn = MusicSelfAttention(dim, heads, fused, ops, **factory)
        self.linear1 = ops.Linear(dim, ffn_dim, **factory)
        self.linear2 = ops.Linear(ffn_dim, dim, **factory)
        self.norm1 = ops.LayerNorm(dim, **factory)
        self.norm2 = ops.LayerNorm(dim, **factory)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, options: Any = None) -> torch.Tensor:
        x = x + self.self_attn(self.norm1(x), freqs, options)
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))


class MusicInjector(AudioInjector):
    """ComfyUI's `AudioInjector_WAN` without AdaIN on one music token per group, scaled."""

    def forward(self, x: torch.Tensor, block: int, music: torch.Tensor, seq_len: int, scale: float = 1.0,
                transformer_options: Any = None) -> torch.Tensor:  # type: ignore[override]
        index = self.block_to_injector.get(block)
        if index is None:
            return x
        b, groups, c = music.shape                                               # [B, 8T, C]
        if seq_len % groups:
            raise DancerError(f"Wan Dancer: {seq_len} video tokens do not split into the {groups} music groups "
                              f"({MUSIC_TOKENS_PER_FRAME} a latent frame): the patch grid of a frame must be a "
                              f"multiple of {MUSIC_TOKENS_PER_FRAME} tokens")
        video = x[:, :seq_len].reshape(b * groups, seq_len // groups, c)
        query = F.layer_norm(video, (c,), eps=1e-6)
        out = self.injector[index](query, music.reshape(b * groups, 1, c), transformer_options=transformer_options)
        return torch.cat([x[:, :seq_len] + out.reshape(b, seq_len, c) * scale, x[:, seq_len:]], dim=1)


class WanDancerModel(WanModel):
    """Wan Dancer (module docstring); ComfyUI's `WanDancerModel`. Extra forward inputs: `audio_embed`
    `[B, N, 35]`, `clip_fea_ref` `[B, 257, 1280]`, `fps` (float), `audio_inject_scale` (float)."""

    def __init__(self, model_type: str = MODEL_TYPE, music_feature_dim: int = 35, music_dim: int = 256,
                 music_ffn_dim: int = 1024, music_layers: int = 2, music_fused_qkv: bool = False,
                 **kwargs: Any) -> None:
        import dataclasses

        super().__init__(model_type=MODEL_TYPE, **kwargs)
        self.config = dataclasses.replace(self.config, music_feature_dim=music_feature_dim, music_dim=music_dim,
                                          music_ffn_dim=music_ffn_dim, music_layers=music_layers,
                                          music_fused_qkv=music_fused_qkv)
        ops = operations_or_default(kwargs.get("operations"))
        factory = {"dtype": kwargs.get("dtype"), "device": kwargs.get("device")}
        self.patch_embedding_global = ops.Conv3d(self.in_dim, self.dim, kernel_size=self.patch_size,
                                                 stride=self.patch_size, device=factory["device"], dtype=torch.float32)
        self.img_emb_refimage = MLPProj(self.config.image_dim, self.dim, operations=ops, **factory)
        self.head_global = Head(self.dim, self.out_dim, self.patch_size, self.eps, operations=ops, **factory)
        self.music_injector = MusicInjector(self.dim, self.num_heads, MUSIC_INJECT_LAYERS, False, ops, **factory)
        self.music_projection = ops.Linear(music_feature_dim, music_dim, **factory)
        self.music_encoder = nn.ModuleList(
            MusicEncoderLayer(music_dim, MUSIC_HEADS, music_ffn_dim, music_fused_qkv, ops, **factory)
            for _ in range(music_layers))
        head = music_dim // MUSIC_HEADS
        self.music_rope_embedder = EmbedND(dim=head, theta=10000.0, axes_dim=[head])

    # -- inputs -----------------------------------------------------------------------------------

    def music_tokens(self, audio_embed: torch.Tensor, frames: int, batch: int, dtype: torch.dtype,
                     options: Any = None) -> torch.Tensor:
        """`[B, N, features]` -> `[B, 8 frames, dim]` (module docstring)."""
        if audio_embed.ndim != 3 or audio_embed.shape[-1] != self.config.music_feature_dim:
            raise DancerError(f"Wan Dancer: audio_embed must be [batch, frames, {self.config.music_feature_dim}] "
                              f"music features (WanDancerEncodeAudio), got {tuple(audio_embed.shape)}")
        if audio_embed.shape[0] != batch:
            audio_embed = audio_embed[:1].expand(batch, -1, -1) if audio_embed.shape[0] == 1 else audio_embed
        music = self.music_projection(audio_embed.to(dtype))                     # [B, N, music_dim]
        ids = torch.arange(music.shape[1], device=music.device, dtype=music.dtype).reshape(1, -1, 1)
        freqs = self.music_rope_embedder(ids).movedim(1, 2)                      # [1, N, 1, d/2, 2, 2]
        for layer in self.music_encoder:
            music = layer(music, freqs, options)
        size = (frames * MUSIC_TOKENS_PER_FRAME, self.dim)
        return F.interpolate(music.unsqueeze(1), size=size, mode="bilinear").squeeze(1)

    def dancer_rope(self, t: int, h: int, w: int, fps: float, device: Any, dtype: Any) -> torch.Tensor:
        """The 3-D RoPE of the grid: at 30 fps Wan's; otherwise frame i at `i * 30 / fps`, the last
        frame at `round(frames * 30 / fps) - 1` (ComfyUI's dancer `rope_encode`)."""
        if not global_rate(fps):
            return self.rope_encode(t, h, w, device=device, dtype=dtype)
        pt, ph, pw = self.patch_size
        t_len, h_len, w_len = (t + pt // 2) // pt, (h + ph // 2) // ph, (w + pw // 2) // pw
        step = BASE_FPS / float(fps)
        times = torch.arange(t_len, device=device, dtype=dtype) * step
        times[-1] = int(step * t_len + 0.5) - 1
        ids = torch.zeros((t_len, h_len, w_len, 3), device=device, dtype=dtype)
        ids[..., 0] += times.reshape(-1, 1, 1)
        ids[..., 1] += torch.arange(h_len, device=device, dtype=dtype).reshape(1, -1, 1)
        ids[..., 2] += torch.arange(w_len, device=device, dtype=dtype).reshape(1, 1, -1)
        return self.rope_embedder(ids.reshape(1, -1, 3)).movedim(1, 2)

    # -- the forward ------------------------------------------------------------------------------

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor,
                clip_fea: torch.Tensor | None = None, time_dim_concat: torch.Tensor | None = None,
                transformer_options: Mapping[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, in_dim, T, H, W]`, timestep `[B]` (0..1000), context `[B, Nt, text_dim]` ->
        `[B, out_dim, T, H, W]`; kwargs as the class docstring (and `reference_latent`)."""
        if x.ndim != 5 or x.shape[1] != self.in_dim:
            raise ValueError(f"Wan Dancer: the latent must be [batch, {self.in_dim}, frames, height, width], got "
                             f"{tuple(x.shape)}")
        if context.shape[-1] != self.text_dim:
            raise ValueError(f"Wan: the text conditioning is {context.shape[-1]} wide, the model takes {self.text_dim}")
        kwargs.pop("y", None)
        kwargs.pop("control", None)
        fps = kwargs.pop("fps", BASE_FPS)
        fps = float(fps.reshape(-1)[0]) if isinstance(fps, torch.Tensor) else float(fps)
        timestep = self.per_frame_timesteps(timestep, kwargs.pop("denoise_mask", None))
        t, h, w = x.shape[2:]
        x = pad_to_patch_size(x, self.patch_size)
        t_len = t
        if time_dim_concat is not None:
            x = torch.cat([x, pad_to_patch_size(time_dim_concat.to(x.dtype), self.patch_size)], dim=2)
            t_len = x.shape[2]
        freqs = self.dancer_rope(t_len, h, w, fps, x.device, x.dtype)
        return self.forward_orig(x, timestep, context, clip_fea=clip_fea, freqs=freqs,
                                 transformer_options=transformer_options, fps=fps, **kwargs)[:, :, :t, :h, :w]

    def forward_orig(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor,
                     clip_fea: torch.Tensor | None = None, freqs: torch.Tensor | None = None,
                     transformer_options: Mapping[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """Padded x `[B, in_dim, T, H, W]`, t `[B]`, freqs from `dancer_rope`; kwargs `fps`,
        `audio_embed`, `clip_fea_ref`, `audio_inject_scale`, `reference_latent`."""
        fps = float(kwargs.get("fps", BASE_FPS))
        scale = kwargs.get("audio_inject_scale", 1.0)
        scale = float(scale.reshape(-1)[0]) if isinstance(scale, torch.Tensor) else float(scale)
        use_global = global_rate(fps)
        x = _conv_in(self.patch_embedding_global if use_global else self.patch_embedding, x)  # [B, C, T', H', W']
        grid_sizes = x.shape[2:]
        x = x.flatten(2).transpose(1, 2)                                          # [B, L, C]
        seq_len = x.shape[1]
        e, e0 = self.time_modulation(t, x.dtype)
        full_ref = kwargs.get("reference_latent") if self.ref_conv is not None else None
        if full_ref is not None:
            full_ref = self.ref_conv(full_ref.to(x.dtype)).flatten(2).transpose(1, 2)
            x = torch.cat((full_ref, x), dim=1)

        options = {**(transformer_options or {}), "grid_sizes": tuple(grid_sizes)}
        context = self.text_embedding(context)                                    # [B, Nt, C]
        music = None
        if kwargs.get("audio_embed") is not None:
            music = self.music_tokens(kwargs["audio_embed"].to(x.device), grid_sizes[0], x.shape[0], x.dtype,
                                      options)
        image_tokens = 0
        if clip_fea is not None:
            context = torch.cat([self.img_emb(clip_fea.to(context.dtype)), context], dim=1)
            image_tokens += clip_fea.shape[-2]
        clip_fea_ref = kwargs.get("clip_fea_ref")
        if clip_fea_ref is not None:
            context = torch.cat([self.img_emb_refimage(clip_fea_ref.to(device=x.device, dtype=context.dtype)),
                                 context], dim=1)
            image_tokens += clip_fea_ref.shape[-2]

        def inject(i: int, x: torch.Tensor, block_options: dict[str, Any]) -> torch.Tensor:
            return self.music_injector(x, i, music, seq_len, scale, block_options)

        x = self.run_blocks(x, e0, freqs, context, image_tokens or None, options,
                            inject if music is not None else None)
        x = (self.head_global if use_global else self.head)(x, e)
        if full_ref is not None:
            x = x[:, full_ref.shape[1]:]
        return self.unpatchify(x, grid_sizes)


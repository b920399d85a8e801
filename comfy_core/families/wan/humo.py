"""Wan HuMo (human-centric video from text, image and audio; Chen et al. 2025, "HuMo: Human-Centric
Video Generation via Collaborative Multi-Modal Conditioning", arXiv 2509.08519): the Wan 2.1
text-to-video DiT with an audio cross-attention in every block and an audio projection.

State-dict names and behaviour are those of ComfyUI's `HumoWanModel` (`comfy/ldm/wan/model.py`,
`AudioProjModel`, `WanAttentionBlockAudio`, `AudioCrossAttentionWrapper`); written here:

- `audio_proj`: the audio features of each latent frame, `[B, F, 8 (window), 5 (Whisper layer
  groups), C (Whisper width)]`, flattened per frame -> Linear -> ReLU -> Linear -> ReLU -> Linear
  to `tokens * D_a` -> `tokens` rows of `D_a` (1536), each LayerNormed (`audio_proj_glob_1/2/3`,
  `audio_proj_glob_norm`, each under `.layer`). Tokens are frame-major: `[B, F * tokens, D_a]`.
- In each block, after the text cross-attention and before the FFN:
  `x += o(attn_f(norm_q(q(LN(x))), norm_k(k(a)), v(a)))` (`audio_cross_attn_wrapper.norm1_audio`,
  `.audio_cross_attn.q/k/v/o/norm_q/norm_k`), where the video tokens are cut into F equal groups
  (one per latent frame, the tokens are frame-major) and group f attends to frame f's audio
  tokens only.
- `reference_latent` `[B, in_dim, Tr, Hr, Wr]`: patch-embedded, its tokens appended after the
  video's with RoPE frames starting after the video's; its frames get zero audio features. The
  output keeps the video's tokens only.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.families.wan.blocks import WanAttentionBlock, WanSelfAttention, attention, repeat_e, split_modulation
from comfy_core.models.unet_blocks import operations_or_default

AUDIO_WINDOW = 8   # audio feature frames per latent frame (WanHuMoImageToVideo's window)
AUDIO_GROUPS = 5   # Whisper layer groups (4 means of 8 layers and layer 32)
HUMO_MARKER = "audio_proj.audio_proj_glob_1.layer.bias"  # ComfyUI's model_detection marker
HUMO_FIELDS = ("audio_token_num", "humo_audio_channels", "humo_audio_hidden", "humo_audio_dim")


class AudioProjection(nn.Module):
    """`[B, F, 8, 5, C]` audio features -> `[B, F, tokens, D_a]` (see the module docstring)."""

    def __init__(self, channels: int = 1280, hidden: int = 512, out_dim: int = 1536, tokens: int = 16,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.channels, self.tokens, self.out_dim = channels, tokens, out_dim
        self.in_features = AUDIO_WINDOW * AUDIO_GROUPS * channels
        for name, layer in (("audio_proj_glob_1", ops.Linear(self.in_features, hidden, **factory)),
                            ("audio_proj_glob_2", ops.Linear(hidden, hidden, **factory)),
                            ("audio_proj_glob_3", ops.Linear(hidden, tokens * out_dim, **factory)),
                            ("audio_proj_glob_norm", ops.LayerNorm(out_dim, **factory))):
            holder = nn.Module()
            holder.layer = layer
            setattr(self, name, holder)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        if audio.ndim != 5 or audio[0, 0].numel() != self.in_features:
            raise ValueError(f"Wan HuMo: audio_embed must be [batch, frames, {AUDIO_WINDOW}, {AUDIO_GROUPS}, "
                             f"{self.channels}], got {tuple(audio.shape)}")
        b, f = audio.shape[:2]
        h = torch.relu(self.audio_proj_glob_1.layer(audio.reshape(b * f, self.in_features)))
        h = torch.relu(self.audio_proj_glob_2.layer(h))
        tokens = self.audio_proj_glob_3.layer(h).reshape(b * f, self.tokens, self.out_dim)
        return self.audio_proj_glob_norm.layer(tokens).reshape(b, f, self.tokens, self.out_dim)


class FrameAudioAttention(WanSelfAttention):
    """Cross-attention where the video tokens of latent frame f attend to frame f's audio tokens."""

    tokens_per_frame = 16

    def forward(self, x: torch.Tensor, context: torch.Tensor,  # type: ignore[override]
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        b, length, width = x.shape
        per_frame = self.tokens_per_frame
        if context.shape[1] % per_frame:
            raise ValueError(f"Wan HuMo: {context.shape[1]} audio tokens are not a multiple of {per_frame} per frame")
        groups = b * (context.shape[1] // per_frame)
        if (b * length) % groups:
            raise ValueError(f"Wan HuMo: {length} video tokens cannot be split over "
                             f"{context.shape[1] // per_frame} audio frames")
        q = self.norm_q(self.q(x)).reshape(groups, -1, width)
        k = self.norm_k(self.k(context)).reshape(groups, per_frame, width)
        v = self.v(context).reshape(groups, per_frame, width)
        out = attention(q, k, v, self.num_heads, transformer_options)
        return self.o(out.reshape(b, length, width))


class AudioCrossAttentionWrapper(nn.Module):
    """LayerNorm (affine) -> frame-wise audio cross-attention, added to the tokens."""

    def __init__(self, dim: int, kv_dim: int, num_heads: int, qk_norm: bool = True, eps: float = 1e-6,
                 tokens_per_frame: int = 16, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.audio_cross_attn = FrameAudioAttention(dim, num_heads, qk_norm=qk_norm, eps=eps, kv_dim=kv_dim,
                                                    dtype=dtype, device=device, operations=ops)
        self.audio_cross_attn.tokens_per_frame = tokens_per_frame
        self.norm1_audio = ops.LayerNorm(dim, eps, elementwise_affine=True, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, audio: torch.Tensor,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        return x + self.audio_cross_attn(self.norm1_audio(x), audio, transformer_options=transformer_options)


class HuMoAttentionBlock(WanAttentionBlock):
    """A Wan block with the audio cross-attention between the text cross-attention and the FFN."""

    def __init__(self, cross_attn_type: str, dim: int, ffn_dim: int, num_heads: int,
                 window_size: tuple[int, int] = (-1, -1), qk_norm: bool = True, cross_attn_norm: bool = False,
                 eps: float = 1e-6, audio_dim: int = 1536, tokens_per_frame: int = 16, dtype: Any = None,
                 device: Any = None, operations: Any = None) -> None:
        super().__init__(cross_attn_type, dim, ffn_dim, num_heads, window_size, qk_norm, cross_attn_norm, eps,
                         dtype=dtype, device=device, operations=operations)
        self.audio_cross_attn_wrapper = AudioCrossAttentionWrapper(dim, audio_dim, num_heads, qk_norm, eps,
                                                                   tokens_per_frame, dtype=dtype, device=device,
                                                                   operations=operations)

    def forward(self, x: torch.Tensor, e: torch.Tensor, freqs: torch.Tensor, context: torch.Tensor,
                context_img_len: int | None = 257, audio: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        e = split_modulation(self.modulation, e, x, 6)
        y = self.self_attn(torch.addcmul(repeat_e(e[0], x), self.norm1(x), 1 + repeat_e(e[1], x)), freqs,
                           transformer_options=transformer_options)
        x = torch.addcmul(x, y, repeat_e(e[2], x))
        del y
        x = x + self.cross_attn(self.norm3(x), context, context_img_len=context_img_len,
                                transformer_options=transformer_options)
        if audio is not None:
            x = self.audio_cross_attn_wrapper(x, audio, transformer_options=transformer_options)
        y = self.ffn(torch.addcmul(repeat_e(e[3], x), self.norm2(x), 1 + repeat_e(e[4], x)))
        return torch.addcmul(x, y, repeat_e(e[5], x))


def humo_fields(tensors: Mapping[str, Any], prefix: str, shape: Any, dim: int, num_layers: int,
                error: type[Exception]) -> dict[str, Any]:
    """HuMo's `WanConfig` entries from names and shapes (ComfyUI fixes the Whisper width 1280, the
    hidden 512, the audio width 1536 and 16 tokens; tiny files change them)."""
    hidden, in_features = shape("audio_proj.audio_proj_glob_1.layer.weight")
    if in_features % (AUDIO_WINDOW * AUDIO_GROUPS):
        raise error(f"Wan HuMo: {prefix}audio_proj.audio_proj_glob_1.layer.weight takes {in_features} features, "
                    f"not {AUDIO_WINDOW} x {AUDIO_GROUPS} x a Whisper width")
    out_dim = shape("audio_proj.audio_proj_glob_norm.layer.weight")[0]
    projected, hidden3 = shape("audio_proj.audio_proj_glob_3.layer.weight")
    if hidden3 != hidden or projected % out_dim or tuple(shape("audio_proj.audio_proj_glob_2.layer.weight")) != (
            hidden, hidden):
        raise error(f"Wan HuMo: the audio projection under {prefix}audio_proj has inconsistent shapes")
    for i in range(num_layers):
        key = f"blocks.{i}.audio_cross_attn_wrapper.audio_cross_attn.k.weight"
        if tuple(shape(key)) != (dim, out_dim):
            raise error(f"Wan HuMo: {prefix}{key} has shape {tuple(shape(key))}, expected {(dim, out_dim)}")
    return {"model_type": "humo", "audio_token_num": projected // out_dim,
            "humo_audio_channels": in_features // (AUDIO_WINDOW * AUDIO_GROUPS), "humo_audio_hidden": hidden,
            "humo_audio_dim": out_dim}


def humo_blocks(config: Any, ops: Any, factory: dict[str, Any]) -> nn.ModuleList:
    """The HuMo blocks of a `WanConfig`."""
    return nn.ModuleList(
        HuMoAttentionBlock("t2v_cross_attn", config.dim, config.ffn_dim, config.num_heads, config.window_size,
                           config.qk_norm, config.cross_attn_norm, config.eps, audio_dim=config.humo_audio_dim,
                           tokens_per_frame=config.audio_token_num, operations=ops, **factory)
        for _ in range(config.num_layers))


def humo_projection(config: Any, ops: Any, factory: dict[str, Any]) -> AudioProjection:
    """The audio projection of a `WanConfig`."""
    return AudioProjection(config.humo_audio_channels, config.humo_audio_hidden, config.humo_audio_dim,
                           config.audio_token_num, operations=ops, **factory)


def humo_forward_orig(model: Any, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, freqs: torch.Tensor,
                      transformer_options: Mapping[str, Any] | None, conv_in: Any,
                      audio_embed: torch.Tensor | None = None, reference_latent: torch.Tensor | None = None,
                      **kwargs: Any) -> torch.Tensor:
    """HuMo's forward on the padded latent (see the module docstring)."""
    frames = x.shape[2]
    x = conv_in(model.patch_embedding, x)
    grid_sizes = x.shape[2:]
    x = x.flatten(2).transpose(1, 2)
    e, e0 = model.time_modulation(t, x.dtype)
    if reference_latent is not None:
        if reference_latent.ndim != 5 or reference_latent.shape[1] != model.in_dim:
            raise ValueError(f"Wan HuMo: reference_latent must be [batch, {model.in_dim}, frames, height, width], "
                             f"got {tuple(reference_latent.shape)}")
        ref = conv_in(model.patch_embedding, reference_latent.to(x.dtype)).flatten(2).transpose(1, 2)
        ref_freqs = model.rope_encode(*reference_latent.shape[-3:], t_start=frames, device=x.device, dtype=x.dtype)
        x = torch.cat([x, ref], dim=1)
        freqs = torch.cat([freqs, ref_freqs], dim=1)
    context = model.text_embedding(context)
    audio = None
    if audio_embed is not None:
        audio_embed = audio_embed.to(x.dtype)
        if reference_latent is not None:
            pad = audio_embed.new_zeros((audio_embed.shape[0], reference_latent.shape[-3], *audio_embed.shape[2:]))
            audio_embed = torch.cat([audio_embed, pad], dim=1)
        audio = model.audio_proj(audio_embed).flatten(1, 2)  # [B, F * tokens, D_a]
    x = model.run_blocks(x, e0, freqs, context, None, transformer_options, block_kwargs={"audio": audio})
    x = model.head(x, e)
    return model.unpatchify(x, grid_sizes)


# -- WanHuMoImageToVideo's audio features ------------------------------------------------------

WHISPER_STATES = 33       # Whisper large-v3: the embedding output and 32 layers' (the last one normed)
WHISPER_WIDTH = 1280      # the zero audio of a node given no audio (ComfyUI fixes the width)
SAMPLES_PER_FRAME = 640   # 16 kHz audio at 25 fps
AUDIO_FPS, VIDEO_FPS = 50, 25


def humo_audio_features(all_layers: Any, audio_samples: int) -> torch.Tensor:
    """Whisper's hidden states (33 of `[B, T, C]`, 50 per second) -> `[T', 5, C]` at 25 per second
    for the first clip of the batch: the means of states 0-7, 8-15, 16-23, 24-31 and state 32, cut
    to the audio's length (`audio_samples // 640` video frames, two states each) and linearly
    interpolated (corners aligned), as ComfyUI's WanHuMoImageToVideo."""
    from comfy_core.families.wan.s2v_audio import linear_interpolation

    if len(all_layers) < WHISPER_STATES:
        raise ValueError(f"Wan HuMo: the audio features need {WHISPER_STATES} hidden states (Whisper large-v3), "
                         f"got {len(all_layers)}")
    states = torch.stack(list(all_layers), dim=2)[:, :(int(audio_samples) // SAMPLES_PER_FRAME) * 2]  # [B, T, L, C]
    groups = [states[:, :, i:i + 8].mean(dim=2) for i in (0, 8, 16, 24)] + [states[:, :, 32]]
    groups = [linear_interpolation(g.float(), AUDIO_FPS, VIDEO_FPS) for g in groups]
    return torch.stack(groups, dim=2)[0]


def humo_audio_windows(features: torch.Tensor, length: int, audio_shift: int = 2) -> torch.Tensor:
    """`[T, 5, C]` per video frame -> `[latent_frames, 8, 5, C]`: latent frame 0 takes 3 zero rows
    then frames -2..2, latent frame i >= 1 frames `4(i-1) + 1 - shift .. 4i + shift` (8 rows);
    frames outside the audio are zeros."""
    def frame(i: int) -> torch.Tensor:
        return features[i] if 0 <= i < features.shape[0] else features.new_zeros(features.shape[1:])

    windows = []
    for i in range(1 + (length - 1) // 4):
        if i == 0:
            rows = [features.new_zeros(features.shape[1:])] * 3 + [frame(j) for j in range(-2, 3)]
        else:
            rows = [frame(j) for j in range(4 * (i - 1) + 1 - audio_shift, 4 * i + 1 + audio_shift)]
        windows.append(torch.stack(rows))
    return torch.stack(windows)

"""Wan 2.2 S2V (speech-to-video, 14B): the Wan DiT with audio injection and frame-pack motion
latents, after ComfyUI's `comfy/ldm/wan/model.py` (`WanModel_S2V`, `CausalAudioEncoder`,
`MotionEncoder_tc`, `AudioInjector_WAN`, `AdaLayerNorm`, `FramePackMotioner`) and the reference
code of Wan-Video/Wan2.2 (`wan/modules/s2v/`); read, written here. State-dict names are those.

The network, beyond the Wan 2.1 text-to-video DiT it extends:

- **audio encoder** (`casual_audio_encoder`): the wav2vec2 hidden states `[B, L, D_a, F]` (L layers,
  4 audio frames per latent frame) mixed by `silu(weights)` normalised over the layers, then a
  causal temporal conv stack (kernel 3, replicate left padding, strides 1-2-2: F -> F/4) with
  parameter-free LayerNorms and SiLU; a "local" branch with `num_audio_token` heads gives
  `[B, T, n + 1, C]` (a learned padding token appended), a "global" branch `[B, T, 1, C]`
  through `final_linear` (AdaIN's conditioning).
- **audio injection** (`audio_injector`): after the blocks of `audio_inject_layers` (ComfyUI's
  fixed [0, 4, 8, ..., 39] of the 40-block model), the video tokens of each latent frame, AdaLN'd
  by that frame's global audio token (`injector_adain_layers`, "attn_norm" mode), cross-attend
  (q/k RMS-normed, `injector.N`) to the frame's n + 1 audio tokens; the result is added to the
  video tokens (the reference / motion tokens after them are untouched).
- **conditioning tokens**: `trainable_cond_mask` (3 rows) added to the video tokens (row 0), to
  the patch-embedded `reference_latent` (row 1; RoPE frame `max(30, T + 9)`, timestep 0) and to the
  frame-packed `reference_motion` (row 2); `cond_encoder` (a patch conv) adds the `control_video`
  latent to the video tokens.
- **frame pack** (`frame_packer`): the last 19 motion latent frames (zero-padded in front),
  split 16 / 2 / 1 from the oldest, patch-embedded at 4x / 2x / 1x coarser kernels
  (`proj_4x`, `proj_2x`, `proj`), RoPE frames -19.. / -3 / -1 with the coarse grids' positions
  spread over the full grid.
- **timesteps**: per latent frame; with reference motion ComfyUI repeats each entry twice and
  appends three zeros (its rows are then spread over the tokens by the blocks' `repeat_e`,
  which this keeps, so outputs agree).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.wan.blocks import WanT2VCrossAttention, cast_param, sinusoidal_embedding_1d
from comfy_core.models.unet_blocks import operations_or_default

# ComfyUI's WanModel_S2V defaults (not in the weights).
AUDIO_INJECT_LAYERS = (0, 4, 8, 12, 16, 20, 24, 27, 30, 33, 36, 39)
ZIP_FRAME_BUCKETS = (1, 2, 16)
MOTION_LATENT_FRAMES = sum(ZIP_FRAME_BUCKETS)  # 19
REFERENCE_ROPE_FRAME = 30
MOTION_CHANNELS = 16


class CausalConv1d(nn.Module):
    """A Conv1d over time padded on the left only, by repeating the first frame (`replicate`)."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, ops: Any = None,
                 **factory: Any) -> None:
        super().__init__()
        self.pad = kernel - 1
        self.conv = operations_or_default(ops).Conv1d(cin, cout, kernel, stride=stride, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T]
        return self.conv(F.pad(x, (self.pad, 0), mode="replicate"))


class MotionEncoder(nn.Module):
    """The causal temporal encoder of the mixed audio features `[B, F, D_a]` (ComfyUI's
    `MotionEncoder_tc`): -> local `[B, F/4, heads + 1, C]` (and global `[B, F/4, 1, C]`)."""

    def __init__(self, in_dim: int, hidden_dim: int, num_heads: int, need_global: bool = True, ops: Any = None,
                 **factory: Any) -> None:
        super().__init__()
        ops = operations_or_default(ops)
        self.num_heads, self.need_global, self.hidden_dim = num_heads, need_global, hidden_dim
        quarter = hidden_dim // 4
        self.conv1_local = CausalConv1d(in_dim, quarter * num_heads, 3, 1, ops, **factory)
        if need_global:
            self.conv1_global = CausalConv1d(in_dim, quarter, 3, 1, ops, **factory)
            self.final_linear = ops.Linear(hidden_dim, hidden_dim, **factory)
        self.conv2 = CausalConv1d(quarter, hidden_dim // 2, 3, 2, ops, **factory)
        self.conv3 = CausalConv1d(hidden_dim // 2, hidden_dim, 3, 2, ops, **factory)
        self.padding_tokens = nn.Parameter(torch.empty(1, 1, 1, hidden_dim, **factory))

    @staticmethod
    def _norm_act(x: torch.Tensor) -> torch.Tensor:  # [N, T, C]: parameter-free LayerNorm, SiLU
        return F.silu(F.layer_norm(x, (x.shape[-1],), eps=1e-6))

    def _tail(self, x: torch.Tensor) -> torch.Tensor:
        """`[N, T, C/4]` (after the first conv) -> `[N, T/4, C]`."""
        x = self._norm_act(x)
        x = self._norm_act(self.conv2(x.transpose(1, 2)).transpose(1, 2))
        return self._norm_act(self.conv3(x.transpose(1, 2)).transpose(1, 2))

    def forward(self, x: torch.Tensor) -> Any:
        b, frames, _ = x.shape
        channels_first = x.transpose(1, 2)                                        # [B, D_a, F]
        local = self.conv1_local(channels_first)                                  # [B, n * C/4, F]
        local = local.reshape(b, self.num_heads, -1, frames).transpose(2, 3)      # [B, n, F, C/4]
        local = self._tail(local.reshape(b * self.num_heads, frames, -1))         # [B*n, T, C]
        local = local.reshape(b, self.num_heads, local.shape[1], -1).transpose(1, 2)  # [B, T, n, C]
        pad = cast_param(self.padding_tokens, local).expand(b, local.shape[1], 1, -1)
        local = torch.cat([local, pad], dim=2)                                    # [B, T, n + 1, C]
        if not self.need_global:
            return local
        glob = self._tail(self.conv1_global(channels_first).transpose(1, 2))      # [B, T, C]
        return self.final_linear(glob)[:, :, None], local


class CausalAudioEncoder(nn.Module):
    """Audio hidden states `[B, L, D_a, F]` -> (global, local) audio tokens (see MotionEncoder)."""

    def __init__(self, dim: int, num_layers: int, out_dim: int, num_token: int, need_global: bool, ops: Any = None,
                 **factory: Any) -> None:
        super().__init__()
        self.encoder = MotionEncoder(dim, out_dim, num_token, need_global, ops, **factory)
        self.weights = nn.Parameter(torch.empty(1, num_layers, 1, 1, **factory))

    def forward(self, features: torch.Tensor) -> Any:
        w = F.silu(cast_param(self.weights, features))
        mixed = (features * w / w.sum(dim=1, keepdim=True)).sum(dim=1)            # [B, D_a, F]
        return self.encoder(mixed.transpose(1, 2))


class AdaLayerNorm(nn.Module):
    """`norm(x) * (1 + scale) + shift`, (shift, scale) = `linear(silu(temb))` (no affine norm, eps 1e-5)."""

    def __init__(self, embedding_dim: int, output_dim: int, ops: Any = None, **factory: Any) -> None:
        super().__init__()
        self.linear = operations_or_default(ops).Linear(embedding_dim, output_dim, **factory)
        self.width = output_dim // 2

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        shift, scale = self.linear(F.silu(temb)).chunk(2, dim=1)                  # [N, C] each
        return F.layer_norm(x, (self.width,), eps=1e-5) * (1 + scale[:, None]) + shift[:, None]


class AudioInjector(nn.Module):
    """Per-frame cross-attention from the video tokens to the audio tokens after chosen blocks."""

    def __init__(self, dim: int, num_heads: int, inject_layers: tuple[int, ...], enable_adain: bool,
                 ops: Any = None, **factory: Any) -> None:
        super().__init__()
        self.block_to_injector = {block: i for i, block in enumerate(inject_layers)}
        count = len(inject_layers)
        self.enable_adain = enable_adain
        self.injector = nn.ModuleList(
            WanT2VCrossAttention(dim, num_heads, (-1, -1), True, 1e-6, operations=ops, **factory) for _ in range(count))
        if enable_adain:
            self.injector_adain_layers = nn.ModuleList(
                AdaLayerNorm(dim, dim * 2, ops, **factory) for _ in range(count))

    def forward(self, x: torch.Tensor, block: int, audio: torch.Tensor, audio_global: torch.Tensor | None,
                seq_len: int, transformer_options: Any = None) -> torch.Tensor:
        index = self.block_to_injector.get(block)
        if index is None:
            return x
        b, frames, tokens, c = audio.shape
        video = x[:, :seq_len].reshape(b * frames, seq_len // frames, c)          # tokens of each frame
        if self.enable_adain and audio_global is not None:
            query = self.injector_adain_layers[index](video, audio_global.reshape(b * frames, -1, c)[:, 0])
        else:
            query = F.layer_norm(video, (c,), eps=1e-6)
        out = self.injector[index](query, audio.reshape(b * frames, tokens, c),
                                   transformer_options=transformer_options)
        return torch.cat([x[:, :seq_len] + out.reshape(b, seq_len, c), x[:, seq_len:]], dim=1)


class FramePackMotioner(nn.Module):
    """The last 19 motion latent frames as multi-scale tokens and their RoPE rotations."""

    def __init__(self, dim: int, ops: Any = None, **factory: Any) -> None:
        super().__init__()
        ops = operations_or_default(ops)
        self.proj = ops.Conv3d(MOTION_CHANNELS, dim, kernel_size=(1, 2, 2), stride=(1, 2, 2), **factory)
        self.proj_2x = ops.Conv3d(MOTION_CHANNELS, dim, kernel_size=(2, 4, 4), stride=(2, 4, 4), **factory)
        self.proj_4x = ops.Conv3d(MOTION_CHANNELS, dim, kernel_size=(4, 8, 8), stride=(4, 8, 8), **factory)

    def forward(self, motion: torch.Tensor, model: Any) -> tuple[torch.Tensor, torch.Tensor]:
        b, _, frames, h, w = motion.shape
        packed = motion.new_zeros(b, MOTION_CHANNELS, MOTION_LATENT_FRAMES, h, w)
        keep = min(MOTION_LATENT_FRAMES, frames)
        if keep > 0:
            packed[:, :, -keep:] = motion[:, :, -keep:]
        oldest, middle, last = packed.split(ZIP_FRAME_BUCKETS[::-1], dim=2)       # 16, 2, 1 frames
        last = self.proj(last)
        middle = self.proj_2x(middle)
        oldest = self.proj_4x(oldest)
        tokens = torch.cat([t.flatten(2).transpose(1, 2) for t in (last, middle, oldest)], dim=1)
        kw = {"device": motion.device, "dtype": motion.dtype}
        rope = torch.cat([model.rope_encode(1, h, w, t_start=-1, **kw),
                          model.rope_encode(1, h, w, t_start=-3, steps_h=middle.shape[-2], steps_w=middle.shape[-1],
                                            **kw),
                          model.rope_encode(4, h, w, t_start=-19, steps_h=oldest.shape[-2], steps_w=oldest.shape[-1],
                                            **kw)], dim=1)
        return tokens, rope


def s2v_fields(tensors: Mapping[str, Any], prefix: str, shape: Any, dim: int, error: type[Exception]) -> dict[str, Any]:
    """The S2V entries of `WanConfig` from names and shapes (ComfyUI fixes them; tiny files change
    the audio width, the layer count of the audio features and the token count)."""
    local = shape("casual_audio_encoder.encoder.conv1_local.conv.weight")         # [n * C/4, D_a, 3]
    if local[0] % (dim // 4):
        raise error(f"Wan S2V: {prefix}casual_audio_encoder.encoder.conv1_local.conv.weight has {local[0]} "
                    f"outputs, not a multiple of {dim // 4}")
    injectors = sum(1 for k in tensors if k.startswith(prefix + "audio_injector.injector.")
                    and k.endswith(".q.weight"))
    if injectors != len(AUDIO_INJECT_LAYERS):
        raise error(f"Wan S2V: {injectors} audio injectors under {prefix}audio_injector.injector, expected "
                    f"{len(AUDIO_INJECT_LAYERS)}")
    cond = prefix + "cond_encoder.weight"
    return {"model_type": "s2v", "audio_dim": local[1], "num_audio_token": local[0] // (dim // 4),
            "audio_layers": shape("casual_audio_encoder.weights")[1],
            "enable_adain": prefix + "audio_injector.injector_adain_layers.0.linear.weight" in tensors,
            "cond_dim": shape("cond_encoder.weight")[1] if cond in tensors else 0}


def add_s2v_modules(model: nn.Module, audio_dim: int, audio_layers: int, num_audio_token: int, enable_adain: bool,
                    cond_dim: int, ops: Any, factory: dict[str, Any]) -> None:
    """The S2V modules on a Wan DiT `model` (its `dim`, `num_heads`, `patch_size`)."""
    ops = operations_or_default(ops)
    model.trainable_cond_mask = ops.Embedding(3, model.dim, **factory)
    model.casual_audio_encoder = CausalAudioEncoder(audio_dim, audio_layers, model.dim, num_audio_token,
                                                    enable_adain, ops, **factory)
    if cond_dim > 0:
        model.cond_encoder = ops.Conv3d(cond_dim, model.dim, kernel_size=model.patch_size, stride=model.patch_size,
                                        **factory)
    model.audio_injector = AudioInjector(model.dim, model.num_heads, AUDIO_INJECT_LAYERS, enable_adain, ops,
                                         **factory)
    model.frame_packer = FramePackMotioner(model.dim, ops, **factory)


def s2v_forward_orig(model: Any, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, freqs: torch.Tensor,
                     transformer_options: Mapping[str, Any] | None, conv_in: Any, run_blocks: Any,
                     audio_embed: torch.Tensor | None = None, reference_latent: torch.Tensor | None = None,
                     control_video: torch.Tensor | None = None, reference_motion: torch.Tensor | None = None,
                     **unused: Any) -> torch.Tensor:
    """WanModel_S2V's `forward_orig`: padded latent `[B, 16, T, H, W]` -> `[B, out, T, H, W]`."""
    audio = audio_global = None
    if audio_embed is not None:
        audio_global, audio = model.casual_audio_encoder(audio_embed[..., :x.shape[2] * 4].to(x.dtype))
    time = x.shape[2]
    x = conv_in(model.patch_embedding, x)                                         # [B, C, T', H', W']
    if control_video is not None:
        x = x + model.cond_encoder(control_video.to(x.dtype))
    if t.ndim == 1:
        t = t[:, None].repeat(1, x.shape[2])
    grid_sizes = x.shape[2:]
    x = x.flatten(2).transpose(1, 2)                                              # [B, L, C]
    seq_len = x.shape[1]
    rows = cast_param(model.trainable_cond_mask.weight, x)                        # [3, C]
    x = x + rows[0]
    if reference_latent is not None:
        ref = conv_in(model.patch_embedding, reference_latent.to(x.dtype)).flatten(2).transpose(1, 2) + rows[1]
        rt, rh, rw = reference_latent.shape[-3:]
        x = torch.cat([x, ref], dim=1)
        freqs = torch.cat([freqs, model.rope_encode(rt, rh, rw, t_start=max(REFERENCE_ROPE_FRAME, time + 9),
                                                    device=x.device, dtype=x.dtype)], dim=1)
        t = torch.cat([t, t.new_zeros(t.shape[0], rt)], dim=1)
    if reference_motion is not None:
        motion, motion_freqs = model.frame_packer(reference_motion.to(x.dtype), model)
        x = torch.cat([x, motion + rows[2]], dim=1)
        freqs = torch.cat([freqs, motion_freqs], dim=1)
        t = torch.cat([torch.repeat_interleave(t, 2, dim=1), t.new_zeros(t.shape[0], 3)], dim=1)
    e = model.time_embedding(sinusoidal_embedding_1d(model.freq_dim, t.flatten()).to(dtype=x.dtype))
    e = e.reshape(t.shape[0], -1, e.shape[-1])                                    # [B, n, C]
    e0 = model.time_projection(e).unflatten(2, (6, model.dim))                    # [B, n, 6, C]
    context = model.text_embedding(context)

    def after_block(i: int, x: torch.Tensor, options: Any) -> torch.Tensor:
        if audio is None:
            return x
        return model.audio_injector(x, i, audio, audio_global, seq_len, options)

    x = run_blocks(x, e0, freqs, context, None, transformer_options, after_block)
    return model.unpatchify(model.head(x, e), grid_sizes)

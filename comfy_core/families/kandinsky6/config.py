"""Kandinsky 6's DiT configuration read from a file's tensor names and shapes.

Behaviour of ComfyUI's `comfy/ldm/kandinsky6/detection.py` (`detect_kandinsky6`: the required
keys, the diffusers renames, the sizes read from the weights); written here. One difference, by
this engine's rule that widths come from the weights: any consistent size is accepted (ComfyUI
accepts only the released Pro (4096 wide) and Lite (1792 wide) sizes), so that tiny test files
load through the same path.

Sizes: `model_dim` / `model_dim_a` (video / audio stream widths), `time_dim(_a)`, `ff_dim(_a)`,
`head_dim` (video: the query norm's width, split into RoPE axes (t, h, w) in the released ratio
2:3:3), `head_dim_a`, text widths (`in_text_dim`: Qwen2.5-VL, `in_text_dim2`: CLIP-L pooled),
block counts, `in_visual_dim` (the visual input is `[noisy, condition, mask]` = 2C + 1 channels
per patch of (1, 2, 2)), `n_grid` (the PiFlow distilled heads: output width / 16),
`visual_token_types` (2 with the I2VA reference-tail embeddings, 0 without).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from comfy_core.families.kandinsky6 import contract as c

REQUIRED_KEYS = (
    "audio_embeddings.in_layer.weight", "visual_embeddings.in_layer.weight", "out_layer.out_layer.weight",
    "video_time_embeddings.out_layer.weight", "audio_time_embeddings.out_layer.weight",
    "video_text_embeddings.in_layer.weight", "video_pooled_text_embeddings.in_layer.weight",
    "visual_blocks.0.videoT.feed_forward.in_layer.weight", "visual_blocks.0.audioT.feed_forward.in_layer.weight",
    "visual_blocks.0.videoT.self_attention.query_norm.weight",
    "visual_blocks.0.audioT.self_attention.query_norm.weight",
    "visual_blocks.0.va_modulation.out_layer.weight", "visual_blocks.0.va_cross_attention.to_key.weight",
)

# The diffusers export's module names -> the release's (ComfyUI's `_native_key`).
DIFFUSERS_PREFIXES = (("visual_transformer_blocks.", "visual_blocks."), ("audio_out_layer.", "audio_outLayer."))
DIFFUSERS_INNER = ((".timestep_embedder.linear_1.", ".in_layer."), (".timestep_embedder.linear_2.", ".out_layer."),
                   (".video_dec_block.", ".videoT."), (".audio_dec_block.", ".audioT."),
                   (".feed_forward.net.0.proj.", ".feed_forward.in_layer."),
                   (".feed_forward.net.2.", ".feed_forward.out_layer."), (".attn.", ".self_attention."))


class Kandinsky6ConfigError(ValueError):
    """Weights that look like Kandinsky 6's but do not fit together."""


def native_key(name: str) -> str:
    """A release (native) module name for a diffusers-layout or release `name`."""
    for source, target in DIFFUSERS_PREFIXES:
        if name.startswith(source):
            name = target + name[len(source):]
            break
    for source, target in DIFFUSERS_INNER:
        name = name.replace(source, target)
    return name


def is_kandinsky6(names: Any, prefix: str = "") -> bool:
    """Whether the names under `prefix` hold every key ComfyUI's detection requires."""
    native = {native_key(n[len(prefix):]) for n in names if n.startswith(prefix)}
    return all(key in native for key in REQUIRED_KEYS)


@dataclass(frozen=True)
class Kandinsky6Config:
    model_dim: int
    model_dim_a: int
    time_dim: int
    time_dim_a: int
    ff_dim: int
    ff_dim_a: int
    head_dim: int
    head_dim_a: int
    in_text_dim: int
    in_text_dim2: int
    in_visual_dim: int
    in_audio_dim: int
    n_grid: int
    num_text_blocks: int
    num_visual_blocks: int
    visual_token_types: int
    cross_gates: bool

    @property
    def axes_dims(self) -> tuple[int, int, int]:
        """RoPE axes (t, h, w) in the released 32:48:48 ratio (Pro; Lite 16:24:24)."""
        t = self.head_dim // 4
        return (t, (self.head_dim - t) // 2, self.head_dim - t - (self.head_dim - t) // 2)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Kandinsky6Config":
        shapes = {native_key(n[len(prefix):]): tuple(v.shape) for n, v in tensors.items() if n.startswith(prefix)}
        missing = [key for key in REQUIRED_KEYS if key not in shapes]
        if missing:
            raise Kandinsky6ConfigError(f"not a Kandinsky 6 DiT: missing {missing[:3]}")
        patch = c.PATCH_SIZE[0] * c.PATCH_SIZE[1] * c.PATCH_SIZE[2]
        model_dim, visual_in = shapes["visual_embeddings.in_layer.weight"]
        if visual_in % patch or (visual_in // patch - 1) % 2:
            raise Kandinsky6ConfigError(f"visual input width {visual_in} is not (2C + 1) x {patch}")
        out_visual = shapes["out_layer.out_layer.weight"][0]
        if out_visual % (patch * c.VIDEO_CHANNELS):
            raise Kandinsky6ConfigError(f"visual output width {out_visual} is not whole {c.VIDEO_CHANNELS}-channel grids")
        n_grid = out_visual // (patch * c.VIDEO_CHANNELS)
        model_dim_a, in_audio = shapes["audio_embeddings.in_layer.weight"]
        audio_out = shapes.get("audio_outLayer.out_layer.weight")
        if audio_out is not None and audio_out[0] != in_audio * n_grid:
            raise Kandinsky6ConfigError(f"audio output width {audio_out[0]} for {n_grid} grid(s) of {in_audio}")

        def count(stem: str, inner: str) -> int:
            i = 0
            while f"{stem}.{i}.{inner}" in shapes:
                i += 1
            return i

        text_blocks = count("video_text_transformer_blocks", "self_attention.to_query.weight")
        audio_text_blocks = count("audio_text_transformer_blocks", "self_attention.to_query.weight")
        if audio_text_blocks != text_blocks:
            raise Kandinsky6ConfigError(f"{text_blocks} video text blocks but {audio_text_blocks} audio ones")
        va = shapes["visual_blocks.0.va_modulation.out_layer.weight"][0]
        if va not in (2 * model_dim + model_dim_a, 3 * model_dim):
            raise Kandinsky6ConfigError(f"va_modulation width {va} fits neither modulation layout")
        token_types = shapes.get("visual_token_type_embeddings.weight", (0,))[0]
        return cls(model_dim=model_dim, model_dim_a=model_dim_a,
                   time_dim=shapes["video_time_embeddings.out_layer.weight"][0],
                   time_dim_a=shapes["audio_time_embeddings.out_layer.weight"][0],
                   ff_dim=shapes["visual_blocks.0.videoT.feed_forward.in_layer.weight"][0],
                   ff_dim_a=shapes["visual_blocks.0.audioT.feed_forward.in_layer.weight"][0],
                   head_dim=shapes["visual_blocks.0.videoT.self_attention.query_norm.weight"][0],
                   head_dim_a=shapes["visual_blocks.0.audioT.self_attention.query_norm.weight"][0],
                   in_text_dim=shapes["video_text_embeddings.in_layer.weight"][1],
                   in_text_dim2=shapes["video_pooled_text_embeddings.in_layer.weight"][1],
                   in_visual_dim=(visual_in // patch - 1) // 2, in_audio_dim=in_audio, n_grid=n_grid,
                   num_text_blocks=text_blocks,
                   num_visual_blocks=count("visual_blocks", "videoT.self_attention.to_query.weight"),
                   visual_token_types=token_types, cross_gates=va == 2 * model_dim + model_dim_a)

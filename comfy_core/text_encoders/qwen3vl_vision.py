"""Qwen3-VL's vision tower (Qwen Team 2025, "Qwen3-VL Technical Report"): a ViT over 16-pixel patches
of two identical frames with learned, bilinearly resampled position embeddings and 2-D rotary
positions, whose 2x2 neighbouring patches are merged into one language-model token, plus DeepStack
(Meng et al. 2024, "DeepStack: Deeply Stacking Visual Tokens is Surprisingly Simple and Effective
for LMMs"): the outputs of a few intermediate blocks, merged the same way by their own mergers,
which the language model adds to its hidden states at the image positions after its first blocks.
As ComfyUI's `comfy/text_encoders/qwen35.py` (`Qwen35VisionModel`) and `qwen3vl.py`
(`Qwen3VLVisionModel`, `Qwen3VLDeepstackMerger`) run it; transformers' `Qwen3VLVisionModel` is the
numerics reference and gives the modules and names (built on the meta device, loaded by
`qwen3vl_load.py`); the forward pass is ours, every layer in float32.

What differs from Qwen2.5-VL's tower (`qwen25vl_vision.py`, whose preprocessing and 2-D RoPE are
reused here): 16-pixel patches (32-pixel resize multiples), pixels normalised to [-1, 1] (mean =
std = 0.5), a biased patch embedding, learned position embeddings (a square table resampled
bilinearly, corners aligned, to each image's patch grid, listed merge-block by merge-block), LayerNorm
(with bias, eps 1e-6) instead of RMSNorm, a GELU-tanh MLP (`linear_fc1` / `linear_fc2`) instead of
SwiGLU, full attention over each frame in every block (no windows), and a merger that normalises
each patch before the 2x2 concatenation, then Linear-GELU-Linear; the DeepStack mergers normalise
after the concatenation instead.

`Qwen3VLVisionConfig` reads the shape from the tower's weights (names relative to `visual.`). What
the shapes cannot show is fixed as ComfyUI fixes it (`QWEN3VL_VISION_COMMON`): 16 heads, 2-D RoPE
theta 1e4, and which blocks feed DeepStack: blocks 5, 11, 17 of the 4B's 24-block, 1024-wide tower,
8, 16, 24 of the 8B's 27-block, 1152-wide one; a tower of another size (a reduced test model) taps
its `n` mergers' blocks evenly, block `(k + 1) * depth // (n + 1) - 1` for merger k.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.calling import attention_in_force
from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.decoder_llm import apply_rotary
from comfy_core.text_encoders.errors import TextEncoderDetectionError, TokenizeError
from comfy_core.text_encoders.qwen25vl_vision import preprocess_image, rotary_2d

MEAN = (0.5, 0.5, 0.5)
STD = (0.5, 0.5, 0.5)
NUM_HEADS = 16
LAYER_NORM_EPS = 1e-6
# ComfyUI's QWEN3VL_VISION: (width, depth) -> the blocks whose outputs feed DeepStack.
DEEPSTACK_BLOCKS = {(1024, 24): (5, 11, 17), (1152, 27): (8, 16, 24)}
_BLOCK = re.compile(r"blocks\.(\d+)\.")
_DEEPSTACK = re.compile(r"deepstack_merger_list\.(\d+)\.")


class Qwen3VLDetectionError(TextEncoderDetectionError, ValueError):
    """A Qwen3-VL tower's tensors are incomplete or inconsistent (names the key at fault)."""


class Qwen3VLInputError(TokenizeError, ValueError):
    """Input the Qwen3-VL tower cannot encode (an image without a vision tower, bad positions)."""


def shape_of(tensors: Mapping[str, Any], key: str, ndim: int) -> tuple[int, ...]:
    """The shape of `tensors[key]` (a header entry or a tensor) with `ndim` dimensions."""
    try:
        shape = tuple(int(d) for d in tensors[key].shape)
    except KeyError:
        raise Qwen3VLDetectionError(f"Qwen3-VL key {key!r} is missing") from None
    if len(shape) != ndim:
        raise Qwen3VLDetectionError(f"Qwen3-VL key {key!r}: expected {ndim} dimensions, got shape {shape}")
    return shape


def _indices(tensors: Mapping[str, Any], visual: str, pattern: re.Pattern) -> int:
    found = {int(m.group(1)) for name in tensors if name.startswith(visual)
             for m in [pattern.match(name[len(visual):])] if m}
    count = max(found) + 1 if found else 0
    if sorted(found) != list(range(count)):
        raise Qwen3VLDetectionError(f"{visual}: {pattern.pattern} indices {sorted(found)} are not 0..{count - 1}")
    return count


@dataclass(frozen=True)
class Qwen3VLVisionConfig:
    """Qwen3-VL's vision transformer as its weights shape it (see the module doc for the rest)."""

    hidden_size: int
    intermediate_size: int
    depth: int
    out_hidden_size: int
    num_position_embeddings: int
    deepstack_visual_indexes: tuple[int, ...]
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    in_channels: int = 3
    num_heads: int = NUM_HEADS

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], out_hidden: int, visual: str = "visual."
                            ) -> "Qwen3VLVisionConfig":
        """The tower under `visual` (names as ComfyUI loads them); `out_hidden`: the language
        model's width, which the mergers must project to."""
        hidden, channels, temporal, patch, patch_w = shape_of(tensors, visual + "patch_embed.proj.weight", 5)
        if patch != patch_w:
            raise Qwen3VLDetectionError(f"{visual}patch_embed.proj.weight: non-square patches {patch}x{patch_w}")
        positions, _ = shape_of(tensors, visual + "pos_embed.weight", 2)
        if round(positions ** 0.5) ** 2 != positions:
            raise Qwen3VLDetectionError(f"{visual}pos_embed.weight: {positions} positions are not a square grid")
        intermediate, _ = shape_of(tensors, visual + "blocks.0.mlp.linear_fc1.weight", 2)
        merged, _ = shape_of(tensors, visual + "merger.linear_fc1.weight", 2)
        merge = round((merged // hidden) ** 0.5)
        if merge * merge * hidden != merged:
            raise Qwen3VLDetectionError(f"{visual}merger.linear_fc1.weight: {merged} inputs are not a square number "
                                        f"of {hidden}-wide patches")
        out, _ = shape_of(tensors, visual + "merger.linear_fc2.weight", 2)
        if out != out_hidden:
            raise Qwen3VLDetectionError(f"{visual}merger.linear_fc2.weight: projects to {out}, the language model is "
                                        f"{out_hidden} wide")
        head_dim = hidden // NUM_HEADS
        if hidden % NUM_HEADS or head_dim % 4:
            raise Qwen3VLDetectionError(f"{visual}: width {hidden} does not split into {NUM_HEADS} heads with an even "
                                        "2-D rotary embedding")
        depth = _indices(tensors, visual, _BLOCK)
        mergers = _indices(tensors, visual, _DEEPSTACK)
        if depth == 0 or mergers == 0:
            raise Qwen3VLDetectionError(f"{visual}: a Qwen3-VL vision tower needs blocks and DeepStack mergers "
                                        f"(found {depth} blocks, {mergers} mergers)")
        taps = DEEPSTACK_BLOCKS.get((hidden, depth))
        if taps is None or len(taps) != mergers:
            taps = tuple((k + 1) * depth // (mergers + 1) - 1 for k in range(mergers))
        if len(set(taps)) != mergers or min(taps) < 0:
            raise Qwen3VLDetectionError(f"{visual}: {mergers} DeepStack mergers do not fit a {depth}-block tower")
        config = cls(hidden_size=hidden, intermediate_size=intermediate, depth=depth, out_hidden_size=out,
                     num_position_embeddings=positions, deepstack_visual_indexes=taps, patch_size=patch,
                     temporal_patch_size=temporal, spatial_merge_size=merge, in_channels=channels)
        for name, shape in config.shapes().items():
            found = shape_of(tensors, visual + name, len(shape))
            if found != shape:
                raise Qwen3VLDetectionError(f"Qwen3-VL key {visual + name!r}: expected shape {shape}, got {found}")
        return config

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Name (relative to `visual.`) -> shape of every weight."""
        h, i, out = self.hidden_size, self.intermediate_size, self.out_hidden_size
        merged = h * self.spatial_merge_size ** 2
        shapes: dict[str, tuple[int, ...]] = {
            "patch_embed.proj.weight": (h, self.in_channels, self.temporal_patch_size, self.patch_size,
                                        self.patch_size),
            "patch_embed.proj.bias": (h,), "pos_embed.weight": (self.num_position_embeddings, h)}
        for index in range(self.depth):
            base = f"blocks.{index}."
            shapes.update({base + "norm1.weight": (h,), base + "norm1.bias": (h,), base + "norm2.weight": (h,),
                           base + "norm2.bias": (h,), base + "attn.qkv.weight": (3 * h, h),
                           base + "attn.qkv.bias": (3 * h,),
                           base + "attn.proj.weight": (h, h), base + "attn.proj.bias": (h,),
                           base + "mlp.linear_fc1.weight": (i, h), base + "mlp.linear_fc1.bias": (i,),
                           base + "mlp.linear_fc2.weight": (h, i), base + "mlp.linear_fc2.bias": (h,)})
        mergers = [("merger.", h)] + [(f"deepstack_merger_list.{k}.", merged)
                                      for k in range(len(self.deepstack_visual_indexes))]
        for base, norm in mergers:
            shapes.update({base + "norm.weight": (norm,), base + "norm.bias": (norm,),
                           base + "linear_fc1.weight": (merged, merged), base + "linear_fc1.bias": (merged,),
                           base + "linear_fc2.weight": (out, merged), base + "linear_fc2.bias": (out,)})
        return shapes

    def to_transformers(self) -> Any:
        """transformers' `Qwen3VLVisionConfig` of this shape (modules and names only)."""
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig as HFVisionConfig

        return HFVisionConfig(depth=self.depth, hidden_size=self.hidden_size, hidden_act="gelu_pytorch_tanh",
                              intermediate_size=self.intermediate_size, num_heads=self.num_heads,
                              in_channels=self.in_channels, patch_size=self.patch_size,
                              spatial_merge_size=self.spatial_merge_size, temporal_patch_size=self.temporal_patch_size,
                              out_hidden_size=self.out_hidden_size,
                              num_position_embeddings=self.num_position_embeddings,
                              deepstack_visual_indexes=list(self.deepstack_visual_indexes))


def position_embeddings(table: torch.Tensor, grid: torch.Tensor, merge: int) -> torch.Tensor:
    """[N, W] float32: the learned `table` [side^2, W] resampled bilinearly (corners aligned) to each
    image's patch grid (`grid` [n, 3]: frames, rows, columns), repeated per frame, listed
    merge-block by merge-block as the patches are (ComfyUI's `fast_pos_embed_interpolate`)."""
    side = round(table.shape[0] ** 0.5)
    square = table.float().reshape(side, side, -1)  # [side, side, W]
    parts = []
    for frames, rows, cols in grid.tolist():
        r = torch.linspace(0, side - 1, rows, device=table.device)
        c = torch.linspace(0, side - 1, cols, device=table.device)
        r0, c0 = r.int(), c.int()  # floor (non-negative)
        r1, c1 = (r0 + 1).clamp(max=side - 1), (c0 + 1).clamp(max=side - 1)
        dr, dc = (r - r0)[:, None, None], (c - c0)[None, :, None]  # [rows, 1, 1], [1, cols, 1]
        rl, rh, cl, ch = r0.long(), r1.long(), c0.long(), c1.long()
        grid_pos = ((1 - dr) * (1 - dc) * square[rl][:, cl] + (1 - dr) * dc * square[rl][:, ch]
                    + dr * (1 - dc) * square[rh][:, cl] + dr * dc * square[rh][:, ch])  # [rows, cols, W]
        blocks = grid_pos.reshape(rows // merge, merge, cols // merge, merge, -1).permute(0, 2, 1, 3, 4)
        parts.append(blocks.reshape(rows * cols, -1).repeat(frames, 1))
    return torch.cat(parts)


def _layer_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """LayerNorm (eps 1e-6) over the last dimension, weights in float32."""
    return F.layer_norm(x.float(), (x.shape[-1],), norm.weight.float(), norm.bias.float(), LAYER_NORM_EPS)


def _block(block: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bounds: list[int],
           heads: int) -> torch.Tensor:
    """One vision block over x [N, W]; attention within each [bounds[i], bounds[i+1]) frame."""
    length, width = x.shape
    qkv = compute_in_float32(block.attn.qkv, _layer_norm(block.norm1, x)).view(length, 3, heads, width // heads)
    q, k, v = qkv.unbind(1)  # [N, H, d]
    q, k = apply_rotary(q[None], cos, sin)[0], apply_rotary(k[None], cos, sin)[0]
    parts = []
    for start, end in zip(bounds[:-1], bounds[1:]):
        if end > start:
            parts.append(attention_in_force(q[None, start:end].reshape(1, end - start, width),
                                            k[None, start:end].reshape(1, end - start, width),
                                            v[None, start:end].reshape(1, end - start, width), heads)[0])
    x = x + compute_in_float32(block.attn.proj, torch.cat(parts))
    inner = F.gelu(compute_in_float32(block.mlp.linear_fc1, _layer_norm(block.norm2, x)), approximate="tanh")
    return x + compute_in_float32(block.mlp.linear_fc2, inner)


def _merge(merger: nn.Module, x: torch.Tensor, unit: int, after_shuffle: bool) -> torch.Tensor:
    """x [N, W] -> [N / unit, out]: each merge block's patches concatenated, normalised (before the
    concatenation for the main merger, after it for DeepStack's), then Linear-GELU-Linear."""
    merged = x.shape[-1] * unit
    if after_shuffle:
        x = _layer_norm(merger.norm, x.reshape(-1, merged))
    else:
        x = _layer_norm(merger.norm, x).reshape(-1, merged)
    return compute_in_float32(merger.linear_fc2, F.gelu(compute_in_float32(merger.linear_fc1, x)))


def encode_image_patches(visual: nn.Module, config: Qwen3VLVisionConfig, patches: torch.Tensor, grid: torch.Tensor
                         ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """patches [N, C*frames*p*p] of images `grid` [n, 3] -> (language-model tokens [N / merge^2, out]
    float32, DeepStack features: one [N / merge^2, out] per tapped block, in tap order)."""
    expected = int((grid[:, 0] * grid[:, 1] * grid[:, 2]).sum())
    if patches.dim() != 2 or patches.shape[0] != expected:
        raise Qwen3VLInputError(f"qwen3-vl: {tuple(patches.shape)} patches for image grids {grid.tolist()}")
    proj = visual.patch_embed.proj
    device = proj.weight.device
    kernel = proj.weight.reshape(proj.weight.shape[0], -1).to(device=device, dtype=torch.float32)
    x = F.linear(patches.to(device=device, dtype=torch.float32), kernel, proj.bias.float())  # the stride-equal conv
    x = x + position_embeddings(visual.pos_embed.weight, grid, config.spatial_merge_size).to(device)
    cos, sin = rotary_2d(grid, config, device)  # [N, head_dim]
    bounds = [0]  # one attention segment per frame of each image
    for frames, rows, cols in grid.tolist():
        base = bounds[-1]
        bounds.extend([base + rows * cols * (f + 1) for f in range(frames)])
    unit = config.spatial_merge_size ** 2
    deepstack = []
    taps = config.deepstack_visual_indexes
    for index, block in enumerate(visual.blocks):
        x = _block(block, x, cos, sin, bounds, config.num_heads)
        if index in taps:
            deepstack.append(_merge(visual.deepstack_merger_list[taps.index(index)], x, unit, True).float())
    return _merge(visual.merger, x, unit, False).float(), deepstack


def encode_image(visual: nn.Module, config: Qwen3VLVisionConfig, image: Any
                 ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """IMAGE [B, H, W, C] (the first image) -> (tokens [N, out] float32, grid [1, 3], DeepStack
    features): ComfyUI's `Qwen3VL.preprocess_embed` (`process_qwen2vl_images` with patch 16, mean
    and std 0.5, then the tower)."""
    patches, grid = preprocess_image(image, config, MEAN, STD)
    tokens, deepstack = encode_image_patches(visual, config, patches, grid)
    return tokens, grid, deepstack

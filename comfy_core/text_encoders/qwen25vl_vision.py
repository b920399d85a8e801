"""Qwen2.5-VL's vision tower (Qwen Team 2025, "Qwen2.5-VL Technical Report", section 2.1): a ViT over
14-pixel patches of two identical frames, with window attention and 2-D rotary positions, whose
2x2 neighbouring patches are merged into one language-model token. As ComfyUI's
`comfy/text_encoders/qwen_vl.py` (`process_qwen2vl_images`, `Qwen2VLVisionTransformer`) runs it for
Qwen-Image-Edit; the weights are the transformers `Qwen2_5_VisionTransformerPretrainedModel` modules
held by the tower (`qwen25vl.py`), the forward pass is ours, every layer in float32.

Preprocessing (`preprocess_image`, ComfyUI's): the first image of the batch, RGB, resized
(bilinear, no antialias) to multiples of 28 pixels nearest to its size, within 3,136 .. 12,845,056
pixels (rescaled keeping the aspect when outside), normalised with CLIP's mean and std, repeated
as two frames, cut into patches listed merge-block by merge-block (each 2x2 block's four patches
together, blocks row-major), each patch flattened as (channel, frame, row, column).

The network: the patch embedding (a 3-D convolution whose kernel equals its stride, i.e. one
linear map per patch); then the patches are reordered window by window (windows of 112 pixels = 4x4
merged tokens, row-major, the last ones cut at the image edge) and each block (RMSNorm, attention
with q/k/v bias and 2-D RoPE, RMSNorm, SwiGLU MLP with biases, residuals) attends within its window,
except blocks 7, 15, 23 and 31, which attend over the whole image. 2-D RoPE: a head's first half of
frequency pairs rotates by the patch row, the second by the column (theta 1e4 over half a head).
The merger normalises each patch (RMSNorm), concatenates each 2x2 block, and projects through
Linear-GELU-Linear to the language model's width; the tokens go back to row-major block order.

`Qwen25VisionConfig` reads the tower's shape from the file (`visual.*`); the tower-wide errors
(`Qwen25VLDetectionError`, `Qwen25VLInputError`) are defined here and re-exported by `qwen25vl.py`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.calling import attention_in_force
from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.errors import TextEncoderDetectionError, TokenizeError

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
MIN_PIXELS = 3136
MAX_PIXELS = 12_845_056
ROPE_THETA = 10_000.0
_VISION_BLOCK = re.compile(r"visual\.blocks\.(\d+)\.")


# The Qwen2.5-VL tower's errors live here, below `qwen25vl.py` (which re-exports them), so that this
# module needs nothing from it.
class Qwen25VLDetectionError(TextEncoderDetectionError, ValueError):
    """A Qwen2.5-VL tower's tensors are incomplete or inconsistent (names the key at fault)."""


class Qwen25VLInputError(TokenizeError, ValueError):
    """Input the tower cannot encode (an image embed without a vision tower, a bad position table)."""


@dataclass(frozen=True)
class Qwen25VisionConfig:
    """Qwen2.5-VL's vision transformer as the file shapes it. Fixed by the model, as ComfyUI's
    `Qwen2VLVisionTransformer` fixes them: 16 heads, window 112 pixels, full attention in blocks
    7, 15, 23, 31, RMS epsilon 1e-6, 2-D RoPE theta 1e4."""

    hidden_size: int
    intermediate_size: int
    depth: int
    out_hidden_size: int
    patch_size: int = 14
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    in_channels: int = 3
    num_heads: int = 16
    window_size: int = 112
    fullatt_block_indexes: tuple[int, ...] = (7, 15, 23, 31)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str, out_hidden: int) -> "Qwen25VisionConfig | None":
        visual = prefix + "visual."
        if visual + "patch_embed.proj.weight" not in tensors:
            if any(name.startswith(visual) for name in tensors):
                raise Qwen25VLDetectionError(f"Qwen2.5-VL key {visual}patch_embed.proj.weight is missing "
                                             "(the file has other visual.* weights)")
            return None
        hidden, channels, temporal, patch, patch_w = shape_of(tensors, visual + "patch_embed.proj.weight", 5)
        if patch != patch_w:
            raise Qwen25VLDetectionError(f"{visual}patch_embed.proj.weight: non-square patches {patch}x{patch_w}")
        intermediate, _ = shape_of(tensors, visual + "blocks.0.mlp.gate_proj.weight", 2)
        merged_in, _ = shape_of(tensors, visual + "merger.mlp.0.weight", 2)
        out, _ = shape_of(tensors, visual + "merger.mlp.2.weight", 2)
        if out != out_hidden:
            raise Qwen25VLDetectionError(f"{visual}merger.mlp.2.weight: projects to {out}, the language model "
                                         f"is {out_hidden} wide")
        merge = round((merged_in // hidden) ** 0.5)
        if merge * merge * hidden != merged_in:
            raise Qwen25VLDetectionError(f"{visual}merger.mlp.0.weight: {merged_in} inputs are not a square "
                                         f"number of {hidden}-wide patches")
        if hidden % 16 or (hidden // 16) % 4:
            raise Qwen25VLDetectionError(f"{visual}: width {hidden} does not split into 16 heads with an even "
                                         "2-D rotary embedding")
        indices = {int(m.group(1)) for name in tensors if name.startswith(visual)
                   for m in [_VISION_BLOCK.match(name[len(prefix):])] if m}
        depth = max(indices) + 1
        if sorted(indices) != list(range(depth)):
            raise Qwen25VLDetectionError(f"{visual}blocks: indices {sorted(indices)} are not 0..{depth - 1}")
        config = cls(hidden_size=hidden, intermediate_size=intermediate, depth=depth, out_hidden_size=out,
                     patch_size=patch, temporal_patch_size=temporal, spatial_merge_size=merge, in_channels=channels)
        for name, shape in config.shapes().items():
            expect_shape(visual + name, shape_of(tensors, visual + name, len(shape)), shape)
        return config

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Name (relative to `visual.`) -> shape of every weight."""
        h, i = self.hidden_size, self.intermediate_size
        merged = h * self.spatial_merge_size ** 2
        out: dict[str, tuple[int, ...]] = {
            "patch_embed.proj.weight": (h, self.in_channels, self.temporal_patch_size, self.patch_size, self.patch_size),
            "merger.ln_q.weight": (h,), "merger.mlp.0.weight": (merged, merged), "merger.mlp.0.bias": (merged,),
            "merger.mlp.2.weight": (self.out_hidden_size, merged), "merger.mlp.2.bias": (self.out_hidden_size,)}
        for index in range(self.depth):
            base = f"blocks.{index}."
            out.update({
                base + "norm1.weight": (h,), base + "norm2.weight": (h,),
                base + "attn.qkv.weight": (3 * h, h), base + "attn.qkv.bias": (3 * h,),
                base + "attn.proj.weight": (h, h), base + "attn.proj.bias": (h,),
                base + "mlp.gate_proj.weight": (i, h), base + "mlp.gate_proj.bias": (i,),
                base + "mlp.up_proj.weight": (i, h), base + "mlp.up_proj.bias": (i,),
                base + "mlp.down_proj.weight": (h, i), base + "mlp.down_proj.bias": (h,)})
        return out

    def to_transformers(self) -> Any:
        from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig

        return Qwen2_5_VLVisionConfig(
            depth=self.depth, hidden_size=self.hidden_size, hidden_act="silu", intermediate_size=self.intermediate_size,
            num_heads=self.num_heads, in_channels=self.in_channels, patch_size=self.patch_size,
            spatial_merge_size=self.spatial_merge_size, temporal_patch_size=self.temporal_patch_size,
            window_size=self.window_size, out_hidden_size=self.out_hidden_size,
            fullatt_block_indexes=list(self.fullatt_block_indexes))


def shape_of(tensors: Mapping[str, Any], key: str, ndim: int) -> tuple[int, ...]:
    """The shape of `tensors[key]` (a header entry or a tensor), which must have `ndim` dimensions."""
    try:
        shape = tuple(int(d) for d in tensors[key].shape)
    except KeyError:
        raise Qwen25VLDetectionError(f"Qwen2.5-VL key {key!r} is missing") from None
    if len(shape) != ndim:
        raise Qwen25VLDetectionError(f"Qwen2.5-VL key {key!r}: expected {ndim} dimensions, got shape {shape}")
    return shape


def expect_shape(key: str, shape: tuple[int, ...], expected: tuple[int, ...]) -> None:
    """`shape` must be `expected` (a detection error naming `key` otherwise)."""
    if shape != expected:
        raise Qwen25VLDetectionError(f"Qwen2.5-VL key {key!r}: expected shape {expected}, got {shape}")



def resized_size(height: int, width: int, factor: int, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """ComfyUI's (Qwen's `smart_resize`) target size: multiples of `factor` nearest to the image,
    scaled down (floor) above `max_pixels`, up (ceil) below `min_pixels`, keeping the aspect."""
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def preprocess_image(image: torch.Tensor, config: Any, mean: tuple[float, float, float] = CLIP_MEAN,
                     std: tuple[float, float, float] = CLIP_STD, *, min_pixels: int = MIN_PIXELS,
                     max_pixels: int = MAX_PIXELS, mode: str = "bilinear") -> tuple[torch.Tensor, torch.Tensor]:
    """IMAGE [B, H, W, C] (0..1; the first image is used, as ComfyUI) -> (patches [N, C*frames*p*p]
    float32, grid [1, 3] long: frames / patch rows / patch columns). See the module doc. `config`:
    a vision config with `patch_size`, `spatial_merge_size`, `temporal_patch_size` (Qwen2.5-VL's, or
    Qwen3-VL's, which normalises with `mean` = `std` = 0.5: ComfyUI's `process_qwen2vl_images`);
    `min_pixels` / `max_pixels` / `mode`: that function's bounds and interpolation (JoyImage's
    encoder asks for 65,536 .. 16,777,216 pixels, bicubic)."""
    if not isinstance(image, torch.Tensor) or image.dim() != 4 or image.shape[-1] < 3:
        shape = tuple(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__
        raise Qwen25VLInputError(f"qwen2.5-vl: an image must be an IMAGE tensor [batch, height, width, 3+], got {shape}")
    patch, merge, frames = config.patch_size, config.spatial_merge_size, config.temporal_patch_size
    pixels = image[0, :, :, :3].permute(2, 0, 1).float()  # [3, H, W]
    height, width = pixels.shape[1:]
    h_bar, w_bar = resized_size(height, width, patch * merge, min_pixels, max_pixels)
    pixels = F.interpolate(pixels[None], size=(h_bar, w_bar), mode=mode, align_corners=False)[0]
    pixels = (pixels - torch.tensor(mean, dtype=torch.float32, device=pixels.device)[:, None, None]) \
        / torch.tensor(std, dtype=torch.float32, device=pixels.device)[:, None, None]
    grid_h, grid_w = h_bar // patch, w_bar // patch
    video = pixels[None].expand(frames, -1, -1, -1)  # [frames, 3, H, W]: the image twice
    blocks = video.reshape(frames, 3, grid_h // merge, merge, patch, grid_w // merge, merge, patch)
    # -> [block row, block col, sub row, sub col, channel, frame, pixel row, pixel col]
    blocks = blocks.permute(2, 5, 3, 6, 1, 0, 4, 7)
    patches = blocks.reshape(grid_h * grid_w, 3 * frames * patch * patch)
    return patches.contiguous(), torch.tensor([[1, grid_h, grid_w]], dtype=torch.long)


def window_order(grid: torch.Tensor, config: Qwen25VisionConfig) -> tuple[torch.Tensor, list[int]]:
    """(merged-token order window by window [N / merge^2], patch boundaries of the windows
    [0, ..., N]) for images of `grid` [n, 3]."""
    merge = config.spatial_merge_size
    side = config.window_size // merge // config.patch_size  # merged tokens per window side
    order: list[torch.Tensor] = []
    bounds = [0]
    base = 0
    for frames, rows, cols in grid.tolist():
        rows, cols = rows // merge, cols // merge
        index = torch.arange(frames * rows * cols).reshape(frames, rows, cols)
        for frame in range(frames):
            for top in range(0, rows, side):
                for left in range(0, cols, side):
                    window = index[frame, top:top + side, left:left + side].reshape(-1)
                    order.append(window + base)
                    bounds.append(bounds[-1] + window.numel() * merge * merge)
        base += frames * rows * cols
    return torch.cat(order), bounds


def rotary_2d(grid: torch.Tensor, config: Qwen25VisionConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [N, head_dim] float32 of each patch (in `preprocess_image`'s order): the rotate-half
    RoPE whose first half of frequency pairs turns with the patch row, the second with the column."""
    merge = config.spatial_merge_size
    head_dim = config.hidden_size // config.num_heads
    axis_dim = head_dim // 2  # channels per axis: axis_dim / 2 frequency pairs each
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, axis_dim, 2, device=device, dtype=torch.float32) / axis_dim))
    rows_all, cols_all = [], []
    for frames, rows, cols in grid.tolist():
        r = torch.arange(rows, device=device)[:, None].expand(rows, cols)
        c = torch.arange(cols, device=device)[None, :].expand(rows, cols)
        # merge-block order, as the patches: [block row, block col, sub row, sub col]
        r = r.reshape(rows // merge, merge, cols // merge, merge).permute(0, 2, 1, 3).reshape(-1)
        c = c.reshape(rows // merge, merge, cols // merge, merge).permute(0, 2, 1, 3).reshape(-1)
        rows_all.append(r.repeat(frames))
        cols_all.append(c.repeat(frames))
    r, c = torch.cat(rows_all).float(), torch.cat(cols_all).float()
    angles = torch.cat((r[:, None] * inv_freq, c[:, None] * inv_freq), dim=-1)  # [N, head_dim / 2]
    angles = torch.cat((angles, angles), dim=-1)  # [N, head_dim]
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [N, H, d] rotated (rotate-half form) by cos, sin [N, d]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def _block(block: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bounds: list[int],
           heads: int) -> torch.Tensor:
    """One vision block over x [N, W]; attention within each [bounds[i], bounds[i+1]) segment."""
    length, width = x.shape
    head_dim = width // heads
    normed = compute_in_float32(block.norm1, x)
    qkv = compute_in_float32(block.attn.qkv, normed).view(length, 3, heads, head_dim)
    q, k, v = qkv.unbind(1)  # [N, H, d]
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    parts = []
    for start, end in zip(bounds[:-1], bounds[1:]):
        if end > start:
            parts.append(attention_in_force(q[None, start:end].reshape(1, end - start, width),
                                            k[None, start:end].reshape(1, end - start, width),
                                            v[None, start:end].reshape(1, end - start, width), heads)[0])
    x = x + compute_in_float32(block.attn.proj, torch.cat(parts))
    normed = compute_in_float32(block.norm2, x)
    mlp = block.mlp
    inner = F.silu(compute_in_float32(mlp.gate_proj, normed)) * compute_in_float32(mlp.up_proj, normed)
    return x + compute_in_float32(mlp.down_proj, inner)


def encode_image_patches(visual: nn.Module, config: Qwen25VisionConfig, patches: torch.Tensor,
                         grid: torch.Tensor) -> torch.Tensor:
    """patches [N, C*frames*p*p] of images `grid` [n, 3] -> language-model tokens [N / merge^2, out]
    float32 (see the module doc)."""
    merge_unit = config.spatial_merge_size ** 2
    expected = int((grid[:, 0] * grid[:, 1] * grid[:, 2]).sum())
    if patches.dim() != 2 or patches.shape[0] != expected:
        raise Qwen25VLInputError(f"qwen2.5-vl: {tuple(patches.shape)} patches for image grids {grid.tolist()}")
    weight = visual.patch_embed.proj.weight
    device = weight.device
    kernel = weight.reshape(weight.shape[0], -1).to(device=device, dtype=torch.float32)
    if weight.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        kernel = torch.nan_to_num(kernel)
    x = F.linear(patches.to(device=device, dtype=torch.float32), kernel)  # [N, W]: the stride-equal conv
    order, window_bounds = window_order(grid, config)
    order = order.to(device)
    length = x.shape[0]

    def windowed(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(length // merge_unit, merge_unit, -1)[order].reshape(length, -1)

    x = windowed(x)
    cos, sin = (windowed(t) for t in rotary_2d(grid, config, device))
    image_sizes = (grid[:, 1] * grid[:, 2]).repeat_interleave(grid[:, 0]).tolist()
    full_bounds = [0]
    for size in image_sizes:
        full_bounds.append(full_bounds[-1] + int(size))
    for index, block in enumerate(visual.blocks):
        bounds = full_bounds if index in config.fullatt_block_indexes else window_bounds
        x = _block(block, x, cos, sin, bounds, config.num_heads)
    merger = visual.merger
    merged = compute_in_float32(merger.ln_q, x).reshape(length // merge_unit, -1)
    merged = compute_in_float32(merger.mlp[0], merged)
    merged = compute_in_float32(merger.mlp[2], F.gelu(merged))
    return merged[torch.argsort(order)].float()


def encode_image(visual: nn.Module, config: Qwen25VisionConfig, image: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """IMAGE [B, H, W, C] -> (tokens [N, out] float32, grid [1, 3]): ComfyUI's `preprocess_embed`."""
    patches, grid = preprocess_image(image, config)
    return encode_image_patches(visual, config, patches, grid), grid

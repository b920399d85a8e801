"""Qwen3.5's vision tower, as ComfyUI's `comfy/text_encoders/qwen35.py` (`Qwen35VisionModel`) runs it:
Qwen3-VL's ViT without DeepStack (16-pixel patches of two identical frames, a biased patch
embedding, learned position embeddings resampled to the patch grid, 2-D rotary positions,
LayerNorm blocks with a GELU-tanh MLP, a 2x2 merger to the language model's width). The maths is
`qwen3vl_vision.py`'s (one concept in one place); this module reads Qwen3.5's shapes (no DeepStack
mergers; 16 heads, 12 for the 0.8B's 768-wide tower, ComfyUI's `QWEN35_MODELS`), builds the modules
under ComfyUI's names (`visual.patch_embed.proj`, `visual.pos_embed`, `visual.blocks.N.{norm1,
norm2,attn.qkv,attn.proj,mlp.linear_fc1,mlp.linear_fc2}`, `visual.merger.{norm,linear_fc1,
linear_fc2}`), and gives the language model's M-RoPE positions for a prompt with images.

Positions (ComfyUI's `qwen2vl_mrope_position_ids`, Qwen2-VL's rule, `qwen25vl.image_position_ids`):
an image's merged tokens share one temporal position and count rows / columns over its merged
grid; the text after it continues from the image's start plus the longer merged side. Qwen3.5
rotates the first quarter of each head with them *interleaved* (`interleaved_tables`): frequency
i turns with the height position when i % 3 == 1 (i < 33), the width when i % 3 == 2 (i < 30),
else the temporal one (sections 11 / 11 / 10 of its 32 frequencies). Text-only prompts have equal
positions on the three axes, which is plain RoPE.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.text_encoders.decoder_llm import shape_of
from comfy_core.text_encoders.errors import Qwen35DetectionError

MROPE_SECTION = (11, 11, 10)  # ComfyUI's Qwen35Config.mrope_section
_BLOCK = re.compile(r"blocks\.(\d+)\.")


def vision_heads(hidden: int) -> int:
    """ComfyUI's head count for a Qwen3.5 vision tower of this width (12 for the 0.8B's 768)."""
    return 12 if hidden == 768 else 16


def detect_vision(tensors: Mapping[str, Any], visual: str, out_hidden: int) -> Any:
    """The `qwen3vl_vision.Qwen3VLVisionConfig` (no DeepStack) of the tower under `visual`, None
    when the file has none; `Qwen35DetectionError` for an incomplete or inconsistent one."""
    from comfy_core.text_encoders.qwen3vl_vision import Qwen3VLVisionConfig

    if visual + "patch_embed.proj.weight" not in tensors:
        return None

    def shape(key: str, ndim: int) -> tuple[int, ...]:
        return shape_of(tensors, visual + key, ndim, Qwen35DetectionError, "Qwen3.5 vision")

    hidden, channels, frames, patch, _ = shape("patch_embed.proj.weight", 5)
    positions, _ = shape("pos_embed.weight", 2)
    intermediate, _ = shape("blocks.0.mlp.linear_fc1.weight", 2)
    merged, _ = shape("merger.linear_fc1.weight", 2)
    merge = round((merged // hidden) ** 0.5)
    heads = vision_heads(hidden)
    if merge * merge * hidden != merged or hidden % heads or (hidden // heads) % 4 \
            or round(positions ** 0.5) ** 2 != positions:
        raise Qwen35DetectionError(f"{visual}: a {hidden}-wide tower with {positions} position embeddings and "
                                   f"{merged}-wide merger input is not a Qwen3.5 vision tower")
    blocks = {int(m.group(1)) for name in tensors if name.startswith(visual)
              for m in [_BLOCK.match(name[len(visual):])] if m}
    if sorted(blocks) != list(range(len(blocks))):
        raise Qwen35DetectionError(f"{visual}blocks: indices {sorted(blocks)} are not 0..{len(blocks) - 1}")
    config = Qwen3VLVisionConfig(hidden_size=hidden, intermediate_size=intermediate, depth=len(blocks),
                                 out_hidden_size=out_hidden, num_position_embeddings=positions,
                                 deepstack_visual_indexes=(), patch_size=patch, temporal_patch_size=frames,
                                 spatial_merge_size=merge, in_channels=channels, num_heads=heads)
    for name, wanted in config.shapes().items():
        found = shape(name, len(wanted))
        if found != wanted:
            raise Qwen35DetectionError(f"Qwen3.5 vision key {visual + name!r}: expected shape {wanted}, got {found}")
    return config


class _Attention(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)


class _MLP(nn.Module):
    def __init__(self, width: int, inner: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(width, inner)
        self.linear_fc2 = nn.Linear(inner, width)


class _Block(nn.Module):
    def __init__(self, width: int, inner: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width, eps=1e-6)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.attn = _Attention(width)
        self.mlp = _MLP(width, inner)


class _PatchEmbed(nn.Module):
    def __init__(self, c: Any) -> None:
        super().__init__()
        kernel = (c.temporal_patch_size, c.patch_size, c.patch_size)
        self.proj = nn.Conv3d(c.in_channels, c.hidden_size, kernel, stride=kernel, bias=True)


class _Merger(nn.Module):
    def __init__(self, c: Any) -> None:
        super().__init__()
        merged = c.hidden_size * c.spatial_merge_size ** 2
        self.norm = nn.LayerNorm(c.hidden_size, eps=1e-6)
        self.linear_fc1 = nn.Linear(merged, merged)
        self.linear_fc2 = nn.Linear(merged, c.out_hidden_size)


class Qwen35VisionModel(nn.Module):
    """ComfyUI's `Qwen35VisionModel` parameters (the forward pass is `qwen3vl_vision`'s)."""

    def __init__(self, c: Any) -> None:
        super().__init__()
        self.patch_embed = _PatchEmbed(c)
        self.pos_embed = nn.Embedding(c.num_position_embeddings, c.hidden_size)
        self.blocks = nn.ModuleList(_Block(c.hidden_size, c.intermediate_size) for _ in range(c.depth))
        self.merger = _Merger(c)


def encode_image(visual: nn.Module, config: Any, image: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """IMAGE [B, H, W, C] (the first image) -> (language-model tokens [N, W] float32, grid [1, 3]):
    ComfyUI's `Qwen35.preprocess_embed` (patch 16, mean / std 0.5, then the tower)."""
    from comfy_core.text_encoders import qwen3vl_vision

    tokens, grid, _ = qwen3vl_vision.encode_image(visual, config, image)
    return tokens, grid


def interleaved_tables(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, rotary_dim] float32 for M-RoPE positions [3, T] (see the module doc)."""
    half = rotary_dim // 2
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, device=positions.device, dtype=torch.float32)
                                / rotary_dim))
    axis = torch.zeros(half, dtype=torch.long)
    index = torch.arange(half)
    axis[(index % 3 == 1) & (index < 3 * MROPE_SECTION[1])] = 1
    axis[(index % 3 == 2) & (index < 3 * MROPE_SECTION[2])] = 2
    chosen = positions.float()[axis.to(positions.device), :].t()  # [T, half]: each frequency's axis
    angles = chosen * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


__all__ = ["MROPE_SECTION", "Qwen35VisionModel", "detect_vision", "encode_image", "interleaved_tables",
           "vision_heads"]

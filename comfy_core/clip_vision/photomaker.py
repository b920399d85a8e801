"""PhotoMaker v1's ID encoder (Li et al. 2023, "PhotoMaker: Customizing Realistic Human Photos via
Stacked ID Embedding"), as ComfyUI's `comfy_extras/nodes_photomaker.py` loads and runs it; written
here.

The file (`photomaker-v1.bin`: the weights under `id_encoder`, LoRA weights beside them, which
ComfyUI's loader ignores) holds a CLIP ViT-L/14 image tower in transformers' names
(`vision_model.*`, `visual_projection.weight`: 1024 -> 768) plus `visual_projection_2.weight`
(1024 -> 1280, no bias) and the fuse module `fuse_module.{mlp1,mlp2}.{layernorm,fc1,fc2}` and
`fuse_module.layer_norm`. The image's ID embedding is both projections of the tower's pooled
output side by side (768 + 1280 = 2048, SDXL's text width); the fuse module then rewrites the
prompt's class-word token (the word before the trigger word, "man photomaker"):

    fused = LayerNorm(MLP2(MLP1([token, id]) + token)),  MLP(x) = fc2(GELU(fc1(LayerNorm(x))))

with MLP1 2048 * 2 -> 2048 -> 2048 and MLP2 2048 -> 2048 -> 2048 plus its input (residual); GELU
exact (erf). Only the first image of the batch is used: ComfyUI stacks the images as one subject's
inputs but marks one class token, and the fuse module takes as many inputs as marked tokens.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.checkpoint.errors import ShapeMismatchError
from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.clip_vision.config import KIND_CLIP
from comfy_core.clip_vision.load import clip_vision_from_checkpoint, detect_clip_vision
from comfy_core.clip_vision.preprocess import clip_preprocess
from comfy_core.models.float32_compute import compute_in_float32

log = logging.getLogger(__name__)

FILE_ENTRY = "id_encoder"  # the file's top-level key holding the encoder's weights
SECOND_PROJECTION = "visual_projection_2.weight"
FUSE_PREFIX = "fuse_module."


class FuseMLP(nn.Module):
    """PhotoMaker's MLP: LayerNorm, Linear, GELU, Linear (plus the input when `residual`)."""

    def __init__(self, in_dim: int, out_dim: int, hidden_dim: int, residual: bool) -> None:
        super().__init__()
        if residual and in_dim != out_dim:
            raise ValueError(f"PhotoMaker MLP: a residual MLP maps a width to itself ({in_dim} -> {out_dim})")
        self.layernorm = nn.LayerNorm(in_dim)
        self.fc1 = nn.Linear(in_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, out_dim)
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(F.gelu(self.fc1(self.layernorm(x))))
        return y + x if self.residual else y


class FuseModule(nn.Module):
    """Fuses a prompt token with an ID embedding of the same width."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.mlp1 = FuseMLP(width * 2, width, width, residual=False)
        self.mlp2 = FuseMLP(width, width, width, residual=True)
        self.layer_norm = nn.LayerNorm(width)

    def forward(self, tokens: torch.Tensor, id_embeds: torch.Tensor) -> torch.Tensor:
        """`tokens`, `id_embeds`: `[N, W]` -> the fused tokens `[N, W]`."""
        fused = self.mlp1(torch.cat([tokens, id_embeds], dim=-1)) + tokens
        return self.layer_norm(self.mlp2(fused))


class PhotoMakerIDEncoder(nn.Module):
    """The PHOTOMAKER wire object: the image tower (a `ClipVision`), the second projection and the
    fuse module. `load_device` as ComfyUI's attribute (where its node moves the pixels)."""

    def __init__(self, clip_vision: Any, second_projection: nn.Linear, fuse_module: FuseModule) -> None:
        super().__init__()
        self.clip_vision = clip_vision
        self.visual_projection_2 = second_projection
        self.fuse_module = fuse_module

    @property
    def load_device(self) -> torch.device:
        return self.clip_vision.load_device

    def id_embedding(self, image: torch.Tensor) -> torch.Tensor:
        """IMAGE `[B, H, W, C]` -> `[B, 768 + 1280]`: each image's projections of the pooled output
        (pixels prepared as CLIPVisionEncode's, centre crop)."""
        vision = self.clip_vision
        with torch.no_grad(), vision.patcher.applied() as tower:
            device = tower.patch_weight.device
            pixels = clip_preprocess(image.to(device), vision.image_size, vision.image_mean, vision.image_std).float()
            pooled = tower.pooled(tower.hidden_states(pixels)[-1])
            first = compute_in_float32(tower.visual_projection, pooled)
            second = compute_in_float32(self.visual_projection_2.to(device), pooled)
        return torch.cat([first, second], dim=-1)

    def fuse(self, prompt_embeds: torch.Tensor, image: torch.Tensor, position: int) -> torch.Tensor:
        """`prompt_embeds` `[1, T, W]` with the token at `position` fused with the first image's
        ID embedding; the other tokens unchanged (a new tensor)."""
        if prompt_embeds.shape[-1] != self.fuse_module.layer_norm.normalized_shape[0]:
            raise ValueError(f"PhotoMaker: the prompt's tokens are {prompt_embeds.shape[-1]} wide, its fuse module "
                             f"takes {self.fuse_module.layer_norm.normalized_shape[0]} (SDXL's CLIP-L + CLIP-G)")
        id_embeds = self.id_embedding(image[:1])  # [1, W]
        out = prompt_embeds.clone()
        with torch.no_grad():
            token = prompt_embeds[:, position].float()
            fused = compute_in_float32(self.fuse_module, token, id_embeds.to(token))
        out[:, position] = fused.to(out.dtype)
        return out


def load_photomaker(path: str | Path, dtype: torch.dtype = torch.float16, *,
                    load_device: Any = None) -> PhotoMakerIDEncoder:
    """A PhotoMaker v1 file -> `PhotoMakerIDEncoder` (the tower stored in `dtype`, as a CLIP
    vision file; the small second projection and fuse module in float32). Typed
    `CheckpointError`s name the file."""
    with CheckpointFile(path, pickle_entry=FILE_ENTRY) as checkpoint:
        label = checkpoint.path
        extra = {k: checkpoint.read(k).float() for k in checkpoint.keys()
                 if k == SECOND_PROJECTION or k.startswith(FUSE_PREFIX)}
        tower_state = {k: checkpoint.read(k) for k in checkpoint.keys() if k not in extra}
    missing = [k for k in (SECOND_PROJECTION, FUSE_PREFIX + "layer_norm.weight") if k not in extra]
    if missing:
        raise ShapeMismatchError(label, f"not a PhotoMaker file: {', '.join(missing)} missing")
    with CheckpointFile(tower_state, name=str(label)) as tower_file:
        config = detect_clip_vision(tower_file, ("",))
        if config is None or config.kind != KIND_CLIP:
            raise ShapeMismatchError(label, "not a PhotoMaker file: no CLIP image tower (vision_model.*) at the top "
                                            f"level or under {FILE_ENTRY!r}")
        clip_vision = clip_vision_from_checkpoint(tower_file, config, dtype, load_device=load_device, mmap=False)
    second = extra.pop(SECOND_PROJECTION)
    projection = nn.Linear(second.shape[1], second.shape[0], bias=False)
    projection.weight = nn.Parameter(second, requires_grad=False)
    width = extra[FUSE_PREFIX + "layer_norm.weight"].shape[0]
    fuse = FuseModule(width)
    fuse_state = {k[len(FUSE_PREFIX):]: v for k, v in extra.items()}
    try:
        fuse.load_state_dict(fuse_state, strict=True)
    except RuntimeError as exc:
        raise ShapeMismatchError(label, f"PhotoMaker fuse module: {str(exc).splitlines()[0]}") from None
    if (config.projection_dim or 0) + second.shape[0] != width:
        raise ShapeMismatchError(label, f"PhotoMaker: the projections give {config.projection_dim} + "
                                         f"{second.shape[0]} wide ID embeddings, the fuse module takes {width}")
    fuse.requires_grad_(False)
    log.info("PhotoMaker from %s: %s tower, ID embeddings %d wide", label.name, config.name, width)
    return PhotoMakerIDEncoder(clip_vision, projection, fuse).eval()

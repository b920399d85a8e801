"""Checkpoint keys of an image tower -> our module's keys, planned from the header alone.

The module's names are transformers' (`vision_model.*`, `visual_projection.weight`) plus
`multi_modal_projector.*` for the LLaVA projector, the names ComfyUI's `CLIPVisionModelProjection`
uses too. An "hf" file needs only its prefix stripped. An "open_clip" one is converted as
ComfyUI's `convert_to_transformers` does (written here from the OpenCLIP layout):

- `conv1.weight` -> `vision_model.embeddings.patch_embedding.weight`, `class_embedding` and
  `positional_embedding` -> the embeddings' class and position embeddings;
- `ln_pre` / `ln_post` -> `vision_model.pre_layrnorm` / `vision_model.post_layernorm`;
- `transformer.resblocks.N.*` -> `vision_model.encoder.layers.N.*` (`ln_1`/`ln_2` ->
  `layer_norm1`/`layer_norm2`, `mlp.c_fc`/`mlp.c_proj` -> `mlp.fc1`/`mlp.fc2`, `attn.out_proj` ->
  `self_attn.out_proj`, `attn.in_proj_{weight,bias}` [3W, ...] split in three along dim 0 into
  q, k, v, torch.nn.MultiheadAttention's packing);
- `proj` [W, P] (used as `x @ proj`) -> `visual_projection.weight`, its transpose [P, W].

A plan entry says where each model tensor comes from; tensors are read only after the plan has
been checked against the module's shapes. Keys the plan does not use (a text tower beside the
image tower, SigLIP's attention-pooling head, `logit_scale`) are returned as unused.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from comfy_core.clip_vision.config import LAYOUT_DINOV2, LAYOUT_HF, ClipVisionConfig

if TYPE_CHECKING:
    import torch

_HF_ROOTS = ("vision_model.", "visual_projection.", "multi_modal_projector.")
_DINOV2_ROOTS = ("embeddings.", "encoder.layer.", "layernorm.")  # our DINOv2 module's names are the file's
# transformers 5 rebuilds it (a non-persistent buffer); some files carry a copy.
_HF_IGNORED = ("vision_model.embeddings.position_ids",)

_OPEN_CLIP_TOP = {
    "class_embedding": "vision_model.embeddings.class_embedding",
    "conv1.weight": "vision_model.embeddings.patch_embedding.weight",
    "positional_embedding": "vision_model.embeddings.position_embedding.weight",
    "ln_pre.weight": "vision_model.pre_layrnorm.weight",
    "ln_pre.bias": "vision_model.pre_layrnorm.bias",
    "ln_post.weight": "vision_model.post_layernorm.weight",
    "ln_post.bias": "vision_model.post_layernorm.bias",
}
_OPEN_CLIP_BLOCK = re.compile(r"transformer\.resblocks\.(\d+)\.(.+)")
_OPEN_CLIP_BLOCK_NAMES = {
    "ln_1": "layer_norm1", "ln_2": "layer_norm2", "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2",
    "attn.out_proj": "self_attn.out_proj",
}


@dataclass(frozen=True)
class Source:
    """Where one model tensor comes from: checkpoint `key`, optionally the `part`-th third along
    dim 0 (packed q/k/v) or transposed."""

    key: str
    part: int | None = None
    transpose: bool = False


def plan_keys(config: ClipVisionConfig, names: Iterable[str]) -> tuple[dict[str, Source], list[str]]:
    """(model key -> Source, unused checkpoint keys under the prefix) for the tower `config` describes."""
    prefix = config.prefix
    plan: dict[str, Source] = {}
    unused: list[str] = []
    for key in names:
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix):]
        if config.layout == LAYOUT_DINOV2:
            mapped = [(rest, Source(key))] if rest.startswith(_DINOV2_ROOTS) else None
        else:
            mapped = _hf(rest, key) if config.layout == LAYOUT_HF else _open_clip(rest, key)
        if mapped is None:
            if rest not in _HF_IGNORED:
                unused.append(key)
            continue
        for name, source in mapped:
            plan[name] = source
    return plan, sorted(unused)


def _hf(rest: str, key: str) -> list[tuple[str, Source]] | None:
    if rest in _HF_IGNORED or not rest.startswith(_HF_ROOTS):
        return None
    return [(rest, Source(key))]


def _open_clip(rest: str, key: str) -> list[tuple[str, Source]] | None:
    if rest in _OPEN_CLIP_TOP:
        return [(_OPEN_CLIP_TOP[rest], Source(key))]
    if rest == "proj":
        return [("visual_projection.weight", Source(key, transpose=True))]
    match = _OPEN_CLIP_BLOCK.fullmatch(rest)
    if match is None:
        return None
    layer, name = match.groups()
    base = f"vision_model.encoder.layers.{layer}."
    if name in ("attn.in_proj_weight", "attn.in_proj_bias"):
        suffix = name.rsplit("_", 1)[1]
        return [(f"{base}self_attn.{part}.{suffix}", Source(key, part=index))
                for index, part in enumerate(("q_proj", "k_proj", "v_proj"))]
    stem, _, suffix = name.rpartition(".")
    if stem in _OPEN_CLIP_BLOCK_NAMES and suffix in ("weight", "bias"):
        return [(f"{base}{_OPEN_CLIP_BLOCK_NAMES[stem]}.{suffix}", Source(key))]
    return None


def planned_shape(source: Source, stored: tuple[int, ...]) -> tuple[int, ...]:
    """The shape a model tensor planned from `source` has, given the stored shape."""
    if source.part is not None:
        return (stored[0] // 3,) + tuple(stored[1:])
    if source.transpose:
        return tuple(reversed(stored))
    return tuple(stored)


def take(source: Source, tensor: "torch.Tensor") -> "torch.Tensor":
    """The model tensor from the stored `tensor` (a view where possible)."""
    if source.part is not None:
        return tensor.chunk(3, dim=0)[source.part]
    if source.transpose:
        return tensor.t().contiguous()
    return tensor

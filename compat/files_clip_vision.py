"""ComfyUI's `comfy.clip_vision` loaders for packs (comfy/clip_vision.py signatures), over
`comfy_core.clip_vision`: the model returned is our `ClipVision`, loaded exactly as the
CLIPVisionLoader node loads it (text-encoder storage dtype, memory map, memory tracking).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    import torch


def load(ckpt_path: str | Path) -> Any:
    """A CLIP vision file -> `ClipVision` (ComfyUI's `comfy.clip_vision.load`).

    As ComfyUI's, it goes through `load_clipvision_from_sd` when a pack replaced that
    (`comfy.clip_vision.load_clipvision_from_sd = mine` assigns it here): the file is then read
    into a state dict for the replacement; otherwise it is loaded memory-mapped."""
    if load_clipvision_from_sd is not _OUR_FROM_SD:
        from compat.tensors import load_torch_file

        return load_clipvision_from_sd(load_torch_file(ckpt_path))
    return _load(ckpt_path)


def load_clipvision_from_sd(sd: Mapping[str, torch.Tensor], prefix: str = "", convert_keys: bool = False) -> Any:
    """A CLIP vision state dict -> `ClipVision`; `prefix` names where the tower sits in `sd`.
    Both key layouts (hf, OpenCLIP) are recognised whatever `convert_keys` says, as our detector
    reads the names themselves."""
    return _load(sd, (prefix,) if prefix else None)


_OUR_FROM_SD = load_clipvision_from_sd

# OpenAI-CLIP visual-tower names (besides the residual blocks) -> transformers' CLIPVisionModel names
_OPENAI_VISUAL_TOP = (
    ("class_embedding", "vision_model.embeddings.class_embedding"),
    ("conv1.weight", "vision_model.embeddings.patch_embedding.weight"),
    ("positional_embedding", "vision_model.embeddings.position_embedding.weight"),
    ("ln_post.bias", "vision_model.post_layernorm.bias"),
    ("ln_post.weight", "vision_model.post_layernorm.weight"),
    ("ln_pre.bias", "vision_model.pre_layrnorm.bias"),  # transformers' spelling
    ("ln_pre.weight", "vision_model.pre_layrnorm.weight"),
)


def convert_to_transformers(sd: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """ComfyUI's `comfy.clip_vision.convert_to_transformers(sd, prefix)` (behaviour of
    comfy/clip_vision.py), in place: an OpenAI/OpenCLIP visual tower under `prefix` (it has
    `transformer.resblocks.0.attn.in_proj_weight`) gets transformers' `vision_model.*` names, its
    `proj` [width, out] becoming `visual_projection.weight` [out, width] and its residual blocks
    renamed by `transformers_convert(sd, prefix, "vision_model.", 48)`; any other layout just has
    `prefix` stripped. Returns the state dict."""
    from compat.files_utils import state_dict_prefix_replace, transformers_convert

    if f"{prefix}transformer.resblocks.0.attn.in_proj_weight" in sd:
        for old, new in _OPENAI_VISUAL_TOP:
            if prefix + old in sd:
                sd[new] = sd.pop(prefix + old)
        if prefix + "proj" in sd:
            sd["visual_projection.weight"] = sd.pop(prefix + "proj").transpose(0, 1)
        return transformers_convert(sd, prefix, "vision_model.", 48)
    return state_dict_prefix_replace(sd, {prefix: ""})


def _load(source: Any, prefixes: tuple[str, ...] | None = None) -> Any:
    from comfy_core.clip_vision.config import KNOWN_PREFIXES
    from comfy_core.clip_vision.load import load_clip_vision
    from nodes.clip_vision import _text_dtype
    from nodes.environment import current_env

    env = current_env()
    clip_vision = load_clip_vision(source, _text_dtype(), mmap=getattr(env, "mmap", True),
                                   prefixes=prefixes or KNOWN_PREFIXES)
    if env.memory is not None:
        env.memory.track(clip_vision.patcher)
    return clip_vision

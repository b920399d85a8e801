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

"""Loading a CLIP vision encoder from a standalone file or from inside a checkpoint.

After ComfyUI's `comfy/clip_vision.py: load` / `load_clipvision_from_sd`: the tower is found by
its key names (`config.find_clip_vision`), built on the meta device (no initialisation, no
memory) and given its tensors by assignment, converted from the OpenCLIP layout where needed
(`convert.plan_keys`). Every model tensor must come from the file with the right shape
(checked on the header, before any data is read); file keys the model does not use (a text
tower beside it, SigLIP's pooling head) are logged. Tensors kept in their stored dtype are
views of the file's memory map.

Storage dtype: `dtype` (the loaders pass the dtype policy's text-encoder dtype: float16 by
default, as ComfyUI's `text_encoder_dtype`), except the pre/post layer norms and the visual
projection, kept in float32 as ComfyUI builds them; computation is float32 throughout.
"""
from __future__ import annotations

import itertools
import logging
from pathlib import Path

import torch

from comfy_core.checkpoint.bulk import DEFAULT_WORKERS, load_tensors
from comfy_core.checkpoint.errors import MissingComponentError, ShapeMismatchError
from comfy_core.checkpoint.materialize import build_on_meta
from comfy_core.checkpoint.reader import TORCH_DTYPES, CheckpointFile
from comfy_core.clip_vision.clip_vision import ClipVision
from comfy_core.clip_vision.config import KNOWN_PREFIXES, ClipVisionConfig, ClipVisionDetectionError, find_clip_vision
from comfy_core.clip_vision.convert import plan_keys, planned_shape, take
from comfy_core.clip_vision.model import FLOAT32_KEYS, tower_for

log = logging.getLogger(__name__)


def load_clip_vision(path: str | Path, dtype: torch.dtype = torch.float16, *,
                     load_device: torch.device | str | None = None, offload_device: torch.device | str | None = None,
                     mmap: bool = True, prefixes: tuple[str, ...] = KNOWN_PREFIXES) -> ClipVision:
    """The image encoder of a clip vision file (or of a checkpoint that embeds one).

    Raises `MissingComponentError` when the file holds no image tower under `prefixes`, and
    `ShapeMismatchError` when its keys are incomplete or of the wrong shapes; both name the file.
    """
    with CheckpointFile(path) as checkpoint:
        config = detect_clip_vision(checkpoint, prefixes)
        if config is None:
            raise MissingComponentError(
                checkpoint.path, "not a CLIP vision model: no image tower (vision_model.* or OpenCLIP visual.* keys) "
                                 f"under any of the prefixes {list(prefixes)}")
        return clip_vision_from_checkpoint(checkpoint, config, dtype, load_device=load_device,
                                           offload_device=offload_device, mmap=mmap)


def detect_clip_vision(checkpoint: CheckpointFile,
                       prefixes: tuple[str, ...] = KNOWN_PREFIXES) -> ClipVisionConfig | None:
    """The config of the file's image tower (header only), or None."""
    try:
        return find_clip_vision(checkpoint.tensors, prefixes)
    except ClipVisionDetectionError as exc:
        raise ShapeMismatchError(checkpoint.path, f"CLIP vision: {exc}") from None


def clip_vision_from_checkpoint(checkpoint: CheckpointFile, config: ClipVisionConfig,
                                dtype: torch.dtype = torch.float16, *, load_device: torch.device | str | None = None,
                                offload_device: torch.device | str | None = None, mmap: bool = True,
                                workers: int = DEFAULT_WORKERS) -> ClipVision:
    """Build the tower `config` describes from the open `checkpoint`'s tensors."""
    plan, unused = plan_keys(config, checkpoint.tensors)
    tower = build_on_meta(lambda: tower_for(config))
    expected = tower.state_dict()  # name -> meta tensor
    missing = sorted(set(expected) - set(plan))
    if missing:
        raise ShapeMismatchError(checkpoint.path, f"CLIP vision ({config.name}): {len(missing)} tensors missing, e.g. "
                                                  f"{', '.join(missing[:5])} (prefix {config.prefix!r})")
    unused += sorted(plan[name].key for name in set(plan) - set(expected))
    if unused:
        log.warning("CLIP vision: %d unused tensors in %s, e.g. %s", len(unused), checkpoint.path.name,
                    ", ".join(unused[:3]))
    requests: dict[str, torch.dtype] = {}
    for name, meta in expected.items():
        source = plan[name]
        stored = checkpoint.tensors[source.key]
        have = planned_shape(source, tuple(stored.shape))
        if have != tuple(meta.shape):
            raise ShapeMismatchError(checkpoint.path, f"CLIP vision ({config.name}): tensor {source.key!r} gives "
                                                      f"{name} shape {list(have)}, the model needs {list(meta.shape)}")
        stored_dtype = TORCH_DTYPES[stored.dtype]
        wanted = (torch.float32 if name.startswith(FLOAT32_KEYS) else dtype) if stored_dtype.is_floating_point \
            else stored_dtype
        requests[source.key] = wanted
    loaded = load_tensors(checkpoint, requests, zero_copy=mmap, workers=workers)
    state = {name: take(plan[name], loaded[plan[name].key]) for name in expected}
    tower.load_state_dict(state, strict=True, assign=True)
    tower.reset_position_ids()
    left = [n for n, t in itertools.chain(tower.named_parameters(), tower.named_buffers()) if t.is_meta]
    if left:
        raise ShapeMismatchError(checkpoint.path, f"CLIP vision: {len(left)} module tensors were not loaded, "
                                                  f"e.g. {', '.join(left[:5])}")
    tower.eval()
    tower.requires_grad_(False)
    log.info("CLIP vision %s from %s: width %d, %d layers, %dpx, %s layout%s", config.name, checkpoint.path.name,
             config.width, config.layers, config.image_size, config.layout,
             f" under {config.prefix!r}" if config.prefix else "")
    return ClipVision(config, tower, load_device=load_device, offload_device=offload_device)

"""CLIP vision: image encoders (CLIP ViT-L/14, ViT-H/14, ViT-bigG/14, SigLIP) for unCLIP,
style models and IP-Adapter-style conditioning, family-independent.

- `config`: `ClipVisionConfig.detect_from_weights` / `find_clip_vision` (names and shapes only);
- `convert`: checkpoint keys (hf or OpenCLIP layout) -> our module's keys;
- `model`: `VisionTower` on transformers' modules and its forward pass;
- `preprocess`: `clip_preprocess` (resize, centre crop, normalise);
- `clip_vision`: `ClipVision`, the CLIP_VISION wire object; `output`: `ClipVisionOutput`;
- `load`: `load_clip_vision(path, dtype)`.
"""
from __future__ import annotations

from typing import Any

_LAZY = {
    "ClipVisionConfig": "comfy_core.clip_vision.config",
    "find_clip_vision": "comfy_core.clip_vision.config",
    "ClipVisionOutput": "comfy_core.clip_vision.output",
    "ClipVision": "comfy_core.clip_vision.clip_vision",
    "clip_preprocess": "comfy_core.clip_vision.preprocess",
    "load_clip_vision": "comfy_core.clip_vision.load",
}


def __getattr__(name: str) -> Any:
    # Lazy so that the config module stays importable without torch.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

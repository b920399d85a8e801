"""Loaded models as ComfyUI's `comfy.model_base` classes (torch-free until a model is built).

`install_model_classes(points)` (called by `compat.install` with its session's extension points)
sets their model-class resolver (`ExtensionPoints.model_class`, comfy_core/extension_points.py)
to `comfy_model_class`, so every model loaded where those points are in force (the session's
node calls) is an instance of exactly ComfyUI's class for its family (compat/mp_model_base.py
`CLASS_OF_FAMILY`): packs compare `type(model.model) == comfy.model_base.BaseModel`
(AnimateDiff-Evolved's `get_sd_model_type`) and print `type(model.model).__name__`; and the
patcher wrapping it (and a CLIP's) is ComfyUI's `ModelPatcher` (compat/mp_model_patcher.py,
`comfy_patcher_class`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from comfy_core.extension_points import ExtensionPoints


def comfy_model_class(family_name: str) -> Optional[type]:
    from compat.mp_model_base import CLASS_OF_FAMILY

    return CLASS_OF_FAMILY.get(family_name)


def comfy_patcher_class(core_class: type) -> Optional[type]:
    """ComfyUI's class for a patcher of our `core_class` (compat/mp_model_patcher.py: a MODEL's
    and a CLIP's patcher are both ComfyUI `ModelPatcher`s), imported when the first is built."""
    from compat.mp_model_patcher import comfy_class_for

    return comfy_class_for(core_class)


def install_model_classes(points: "ExtensionPoints") -> None:
    """Models built where `points` are in force are ComfyUI's `comfy.model_base` classes, and
    their patchers ComfyUI's `comfy.model_patcher.ModelPatcher`."""
    points.model_class = comfy_model_class
    points.model_patcher_class = comfy_patcher_class

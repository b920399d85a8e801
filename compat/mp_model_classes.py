"""Loaded models as ComfyUI's `comfy.model_base` classes (torch-free until a model is built).

`install_model_classes()` (called by `compat.install`) sets comfy_core's family-class resolver
(comfy_core/models/family_classes.py) to `comfy_model_class`, so every model loaded from then on
is an instance of exactly ComfyUI's class for its family (compat/mp_model_base.py
`CLASS_OF_FAMILY`): packs compare `type(model.model) == comfy.model_base.BaseModel`
(AnimateDiff-Evolved's `get_sd_model_type`) and print `type(model.model).__name__`.
"""
from __future__ import annotations

from typing import Optional


def comfy_model_class(family_name: str) -> Optional[type]:
    from compat.mp_model_base import CLASS_OF_FAMILY

    return CLASS_OF_FAMILY.get(family_name)


def install_model_classes() -> None:
    from comfy_core.models import family_classes

    family_classes.set_resolver(comfy_model_class)

"""Which class a loaded model of a family is made an instance of (torch-free).

comfy_core builds every SD-family model as `comfy_core.models.diffusion.DiffusionModel`. A host
may name a subclass per family (`set_resolver`): the ComfyUI compatibility layer answers
ComfyUI's `comfy.model_base` class (BaseModel for SD1/SD2, SDXL, ...), because node packs test
the exact type (AnimateDiff-Evolved's `get_sd_model_type`: `type(model.model) == BaseModel`).
Set once at start-up, before models load; without a resolver models stay `DiffusionModel`.
"""
from __future__ import annotations

from typing import Callable, Optional

_resolver: Optional[Callable[[str], Optional[type]]] = None


def set_resolver(resolver: Optional[Callable[[str], Optional[type]]]) -> None:
    """`resolver(family_name) -> class or None`, asked when a model is built (None: clear it)."""
    global _resolver
    _resolver = resolver


def class_for(family_name: Optional[str]) -> Optional[type]:
    """The class a model of `family_name` should be, or None for `DiffusionModel` itself."""
    if _resolver is None or family_name is None:
        return None
    return _resolver(family_name)

"""ComfyUI's `comfy.controlnet` for node packs (Advanced-ControlNet and friends import these):
thin names over `comfy_core.controlnet`, resolved when a pack first reads them so that importing
the module stays torch-free (as every surface module)."""
from __future__ import annotations

import importlib
from typing import Any

# name -> (module, attribute)
_NAMES = {
    "ControlBase": ("comfy_core.controlnet.base", "ControlBase"),
    "ControlLora": ("comfy_core.controlnet.control_lora", "ControlLora"),
    "broadcast_image_to": ("comfy_core.controlnet.hint", "broadcast_image_to"),
    "ControlNet": ("comfy_core.controlnet.runner", "ControlNet"),
    "T2IAdapter": ("comfy_core.controlnet.t2i", "T2IAdapter"),
    "UNION_CONTROLNET_TYPES": ("comfy_core.controlnet.types", "UNION_CONTROLNET_TYPES"),
    "StrengthType": ("comfy_core.controlnet.types", "StrengthType"),
    "ControlNetSD35": ("compat.ldm_controlnet", "ControlNetSD35"),
}


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module 'comfy.controlnet' has no attribute {name!r}")
    module, attribute = _NAMES[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


__all__ = ["ControlBase", "ControlNet", "ControlNetSD35", "ControlLora", "T2IAdapter", "load_controlnet", "UNION_CONTROLNET_TYPES",
           "StrengthType", "broadcast_image_to"]


def load_controlnet(ckpt_path: Any, model: Any = None, model_options: dict | None = None) -> ControlBase:
    """ComfyUI's signature: `model_options` may hold `dtype` and `global_average_pooling`; the
    dtype defaults to the model's (float32 without one)."""
    import torch

    options = dict(model_options or {})
    dtype = options.get("dtype")
    if dtype is None:
        dtype = model.model_dtype() if model is not None and hasattr(model, "model_dtype") else torch.float32
    from comfy_core.controlnet.load import load_controlnet as _load

    return _load(ckpt_path, model, dtype, global_average_pooling=options.get("global_average_pooling"))

"""Today's ComfyUI's weight lookups and per-module load list (`comfy.model_patcher`), for packs.

After ComfyUI's comfy/model_patcher.py (Comfy-Org/ComfyUI 2026, @08d0e510; v0.27.1's form):

- `get_key_weight(model, key)` -> `(weight, set_func, convert_func)`: the parameter at the dotted
  `key`, with the owning layer's `set_<param>` / `convert_<param>` methods when it has them (the
  patching protocol of layers that store a weight in another form: our `ScaledFp8Linear`,
  comfy_core/models/storage_cast.py, has both);
- `low_vram_patch_estimate_vram(model, key)`: the memory a low-VRAM weight patch of `key` needs
  while it is computed: the weight's elements in the model's compute dtype
  (`manual_cast_dtype`; float32 where the model has no such attribute, the weight's own dtype
  where it is None) times `LOWVRAM_PATCH_ESTIMATE_MATH_FACTOR` (2);
- `load_list(patcher, for_dynamic, default_device)`: ComfyUI's `ModelPatcher._load_list`, the
  modules a partial load moves one by one, each `(*sort key, module bytes, name, module, params)`.
  A module whose parameters are not all its own (a non-leaf holding parameters next to children)
  is left out, its own parameters moved to `default_device` when given. The sort key is the
  memory moving the module costs (`(offload bytes,)`), or for dynamic loading small modules
  (< 64 KiB) first, then the largest (`(offload bytes >= 64 KiB, -offload bytes)`). Offload bytes
  are the module's size plus, for a layer that casts its weights (`comfy_cast_weights`), the
  estimate of its patched weight and bias (or, unpatched, their size in the compute dtype when
  it differs from the stored one).

Our runtime moves whole models (comfy_core's memory manager) and never calls `_load_list` itself;
packs that plan their own placement from it (ComfyUI-MultiGPU's DisTorch) get ComfyUI's list.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from compat.device_memory import module_size
from compat.files_utils import get_attr
from compat.quant_ops_api import QuantizedTensor

LOWVRAM_PATCH_ESTIMATE_MATH_FACTOR = 2
SMALL_MODULE_BYTES = 64 * 1024  # dynamic loading moves modules below this first


def get_key_weight(model: Any, key: str) -> tuple[Any, Callable | None, Callable | None]:
    """`(weight, set_func, convert_func)` of the parameter at `key` (see the module docstring);
    with a `convert_func` the weight is read by its full path, as ComfyUI does."""
    set_func = convert_func = None
    owner_path, _, param = key.rpartition(".")
    if not owner_path:
        return get_attr(model, key), None, None
    owner = get_attr(model, owner_path)
    set_func = getattr(owner, f"set_{param}", None)
    convert_func = getattr(owner, f"convert_{param}", None)
    weight = getattr(owner, param)
    if convert_func is not None:
        weight = get_attr(model, key)
    return weight, set_func, convert_func


def low_vram_patch_estimate_vram(model: Any, key: str) -> int:
    """Bytes a low-VRAM patch of `key` needs while computed (see the module docstring); 0 for a
    key with no weight."""
    weight, _, _ = get_key_weight(model, key)
    if weight is None:
        return 0
    dtype = getattr(model, "manual_cast_dtype", torch.float32)
    if dtype is None:
        dtype = weight.dtype
    return weight.numel() * dtype.itemsize * LOWVRAM_PATCH_ESTIMATE_MATH_FACTOR


def _offload_bytes(patcher: Any, key: str) -> int:
    """Extra bytes casting the weight `key` costs: its patch estimate when patched, else its
    size in the compute dtype when it is stored otherwise (or quantised)."""
    model = patcher.model
    if key in patcher.patches:
        return low_vram_patch_estimate_vram(model, key)
    dtype = getattr(model, "manual_cast_dtype", None)
    try:
        weight, _, _ = get_key_weight(model, key)
    except AttributeError:  # a layer without this parameter (no bias)
        return 0
    if dtype is None or weight is None:
        return 0
    if weight.dtype != dtype or isinstance(weight, QuantizedTensor):
        return weight.numel() * dtype.itemsize
    return 0


def load_list(patcher: Any, for_dynamic: bool = False, default_device: Any = None) -> list[tuple]:
    """ComfyUI's `ModelPatcher._load_list` for `patcher` (see the module docstring)."""
    loading: list[tuple] = []
    for name, module in patcher.model.named_modules():
        params = dict(module.named_parameters(recurse=False))
        not_own = any(p not in params for p, _ in module.named_parameters(recurse=True))
        if not_own:
            if default_device is not None:
                for param_name, param in params.items():
                    param.data = param.data.to(device=default_device,
                                               dtype=getattr(module, param_name + "_comfy_model_dtype", None))
            continue
        if not (hasattr(module, "comfy_cast_weights") or params):
            continue
        size = module_size(module)
        offload = size
        if hasattr(module, "comfy_cast_weights"):
            offload += _offload_bytes(patcher, f"{name}.weight") + _offload_bytes(patcher, f"{name}.bias")
        key = (offload >= SMALL_MODULE_BYTES, -offload) if for_dynamic else (offload,)
        loading.append(key + (size, name, module, params))
    return loading

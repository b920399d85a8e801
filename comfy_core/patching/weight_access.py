"""A layer's stored weight versus its true weight: ComfyUI's `convert_<name>` / `set_<name>` protocol.

After ComfyUI's comfy/model_patcher.py (`get_key_weight`, `patch_weight_to_device`): a layer may
store a weight in a form other than its value, e.g. the scaled-fp8 layers of comfy/ops.py
(`scaled_fp8_ops`, here `comfy_core.models.storage_cast.ScaledFp8Linear`), which keep fp8 and a
scale. Such a layer has `convert_weight(tensor, inplace=...)`, turning a copy of the stored tensor
into the true weight, and `set_weight(value, seed=..., return_weight=True)`, turning a true
(patched) weight back into the stored form. Patch maths works on the true weight; what the
patcher swaps in is the stored form. Layers without the methods store their value as it is
(fp8 by seeded stochastic rounding, ComfyUI's `stochastic_rounding(out, dtype, seed)`).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from comfy_core.weights.stochastic_rounding import store_patched, string_to_seed


def converters(owner: nn.Module, attr: str) -> tuple[Callable[..., Any] | None, Callable[..., Any] | None]:
    """`(convert_<attr>, set_<attr>)` of the layer holding a weight (None where it has none)."""
    return getattr(owner, f"convert_{attr}", None), getattr(owner, f"set_{attr}", None)


def true_weight(owner: nn.Module, attr: str, stored: torch.Tensor, device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A new `dtype` tensor holding the true value of `stored` (the layer's tensor `attr`)."""
    working = stored.detach().to(device=device if device is not None else stored.device, dtype=dtype, copy=True)
    convert, _ = converters(owner, attr)
    return convert(working, inplace=True) if convert is not None else working


def stored_form(owner: nn.Module, attr: str, key: str, value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The tensor to hold for the true (patched) float32 `value` of weight `key`, stored in `dtype`:
    the layer's `set_<attr>` result where it has one, else `value` rounded as ComfyUI rounds it."""

    _, setter = converters(owner, attr)
    if setter is not None:
        return setter(value, seed=string_to_seed(key), return_weight=True)
    return store_patched(value, dtype, key)

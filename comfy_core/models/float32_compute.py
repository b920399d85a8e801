"""Running one module in float32 whatever its weights are stored in (after ComfyUI's
`comfy/ops.py` manual_cast), shared by the text and image encoders."""
from __future__ import annotations

import torch
from torch import nn


def compute_in_float32(module: nn.Module, *args: object, **kwargs: object) -> torch.Tensor:
    """`module(*args, **kwargs)` with its floating-point weights cast to float32 for this call only.

    ComfyUI runs its text encoders in float32 whatever the weights are stored in (`comfy/ops.py`
    `manual_cast`: each layer's weight cast to the float32 input as it runs; fp16 storage is
    ComfyUI's default on the CPU). Computing in fp16 instead moves the conditioning by ~1e-3
    relative, which samplers such as dpm_adaptive and SDXL's turn into visible pixel changes.
    One module at a time, so the extra memory is one layer's weights; the module is not changed
    (patched weights are read as they are).
    """
    tensors = dict(module.named_parameters())
    tensors.update(module.named_buffers())
    if all(t.dtype == torch.float32 or not t.is_floating_point() for t in tensors.values()):
        return module(*args, **kwargs)
    cast = {name: t.float() if t.is_floating_point() else t for name, t in tensors.items()}
    return torch.func.functional_call(module, cast, args, kwargs)

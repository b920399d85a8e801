"""Running the diffusion model in another compute dtype than its weights are stored in
(ComfyUI's `ModelPatcher.set_model_compute_dtype`, node ModelComputeDtype of
comfy_extras/nodes_model_advanced.py: an object patch `manual_cast_dtype`, and ComfyUI's
manual-cast layers cast each weight to that dtype as they run).

Here the same effect comes from a `model_function_wrapper`: each model call runs with the
module's floating-point weights cast to the dtype (`torch.func.functional_call`, the module
itself untouched), so the input is cast too (the model casts its input to its weights' dtype)
and the output comes back in float32 as always. A wrapper already installed keeps running,
around the cast call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def dtype_from_name(name: str) -> torch.dtype | None:
    """ComfyUI's `node_helpers.string_to_torch_dtype`: "fp32"/"fp16"/"bf16", else None (default)."""
    return DTYPES.get(name)


def call_in_dtype(module: torch.nn.Module, dtype: torch.dtype, *args: Any, **kwargs: Any) -> Any:
    """`module(*args, **kwargs)` with its floating-point parameters and buffers cast to `dtype`."""
    tensors = dict(module.named_parameters())
    tensors.update(module.named_buffers())
    cast = {name: t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t for name, t in tensors.items()}
    return torch.func.functional_call(module, cast, args, kwargs)


@dataclass(frozen=True)
class ComputeDtype:
    """`model_function_wrapper(apply_model, args)` computing in `dtype`; `inner` is the wrapper
    that was there before (called with the casting apply_model), or None."""

    dtype: torch.dtype
    inner: Any = None

    def __call__(self, apply_model: Callable[..., torch.Tensor], args: dict) -> torch.Tensor:
        module = getattr(apply_model, "__self__", None)
        if not isinstance(module, torch.nn.Module):
            return self._run(apply_model, args)

        def cast_apply(*a: Any, **k: Any) -> torch.Tensor:
            return call_in_dtype(module, self.dtype, *a, **k)
        return self._run(cast_apply, args)

    def _run(self, apply_model: Callable[..., torch.Tensor], args: dict) -> torch.Tensor:
        if self.inner is not None:
            return self.inner(apply_model, args)
        return apply_model(args["input"], args["timestep"], **args["c"])

    def cache_signature(self) -> tuple | None:
        # A wrapped pack wrapper has no identity we can vouch for: key on the producing node then.
        return ("ComputeDtype", str(self.dtype)) if self.inner is None else None

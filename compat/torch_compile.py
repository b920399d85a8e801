"""ComfyUI's `comfy_api.torch_helpers.torch_compile` (comfy_api/torch_helpers/torch_compile.py):
compile the diffusion model, or some of its submodules, with `torch.compile` when the model is
sampled, through an APPLY_MODEL wrapper on the patcher (ComfyUI's `add_wrapper_with_key`
protocol, comfy_core/wrappers.py). A thin face over comfy_core/patching/torch_compile.py,
which the `TorchCompileModel` node uses too: the compile happens at the first model call (its
time logged), the compiled modules are swapped into the model object for each call and the
originals put back after it, the options stay in `model_options["torch_compile_kwargs"]`, and a
backend that cannot work on the model's device, or a failed compile, is a `TorchCompileError`.
"""
from __future__ import annotations

from typing import Any, Callable

from comfy_core.patching.torch_compile import (COMPILE_KEY, TORCH_COMPILE_KWARGS, TorchCompileError, _get, _set,
                                               set_torch_compile_wrapper as _set_wrapper)

__all__ = ["COMPILE_KEY", "TORCH_COMPILE_KWARGS", "TorchCompileError", "apply_torch_compile_factory",
           "set_torch_compile_wrapper"]


def apply_torch_compile_factory(compiled_module_dict: dict[str, Callable]) -> Callable:
    """ComfyUI's APPLY_MODEL wrapper over modules a pack compiled itself: them in place for the
    call, the originals after it."""
    def apply_torch_compile_wrapper(executor: Any, *args: Any, **kwargs: Any) -> Any:
        originals: dict[str, Any] = {}
        try:
            for key, compiled in compiled_module_dict.items():
                originals[key] = _get(executor.class_obj, key)
                _set(executor.class_obj, key, compiled)
            return executor(*args, **kwargs)
        finally:
            for key, original in originals.items():
                _set(executor.class_obj, key, original)
    return apply_torch_compile_wrapper


def set_torch_compile_wrapper(model: Any, backend: str, options: dict | None = None, mode: str | None = None,
                              fullgraph: bool = False, dynamic: bool | None = None,
                              keys: list[str] | None = None, *args: Any, **kwargs: Any) -> None:
    """Compile `keys` (default `["diffusion_model"]`) of the model object of `model` (a MODEL
    patcher, changed in place: callers clone first, as ComfyUI's nodes do) at its first call."""
    _set_wrapper(model, backend, options=options, mode=mode, fullgraph=fullgraph, dynamic=dynamic, keys=keys)

"""ComfyUI's `comfy_api.torch_helpers.set_torch_compile_wrapper` (comfy_api/torch_helpers/
torch_compile.py): compile the diffusion model, or some of its submodules, with `torch.compile`
when the model is sampled, through an APPLY_MODEL wrapper on the patcher (ComfyUI's
`add_wrapper_with_key` protocol, comfy_core/patching/wrappers.py). The compiled modules are
swapped into the model object for each call and the originals put back after it, so the
patcher's base module is never left changed; the compile options stay in
`model_options["torch_compile_kwargs"]`, as in ComfyUI.
"""
from __future__ import annotations

from typing import Any, Callable

COMPILE_KEY = "torch.compile"
TORCH_COMPILE_KWARGS = "torch_compile_kwargs"


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _set(obj: Any, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, last, value)


def apply_torch_compile_factory(compiled_module_dict: dict[str, Callable]) -> Callable:
    """The APPLY_MODEL wrapper: the compiled modules in place for the call, the originals after."""
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
    patcher, changed in place: callers clone first, as ComfyUI's nodes do)."""
    import torch

    from comfy_core.patching.wrappers import WrappersMP

    model.remove_wrappers_with_key(WrappersMP.APPLY_MODEL, COMPILE_KEY)  # one compile wrapper at a time
    keys = list(keys or ["diffusion_model"])
    compile_kwargs = {"backend": backend, "options": options, "mode": mode, "fullgraph": fullgraph,
                      "dynamic": dynamic}
    compiled = {key: torch.compile(model=model.get_model_object(key), **compile_kwargs) for key in keys}
    model.add_wrapper_with_key(WrappersMP.APPLY_MODEL, COMPILE_KEY, apply_torch_compile_factory(compiled))
    model.model_options[TORCH_COMPILE_KWARGS] = compile_kwargs

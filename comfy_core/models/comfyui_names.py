"""`comfyui_name`: a class whose name here says what it is (`FluxTransformer`, `FluxLatentFormat`,
`FluxModelConfig`) while its `__name__` is the one ComfyUI gives it (`Flux`), which packs compare
(`type(module).__name__ == "Flux"`) and show. `__qualname__` keeps our name, so the class is still
found by pickling and reads unambiguously in tracebacks; compat's facades expose it under
ComfyUI's name (`comfy.ldm.flux.model.Flux`, `comfy.latent_formats.Flux`,
`comfy.supported_models.Flux`)."""
from __future__ import annotations

from typing import Callable, TypeVar

T = TypeVar("T", bound=type)


def comfyui_name(name: str) -> Callable[[T], T]:
    """Class decorator: `cls.__name__` set to ComfyUI's `name` (see the module docstring)."""

    def apply(cls: T) -> T:
        cls.__name__ = name
        return cls

    return apply

"""Surface modules whose names are ours, resolved on first read and replaceable by packs.

A ComfyUI module such as `comfy.samplers` or `comfy.ldm.modules.attention` is, here, a facade
over several of our modules. `facade(__name__, NAMES)` at the end of a surface file turns that
module into a `FacadeModule`:

- reading a name in `NAMES` (`{name: "package.module:attribute"}`) imports its home module
  then, not when the surface module is imported, so packs importing `comfy.*` at start-up do
  not pull torch in; the value is cached in the facade's namespace;
- assigning a name in `NAMES` (a pack doing `comfy.samplers.sampling_function = mine`, as
  ComfyUI packs do) also assigns it on the home module, so our runtime, which calls such
  functions through its module's globals, uses the pack's replacement, as ComfyUI would.
  Names outside `NAMES` are plain module attributes.
"""
from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any, Mapping


def _home(target: str) -> tuple[str, str]:
    module, _, attribute = target.partition(":")
    if not module or not attribute:
        raise ValueError(f"facade target must be 'package.module:attribute', got {target!r}")
    return module, attribute


class FacadeModule(ModuleType):
    """A module whose `_facade_names` resolve lazily and forward assignments to their home."""

    _facade_names: Mapping[str, str]

    def __getattr__(self, name: str) -> Any:  # only called when `name` is not in the namespace
        names = self.__dict__.get("_facade_names", {})
        if name not in names:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        module, attribute = _home(names[name])
        value = getattr(importlib.import_module(module), attribute)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        names = self.__dict__.get("_facade_names", {})
        if name in names:
            module, attribute = _home(names[name])
            setattr(importlib.import_module(module), attribute, value)
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.__dict__.get("_facade_names", {})))


def facade(module_name: str, names: Mapping[str, str]) -> ModuleType:
    """Make the already-imported module `module_name` a `FacadeModule` over `names` (merged with
    any it had); returns it. Names the module defines itself win over `names`."""
    module = sys.modules[module_name]
    merged = dict(getattr(module, "_facade_names", {}))
    merged.update(names)
    for name, target in merged.items():
        _home(target)  # reject a malformed table at import, not on first read
    module.__class__ = FacadeModule
    module.__dict__["_facade_names"] = merged
    return module

"""Submodules of a surface package that appear as its attributes on first read.

In ComfyUI, by the time packs load, ComfyUI's own start-up has imported nearly every `comfy.*`
module, so `import comfy` followed by `comfy.samplers.KSampler.SAMPLERS` works (UltimateSDUpscale
reads it so). Our packages import nothing up front (start-up stays torch-free); instead a package's
`__getattr__ = submodule_attribute(__name__)` imports `package.name` when `name` is read and is
a submodule of it.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, Callable


def submodule_attribute(package: str) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: a submodule by name, else AttributeError."""

    def __getattr__(name: str) -> Any:
        if not name.startswith("__"):
            fullname = f"{package}.{name}"
            if fullname in sys.modules:
                return sys.modules[fullname]
            try:
                found = importlib.util.find_spec(fullname) is not None
            except (ImportError, ValueError):
                found = False
            if found:
                return importlib.import_module(fullname)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__

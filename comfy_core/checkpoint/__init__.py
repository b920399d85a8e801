"""Checkpoint files: header reading without tensor data, typed errors, dtype policy, loading.

`from comfy_core.checkpoint import load_checkpoint` (also exported as `comfy_core.load_checkpoint`).
"""
from __future__ import annotations

from typing import Any

_LAZY = {
    "load_checkpoint": "comfy_core.checkpoint.load",
    "LoadOptions": "comfy_core.checkpoint.load",
    "DtypePolicy": "comfy_core.checkpoint.dtype",
    "CheckpointFile": "comfy_core.checkpoint.reader",
    "read_safetensors_header": "comfy_core.checkpoint.header",
}


def __getattr__(name: str) -> Any:
    # Lazy so that `import comfy_core.checkpoint.errors` stays torch-free.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

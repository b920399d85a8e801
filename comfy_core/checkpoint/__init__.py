"""Checkpoint files, the format only: header reading without tensor data, parallel tensor
reads, key conversions, dtype policy, assignment to meta-built modules, typed errors.

What the tensors become (families, models, encoders, patchers) is composed above, in
`comfy_core.loading` (`comfy_core.load_checkpoint`).
"""
from __future__ import annotations

from typing import Any

_LAZY = {
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

"""The attention backends' names, importable without torch (`comfy_core.attention` imports it):
the node layer declares its backend combos from them before torch loads.

`BACKEND_NAMES` is the order of `comfy_core.attention.backends.BACKENDS` (the default first),
which builds its table from this list. Every backend runs anywhere except those in
`OPTIONAL_BACKENDS`, which need their package.
"""
from __future__ import annotations

import importlib.util

DEFAULT_BACKEND = "sdpa"
BACKEND_NAMES: tuple[str, ...] = (DEFAULT_BACKEND, "sub_quadratic", "split", "naive", "xformers")
OPTIONAL_BACKENDS: dict[str, str] = {"xformers": "xformers"}  # backend -> the package it needs


def missing_optional_backends() -> list[str]:
    """Optional backends whose package is not installed at all (found without importing it)."""
    return [name for name, package in OPTIONAL_BACKENDS.items() if importlib.util.find_spec(package) is None]

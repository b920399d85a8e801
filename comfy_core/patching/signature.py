"""Hashable fingerprints of patch data and options, for `Patcher.signature()`.

Plain values (str, int, float, bool, None, dtype, device) count by value; containers by content;
everything else (tensors, functions, patch records) by object identity. Identity is sound here
because patchers keep what they fingerprint alive, and the weight cache pins what it keys on.
"""
from __future__ import annotations

from typing import Any, Hashable

import torch

_PLAIN = (str, int, float, bool, type(None), torch.dtype, torch.device)


def freeze(value: Any) -> Hashable:
    """A hashable fingerprint of `value`."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, dict):
        return ("dict", tuple(sorted(((repr(k), freeze(v)) for k, v in value.items()), key=lambda kv: kv[0])))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(freeze(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted(repr(freeze(v)) for v in value)))
    return ("id", type(value).__qualname__, id(value))

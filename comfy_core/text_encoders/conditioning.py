"""Pure helpers on CONDITIONING values: a list of `[cond [B, T, W], options dict]` (ComfyUI's shape).

They never mutate their input: entries are new lists with copied dicts (tensors are shared, never
written), so cached node outputs stay valid. After ComfyUI's `node_helpers.conditioning_set_values`.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch


class ConditioningError(ValueError):
    """A value handed over as CONDITIONING does not have ComfyUI's shape."""


def check_conditioning(value: Any, name: str = "conditioning") -> list:
    """Return `value` if it is a CONDITIONING list, else raise naming `name` and what was received."""
    if not isinstance(value, list):
        raise ConditioningError(f"input {name!r}: expected CONDITIONING (a list of [tensor, dict]), "
                                f"got {type(value).__name__}")
    for index, entry in enumerate(value):
        if (not isinstance(entry, (list, tuple)) or len(entry) != 2 or not isinstance(entry[0], torch.Tensor)
                or not isinstance(entry[1], dict)):
            raise ConditioningError(f"input {name!r}: entry {index} must be [tensor, dict], got {entry!r:.80}")
    return value


def set_values(conditioning: list, values: Mapping[str, Any]) -> list:
    """A copy of `conditioning` whose every entry's dict has `values` set (others kept)."""
    out = []
    for cond, options in conditioning:
        updated = dict(options)
        updated.update(values)
        out.append([cond, updated])
    return out


def combine(first: list, second: list) -> list:
    """ConditioningCombine: all entries of both (the sampler averages them by area and strength)."""
    return list(first) + list(second)


def area_in_latent(width: int, height: int, x: int, y: int, down_factor: int = 8) -> tuple[int, int, int, int]:
    """Pixel rectangle -> ComfyUI's `area` tuple in latent units: (height, width, y, x), floored."""
    return (height // down_factor, width // down_factor, y // down_factor, x // down_factor)

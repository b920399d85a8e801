"""Reading tensor shapes by name when detecting a model's structure from its weights.

Detection reads names and shapes only (safetensors header entries or tensors, anything with a
`.shape`), never tensor data; a missing name is a typed error of the model being detected.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping


def shape_reader(tensors: Mapping[str, Any], prefix: str, error: type[Exception],
                 model: str) -> Callable[[str], tuple[int, ...]]:
    """`shape(key)`: the shape of `tensors[prefix + key]` as a tuple; raises `error` naming the
    full key (`"<model> key '<prefix+key>' is missing"`) when there is no such tensor."""

    def shape(key: str) -> tuple[int, ...]:
        try:
            return tuple(tensors[prefix + key].shape)
        except KeyError:
            raise error(f"{model} key {prefix + key!r} is missing") from None

    return shape


def numbered_children(tensors: Mapping[str, Any], head: str) -> dict[int, set[str]]:
    """`{index: {suffix}}` of the names `<head><index>.<suffix>` (blocks, layers, levels)."""
    pattern = re.compile(re.escape(head) + r"(\d+)\.(.+)$")
    found: dict[int, set[str]] = {}
    for name in tensors:
        match = pattern.match(name)
        if match:
            found.setdefault(int(match.group(1)), set()).add(match.group(2))
    return found


def count_numbered(tensors: Mapping[str, Any], prefix: str, group: str, error: type[Exception], name: str) -> int:
    """How many `group.N.` entries there are under `prefix` (blocks of a DiT); a gap in the
    numbering raises `error` naming the network `name`."""
    indices = set(numbered_children(tensors, prefix + group + "."))
    if indices and indices != set(range(len(indices))):
        missing = sorted(set(range(max(indices) + 1)) - indices)
        raise error(f"{name}: {prefix}{group} has entries up to {max(indices)} but none numbered {missing}")
    return len(indices)

"""Reading tensor shapes by name when detecting a model's structure from its weights.

Detection reads names and shapes only (safetensors header entries or tensors, anything with a
`.shape`), never tensor data; a missing name is a typed error of the model being detected.
"""
from __future__ import annotations

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

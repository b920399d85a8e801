"""V1 node instances kept across prompts (ComfyUI's `execution.py` `caches.objects`)."""
from __future__ import annotations

from typing import Any, Callable


class ObjectCache:
    """V1 node instances, kept per (node id, class_type) across prompts, as ComfyUI does; made
    again when the node type's maker changed (its pack was reloaded, so its class is new)."""

    def __init__(self) -> None:
        self._objects: dict[tuple[str, str], tuple[Callable[[], Any], Any]] = {}
        self._owner: dict[tuple[str, str], tuple[str, str]] = {}

    def begin_prompt(self, keys: set[tuple[str, str]]) -> None:
        """Keep instances of nodes still in the prompt (and of nodes they expanded)."""
        for key in [k for k in self._objects if k not in keys and self._owner.get(k) not in keys]:
            del self._objects[key]
            self._owner.pop(key, None)

    def get_or_make(self, key: tuple[str, str], owner: tuple[str, str], make: Callable[[], Any]) -> Any:
        held = self._objects.get(key)
        if held is None or held[0] is not make:
            held = self._objects[key] = (make, make())
            self._owner[key] = owner
        return held[1]

    def clear(self) -> None:
        self._objects.clear()
        self._owner.clear()

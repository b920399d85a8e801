"""V1 node instances kept across prompts (ComfyUI's `execution.py` `caches.objects`)."""
from __future__ import annotations

from typing import Any, Callable


class ObjectCache:
    """V1 node instances, kept per (node id, class_type) across prompts, as ComfyUI does."""

    def __init__(self) -> None:
        self._objects: dict[tuple[str, str], Any] = {}
        self._owner: dict[tuple[str, str], tuple[str, str]] = {}

    def begin_prompt(self, keys: set[tuple[str, str]]) -> None:
        """Keep instances of nodes still in the prompt (and of nodes they expanded)."""
        for key in [k for k in self._objects if k not in keys and self._owner.get(k) not in keys]:
            del self._objects[key]
            self._owner.pop(key, None)

    def get_or_make(self, key: tuple[str, str], owner: tuple[str, str], make: Callable[[], Any]) -> Any:
        if key not in self._objects:
            self._objects[key] = make()
            self._owner[key] = owner
        return self._objects[key]

    def clear(self) -> None:
        self._objects.clear()
        self._owner.clear()

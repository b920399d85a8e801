"""ComfyUI's named attention functions (`comfy.ldm.modules.attention`'s
`REGISTERED_ATTENTION_FUNCTIONS`, `register_attention_function`, `get_attention_function`) over
the active session's extension points.

In ComfyUI the registry is one process-wide dict. Here a pack's registration goes to its session's
`ExtensionPoints.attention_functions` (comfy_core/extension_points.py), on top of the built-in
three (`comfy_core.attention.calling.BUILT_IN_ATTENTION_FUNCTIONS`); `get_attention_function`
and `REGISTERED_ATTENTION_FUNCTIONS` (a live view, not a copy) read the same table. Nothing of
comfy_core is imported until a name is used, so packs importing this at start-up stay torch-free.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterator, MutableMapping

from compat.facade import active_points

_MISSING: Any = ...


class RegisteredAttentionFunctions(MutableMapping):
    """ComfyUI's `REGISTERED_ATTENTION_FUNCTIONS` as packs use it (membership, iteration, item
    access, assignment): the built-in functions plus the active session's registrations; writes
    go to the session (a built-in name cannot be removed)."""

    def _table(self) -> dict[str, Callable[..., Any]]:
        from comfy_core.attention.calling import registered_attention_functions

        return registered_attention_functions(active_points())

    def __getitem__(self, name: str) -> Callable[..., Any]:
        return self._table()[name]

    def __setitem__(self, name: str, func: Callable[..., Any]) -> None:
        from comfy_core.attention.calling import BUILT_IN_ATTENTION_FUNCTIONS

        if name in BUILT_IN_ATTENTION_FUNCTIONS:
            raise KeyError(f"attention function {name!r} is built in and cannot be replaced")
        active_points().attention_functions[name] = func

    def __delitem__(self, name: str) -> None:
        del active_points().attention_functions[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return f"RegisteredAttentionFunctions({sorted(self._table())})"


REGISTERED_ATTENTION_FUNCTIONS = RegisteredAttentionFunctions()


def register_attention_function(name: str, func: Callable[..., Any]) -> None:
    """ComfyUI's `register_attention_function`: `func` under `name` for this session; a name
    already registered keeps its first function (logged, as ComfyUI)."""
    if name in REGISTERED_ATTENTION_FUNCTIONS:
        logging.warning("Attention function %s already registered, skipping registration.", name)
        return
    REGISTERED_ATTENTION_FUNCTIONS[name] = func


def get_attention_function(name: str, default: Any = _MISSING) -> Callable[..., Any] | None:
    """ComfyUI's `get_attention_function`: "optimized" is the session's `optimized_attention`
    (its replacement, or the patcher's backend), other names the registered functions; an
    unknown name is a KeyError unless `default` is given."""
    from comfy_core.attention import calling

    if default is _MISSING:
        return calling.get_attention_function(name, points=active_points())
    return calling.get_attention_function(name, default, points=active_points())

"""Hashable fingerprints of patch data and options, for `Patcher.signature()` and cache keys.

Equal fingerprints promise interchangeable values, across prompts, so nothing here may be reused
by a different value later:

- plain values (str, int, float, bool, None, dtype, device) count by value;
- containers (dict, list, tuple, set) by content;
- an object with a `cache_signature()` method by what that returns (a LoRA adapter names its
  file, an embedding set its content); `None` there means "no stable identity";
- anything else (tensors, functions, patch records) by an identity token: a number handed out
  once per live object and never again, even when CPython reuses the object's `id()` after it
  dies. An object that cannot be weakly referenced cannot get one; its fingerprint falls back to
  `id()`, which is only safe while the caller keeps the object alive, so it is marked unstable.
"""
from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any, Hashable

import torch

_PLAIN = (str, int, float, bool, type(None), torch.dtype, torch.device)
# The same protocol name graph/value_keys.py reads (comfy_core never imports graph, so it is spelled twice).
SIGNATURE_METHOD = "cache_signature"


class _Tokens:
    """Identity tokens: `id(obj)` -> (weak reference, token), forgotten when the object dies."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[weakref.ref, int]] = {}
        self._next = itertools.count(1)
        self._lock = threading.Lock()

    def token(self, obj: Any) -> int | None:
        key = id(obj)
        entry = self._by_id.get(key)
        if entry is not None and entry[0]() is obj:
            return entry[1]
        try:
            ref = weakref.ref(obj, lambda r, key=key: self._forget(key, r))
        except TypeError:
            return None  # not weakly referenceable: no token
        with self._lock:
            entry = self._by_id.get(key)
            if entry is not None and entry[0]() is obj:
                return entry[1]
            token = next(self._next)
            self._by_id[key] = (ref, token)
        return token

    def _forget(self, key: int, ref: weakref.ref) -> None:
        with self._lock:
            entry = self._by_id.get(key)
            if entry is not None and entry[0] is ref:
                del self._by_id[key]

    def __len__(self) -> int:
        return len(self._by_id)


_TOKENS = _Tokens()


def identity_token(obj: Any) -> int | None:
    """A token for `obj` that no other object ever gets (None if `obj` takes no weak reference)."""
    return _TOKENS.token(obj)


class _Walk:
    """One fingerprint computation; `stable` turns False when something had no lasting identity."""

    __slots__ = ("stable",)

    def __init__(self) -> None:
        self.stable = True

    def freeze(self, value: Any) -> Hashable:
        if isinstance(value, _PLAIN):
            return value
        if isinstance(value, dict):
            return ("dict", tuple(sorted(((repr(k), self.freeze(v)) for k, v in value.items()),
                                         key=lambda kv: kv[0])))
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, tuple(self.freeze(v) for v in value))
        if isinstance(value, (set, frozenset)):
            return ("set", tuple(sorted(repr(self.freeze(v)) for v in value)))
        method = getattr(type(value), SIGNATURE_METHOD, None)
        if method is not None:
            signature = method(value)
            if signature is not None:
                return ("sig", type(value).__qualname__, signature)
        bound_self = getattr(value, "__self__", None)
        bound_func = getattr(value, "__func__", None)
        if bound_self is not None and bound_func is not None:
            # A bound method is a fresh object on every attribute access: name its parts instead.
            return ("method", self.freeze(bound_self), self.freeze(bound_func))
        token = identity_token(value)
        if token is None:
            self.stable = False
            return ("id", type(value).__qualname__, id(value))
        return ("obj", type(value).__qualname__, token)


def fingerprint(value: Any) -> tuple[Hashable, bool]:
    """`(fingerprint, stable)`: stable means it stays valid after `value` is gone."""
    walk = _Walk()
    frozen = walk.freeze(value)
    return frozen, walk.stable


def freeze(value: Any) -> Hashable:
    """A hashable fingerprint of `value` (see the module docstring)."""
    return _Walk().freeze(value)

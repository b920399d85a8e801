"""Value-level cache keys: an upstream change that yields equal values reuses what was computed.

The structural key (graph/signature.py) names a node's inputs by the nodes that produce them, so
any change upstream misses the cache downstream, as in ComfyUI. Many changes leave the values
unchanged: a LoRA at strength 0 returns its input model, a LoRA re-read because only its CLIP
strength changed gives a MODEL with the same patches. Model handles (MODEL, CLIP, VAE: objects
with a `cache_signature()`, comfy_core/patching/signature.py; node packs' types may define it
too) say what they are by value, and equal signatures promise interchangeable values.

A node that a handle reaches (an input is a handle, or comes from such a node) gets a *value
key* when it is about to run: its structural key's parts, except that each linked input is
keyed by its value where it has a value identity, else by its producer's value key:

    vkey(N) = H("value", class_type, IS_CHANGED(N), [N's id, as for the structural key],
                for each input key in sorted order: (key, constant)
                                                  | (key, ("v", token(value)))
                                                  | (key, ("@", vkey(source), slot))
                                                  | (key, ("s", structural key(source), slot)))

`token` exists when every element of the input's list is a handle whose signature is not None
or a plain scalar (bool, int, float, str, None), and no custom (pack) node is at or above the
producer in the prompt: a pack may change a model in place, which a signature cannot see
(graph/run.py `below_custom_node`), so below a pack node values are keyed by their producers. The last form names a producer no handle
reaches. Nodes no handle reaches get no value key: for them it would say what the structural
key says, and computing it would slow every graph of plain values.

If the structural key misses and the value key names an entry computed earlier, the node takes
that entry's outputs instead of running; it is announced with `executing` as if it ran.

A node gets no value key (so runs whenever its structural key misses) when:
- it reads the prompt itself or API credentials (hidden PROMPT, DYNPROMPT, EXTRA_PNGINFO, AUTH):
  its result depends on more than its inputs (SaveImage writes the prompt into the PNG);
- it chooses its inputs lazily (`check_lazy_status`): which inputs it reads is behaviour;
- its IS_CHANGED or a constant cannot be encoded, or an input's producer has no value key.
"""
from __future__ import annotations

import logging
from typing import Any, Hashable, Iterable

log = logging.getLogger(__name__)

SIGNATURE_METHOD = "cache_signature"
_SCALARS = frozenset({bool, int, float, str, type(None)})


def element_token(value: Any) -> Hashable | None:
    """The value identity of one element, or None when it has none."""
    kind = type(value)
    if kind in _SCALARS:
        if kind is float:
            if value != value:  # NaN is never equal to itself: no identity
                return None
            return ("float", repr(value))  # repr keeps -0.0 apart from 0.0
        return (kind.__name__, value)
    method = getattr(kind, SIGNATURE_METHOD, None)
    if method is None:
        return None
    try:
        signature = method(value)
    except Exception as ex:  # noqa: BLE001 -- a faulty signature only costs a cache hit
        log.warning("%s.%s() raised %s: %s; keying on its producer instead",
                    kind.__qualname__, SIGNATURE_METHOD, type(ex).__name__, ex)
        return None
    if signature is None:
        return None
    return ("sig", kind.__module__, kind.__qualname__, signature)


def value_token(values: Iterable[Any] | None) -> Hashable | None:
    """The identity of one input's list of values (one per call), or None if any element lacks one."""
    if values is None:
        return None
    tokens = []
    for value in values:
        token = element_token(value)
        if token is None:
            return None
        tokens.append(token)
    return tuple(tokens)


def has_handle(values: Iterable[Any] | None) -> bool:
    """True when some value has a `cache_signature()` method: a handle to a shared model."""
    return values is not None and any(getattr(type(v), SIGNATURE_METHOD, None) is not None for v in values)


def holds_handles(outputs: Iterable[Iterable[Any]]) -> bool:
    """True when some output is a model handle. The classic cache carries value-reachable entries
    over one extra prompt; it must not carry these, since a MODEL or CLIP keeps its whole base
    module alive."""
    return any(has_handle(slot) for slot in outputs)

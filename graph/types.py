"""Wire-type matching between a source output and a target input.

Follows ComfyUI's `comfy_execution/validation.py: validate_node_input` semantics (read, not
copied): first `not (received != expected)`, so a pack's `str` subclass that overrides `__ne__`
(the common `AnyType` trick) decides for itself; then `*` on either side matches anything; then
comma-separated unions match when they share at least one member. A V3 `MatchType` socket
(`COMFY_MATCHTYPE_V3`, graph/v3_schema.py) matches anything on either side: ComfyUI leaves that
check to the editor, which resolves the template's type as links are made.
"""
from __future__ import annotations

from typing import Any

COMBO = "COMBO"
MATCHTYPE = "COMFY_MATCHTYPE_V3"


def _members(type_name: str) -> set[str]:
    return {part.strip() for part in type_name.split(",")}


def types_match(received: Any, expected: Any) -> bool:
    """True when an output of type `received` may feed an input of type `expected`."""
    if not received != expected:  # noqa: SIM202 -- keeps a pack's overridden __ne__ in charge
        return True
    if received == MATCHTYPE or expected == MATCHTYPE:
        return True
    # A combo input (a list of allowed values) accepts a combo output (V3's "COMBO" or a list).
    if isinstance(expected, (list, tuple)):
        return isinstance(received, (list, tuple)) or received == COMBO
    if not isinstance(received, str) or not isinstance(expected, str):
        return False
    got, want = _members(received), _members(expected)
    if "*" in got or "*" in want:
        return True
    return bool(got & want)

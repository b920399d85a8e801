"""Typed errors of patches and their weight arithmetic (the patchers' own errors derive from these)."""
from __future__ import annotations


class PatchError(RuntimeError):
    """A patch could not be recorded or applied."""


class PatchDataError(PatchError, TypeError):
    """A patch value has a form the weight calculation does not know, or the wrong shape."""

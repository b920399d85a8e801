"""Typed errors of the patchers (the weight-data ones live with the arithmetic, comfy_core/weights)."""
from __future__ import annotations

from comfy_core.weights.errors import PatchDataError, PatchError

__all__ = ["ObjectPatchError", "PatchConflictError", "PatchDataError", "PatchError"]


class PatchConflictError(PatchError):
    """A base module is already in use, in this thread, with a different patch set.

    Two patch sets of one shared base module cannot be live at once: the weights are shared. In
    another thread this waits instead; in the same thread it would wait forever, so it raises.
    """


class ObjectPatchError(PatchError, AttributeError):
    """An object patch names an attribute path that does not resolve on the base module."""

"""Typed errors of the patchers."""
from __future__ import annotations


class PatchError(RuntimeError):
    """A patch could not be recorded or applied."""


class PatchDataError(PatchError, TypeError):
    """A patch value has a form the weight calculation does not know, or the wrong shape."""


class PatchConflictError(PatchError):
    """A base module is already in use, in this thread, with a different patch set.

    Two patch sets of one shared base module cannot be live at once: the weights are shared. In
    another thread this waits instead; in the same thread it would wait forever, so it raises.
    """


class ObjectPatchError(PatchError, AttributeError):
    """An object patch names an attribute path that does not resolve on the base module."""

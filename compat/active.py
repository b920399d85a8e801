"""Which `CompatSession` packs' code sees now (`active()`), see compat/session.py:

1. the session set in the context variable (around pack imports, before every node call, in
   the context that binds the server, around packs' route handlers);
2. otherwise the session of the most recent install (held by the import hook, compat.finder).

Its own module, below `compat.session`, so that the faces packs import (the `nodes` facades
among them) can find the session without importing the module that builds sessions.
"""
from __future__ import annotations

import contextvars
from typing import Any

from compat import finder

# The compat.session.CompatSession selected in this context, or None. Typed `Any`: this module
# sits below compat.session and does not import it, even for annotations.
_active: contextvars.ContextVar[Any] = contextvars.ContextVar("compat_session", default=None)


class CompatNotInstalledError(RuntimeError):
    """A ComfyUI facade was used before any server installed the compat layer."""


def active() -> Any:
    """The `CompatSession` packs' code should see now (see the module docstring)."""
    session = _active.get()
    if session is None:
        session = finder.installed_session()
    if session is None:
        raise CompatNotInstalledError(
            "the ComfyUI compatibility layer is not installed: call compat.install(env, registry) first")
    return session

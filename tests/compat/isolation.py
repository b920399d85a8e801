"""Saving and restoring the state the compat layer leaves behind, so tests stay order-independent.

`CompatSession.bind` and `before_node_call` select their session by *setting* context variables
(compat.active's active session, GraphBuilder's default prefix) with no reset: by design, since the server then runs in that context. A synchronous test
(e.g. one calling `web.bootstrap.build_state`) runs in the main thread's context, which every
later synchronous test shares, so without a restore that server's session would stay "active"
for the rest of the run and hide the "most recent install" fallback of `compat.session.active()`.
`compat.install` also points the process-wide import hook at its session. `snapshot()` before a
test and `restore()` after it put all of that back.

The modules are looked up in `sys.modules`, never imported here: a test that never touched the
compat layer has nothing to restore, and torch-free tests stay torch-free. The surface modules
packs import (`folder_paths`, `server`, `comfy.*`) stay cached in `sys.modules`: they hold no
session of their own, every call looks up `active()`.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

# (module, attribute) of every context variable the compat layer sets without a reset token
CONTEXT_VARS: tuple[tuple[str, str], ...] = (
    ("compat.active", "_active"),
    ("compat.graph_builder", "_prefix"),
    # the ExtensionPoints in force (its default, and so its "unset" value, is the module's BUILT_IN)
    ("comfy_core.extension_points", "_current"),
)
_UNSET = object()  # the module was not imported when the snapshot was taken


@dataclass(frozen=True)
class CompatState:
    values: dict[tuple[str, str], Any]  # context variable -> its value, or _UNSET
    finder: Any  # the installed compat.finder.ComfyModuleFinder, or None
    finder_session: Any  # the session it answered for


def _var(module_name: str, attribute: str) -> Any:
    module = sys.modules.get(module_name)
    return getattr(module, attribute, None) if module is not None else None


def _installed_finder() -> Any:
    finder = sys.modules.get("compat.finder")
    return finder._installed() if finder is not None else None  # noqa: SLF001


def snapshot() -> CompatState:
    """The compat layer's leftover state now, in this thread's context."""
    values: dict[tuple[str, str], Any] = {}
    for key in CONTEXT_VARS:
        var = _var(*key)
        values[key] = var.get() if var is not None else _UNSET
    found = _installed_finder()
    return CompatState(values, found, found.session if found is not None else None)


def restore(saved: CompatState) -> None:
    """Put back what `snapshot()` saw: the context variables (their default None where the
    module was imported after the snapshot) and the import hook with its session (removed when
    there was none, as in a fresh process)."""
    for key in CONTEXT_VARS:
        var = _var(*key)
        if var is None:
            continue
        value = saved.values[key]
        # No token to reset with (the test set it), so set: None is the default of every one
        # but the extension points' (BUILT_IN).
        default = getattr(sys.modules[key[0]], "BUILT_IN", None)
        var.set(default if value is _UNSET else value)
    found = _installed_finder()
    if found is not None and found is not saved.finder:
        sys.meta_path.remove(found)
    if saved.finder is not None:
        if saved.finder not in sys.meta_path:
            sys.meta_path.insert(0, saved.finder)
        saved.finder.session = saved.finder_session

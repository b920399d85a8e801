"""No ComfyUI surface name a pack assigns changes a comfy_core global (issue 28).

Packs reassign names of ComfyUI's modules (`comfy.samplers.sampling_function = f`, ...). Every
such name of our surface (every name of every facade module under compat/comfy_surface) is
assigned here, inside a session, and afterwards no comfy_core module's namespace differs: what
the runtime may be changed through is `ExtensionPoints` (comfy_core/extension_points.py), and the
names that stand for one set the session's field instead (checked name by name in
test_extension_points_*.py).
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

SURFACE = Path(__file__).resolve().parents[2] / "compat" / "comfy_surface"
_MISSING = object()


def _surface_module_names() -> list[str]:
    names = []
    for path in sorted(SURFACE.rglob("*.py")):
        parts = list(path.relative_to(SURFACE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            names.append(".".join(parts))
    return names


def _core_namespaces() -> dict[str, dict[str, object]]:
    return {name: dict(vars(module)) for name, module in list(sys.modules.items())
            if module is not None and (name == "comfy_core" or name.startswith("comfy_core."))}


def _core_module_names() -> list[str]:
    return [name for name, module in list(sys.modules.items())
            if module is not None and (name == "comfy_core" or name.startswith("comfy_core."))]


def _changes_now(before: dict[str, dict[str, object]]) -> list[str]:
    """`_changes(before, _core_namespaces())` read from the live namespaces, without copying them."""
    changed = []
    for module, names in before.items():
        live = sys.modules.get(module)
        now = vars(live) if live is not None else {}
        for name, value in names.items():
            if now.get(name, _MISSING) is not value:
                changed.append(f"{module}.{name}")
    return changed


def _changes(before: dict[str, dict[str, object]], after: dict[str, dict[str, object]]) -> list[str]:
    changed = []
    for module, names in before.items():
        now = after.get(module, {})
        for name, value in names.items():
            if now.get(name, _MISSING) is not value:
                changed.append(f"{module}.{name}")
    return changed


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args, **kwargs):  # a pack's replacement function
        raise AssertionError(f"sentinel for {self.name} called")


def test_assigning_any_surface_name_leaves_comfy_core_alone(session):
    from compat.facade import FacadeModule

    facades = []
    for name in _surface_module_names():
        try:
            module = importlib.import_module(name)
        except Exception:  # a surface module that needs an optional package: not assignable here
            continue
        if isinstance(module, FacadeModule):
            facades.append(module)
    assert len(facades) > 20, "the surface modules were not found"

    assigned, wrong = 0, []
    before, loaded = None, None
    for module in facades:
        names = list(module.__dict__["_facade_names"].items())
        # every comfy_core module the targets' homes need is imported before the snapshot
        saved = [(name, target, module.__dict__.get(name, _MISSING), _home_value(target)) for name, target in names]
        # One module's names are assigned together and the namespaces compared once (a snapshot of every
        # comfy_core module per name is what made this test slow); a change is then traced name by name.
        # The snapshot is taken again only when comfy_core's modules changed (a module imported since) or
        # after a change (traced below); otherwise the live namespaces are compared with the last one.
        now_loaded = _core_module_names()
        if before is None or now_loaded != loaded:
            before, loaded = _core_namespaces(), now_loaded
        for name, _target, _before, _home in saved:
            setattr(module, name, _Sentinel(f"{module.__name__}.{name}"))
        assigned += len(saved)
        changed = _changes_now(before)
        _restore(session, module, saved)
        if changed:
            before = None  # whatever the tracing finds, the next module compares with a fresh snapshot
            for name, target, before_value, home_value in saved:
                snapshot = _core_namespaces()
                setattr(module, name, _Sentinel(f"{module.__name__}.{name}"))
                wrong += [f"{module.__name__}.{name} -> {c}" for c in _changes(snapshot, _core_namespaces())]
                _restore(session, module, [(name, target, before_value, home_value)])
    assert assigned > 300
    assert not wrong, "surface assignments that change a comfy_core global:\n" + "\n".join(wrong)


@pytest.mark.parametrize("surface, name", [
    ("comfy.samplers", "sampling_function"),
    ("comfy.lora", "calculate_weight"),
])
def test_an_extension_point_name_sets_the_session_field(session, surface, name):
    from compat.facade import ExtensionPoint

    module = importlib.import_module(surface)
    target = module.__dict__["_facade_names"][name]
    assert isinstance(target, ExtensionPoint)
    built_in = getattr(module, name)

    def replacement(*args, **kwargs):
        return built_in(*args, **kwargs)

    setattr(module, name, replacement)
    try:
        assert getattr(session.extension_points, target.field) is replacement
        assert getattr(module, name) is replacement
    finally:
        setattr(session.extension_points, target.field, None)
    assert getattr(module, name) is built_in


def _home_value(target):
    from compat.facade import ExtensionPoint

    if isinstance(target, ExtensionPoint):
        return _MISSING
    home, _, attribute = target.partition(":")
    return getattr(importlib.import_module(home), attribute, _MISSING)


def _restore(session, module, saved) -> None:
    """Put the assigned names back (last first), for the tests after this one."""
    from compat.facade import ExtensionPoint

    for name, target, before_value, home_value in reversed(saved):
        if isinstance(target, ExtensionPoint):
            setattr(session.extension_points, target.field, None)
        else:
            home, _, attribute = target.partition(":")
            if home_value is not _MISSING:
                setattr(importlib.import_module(home), attribute, home_value)
            if before_value is _MISSING:
                module.__dict__.pop(name, None)
            else:
                module.__dict__[name] = before_value

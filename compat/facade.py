"""Surface modules whose names are ours, resolved on first read and replaceable by packs.

A ComfyUI module such as `comfy.samplers` or `comfy.ldm.modules.attention` is, here, a facade
over several of our modules. `facade(__name__, NAMES)` at the end of a surface file turns that
module into a `FacadeModule`:

- reading a name in `NAMES` (`{name: "package.module:attribute"}`) imports its home module
  then, not when the surface module is imported, so packs importing `comfy.*` at start-up do
  not pull torch in; the value is cached in the facade's namespace;
- assigning a name in `NAMES` sets it in the facade's namespace, so every pack reading the
  surface sees it; when its home is a compat module (ComfyUI's shapes, which other compat code
  calls through that module, as ComfyUI calls its own globals) the home takes it too. A comfy_core
  home is never assigned: the runtime reads no replaceable global. Names outside `NAMES` are plain
  module attributes.
- a name outside `NAMES` that ComfyUI's module imported from another ComfyUI module
  (`comfy.samplers.k_diffusion_sampling`) resolves to that module's attribute on first read
  (compat/reexports.py); every surface module is a `FacadeModule` (compat/finder.py).
- a name whose target is an `ExtensionPoint` (`point("sampling_function", "home:attr")`) is one
  of comfy_core's extension points (comfy_core/extension_points.py): reading it gives the active
  session's value, or the built-in at `home:attr` when the session has none; assigning it sets
  the session's field. Nothing is cached or assigned on a module, so the runtime, which reads
  only the `ExtensionPoints` in force, sees the pack's function and no module global changes.
"""
from __future__ import annotations

import importlib
import sys
from types import ModuleType
from dataclasses import dataclass
from typing import Any, Mapping, Union


@dataclass(frozen=True)
class ExtensionPoint:
    """A surface name backed by the field `field` of the active session's `ExtensionPoints`;
    `built_in` ("package.module:attribute") is what it reads as while that field is empty."""

    field: str
    built_in: str


def point(field: str, built_in: str) -> ExtensionPoint:
    _home(built_in)
    return ExtensionPoint(field, built_in)


def active_points() -> Any:
    """The `ExtensionPoints` of the session packs see now (the one in force without a session)."""
    from comfy_core import extension_points
    from compat import active

    try:
        return active.active().extension_points
    except active.CompatNotInstalledError:
        return extension_points.current()


def _is_core(module: str) -> bool:
    return module == "comfy_core" or module.startswith("comfy_core.")


def _home(target: str) -> tuple[str, str]:
    module, _, attribute = target.partition(":")
    if not module or not attribute:
        raise ValueError(f"facade target must be 'package.module:attribute', got {target!r}")
    return module, attribute


class FacadeModule(ModuleType):
    """A module whose `_facade_names` resolve lazily and forward assignments to their home."""

    _facade_names: Mapping[str, Union[str, ExtensionPoint]]

    def __getattr__(self, name: str) -> Any:  # only called when `name` is not in the namespace
        names = self.__dict__.get("_facade_names", {})
        if name not in names:
            if name == "__all__":
                return self._star_names()
            if name.startswith("__"):
                raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
            # a name ComfyUI's module imported from another one (compat/reexports.py)
            from compat.reexports import resolve

            value = resolve(self.__name__, name)
            self.__dict__[name] = value
            return value
        target = names[name]
        if isinstance(target, ExtensionPoint):
            value = getattr(active_points(), target.field)
            if value is not None:
                return value
            module, attribute = _home(target.built_in)
            return getattr(importlib.import_module(module), attribute)
        module, attribute = _home(target)
        value = getattr(importlib.import_module(module), attribute)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        names = self.__dict__.get("_facade_names", {})
        target = names.get(name)
        if isinstance(target, ExtensionPoint):
            setattr(active_points(), target.field, value)
            return
        if target is not None:
            module, attribute = _home(target)
            # A compat home (ComfyUI's shapes, called by other compat code, as ComfyUI calls its
            # own module globals) takes the pack's value; comfy_core is never assigned: what the
            # runtime lets packs change is an ExtensionPoint (tests/compat/test_no_core_globals.py).
            if not _is_core(module):
                setattr(importlib.import_module(module), attribute, value)
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        # Deleting an extension point's name (pytest's monkeypatch undoes an assignment so, the
        # name never being in the namespace) empties the session's field: the built-in again.
        target = self.__dict__.get("_facade_names", {}).get(name)
        if isinstance(target, ExtensionPoint) and name not in self.__dict__:
            setattr(active_points(), target.field, None)
            return
        super().__delattr__(name)

    def _star_names(self) -> list[str]:
        """What `from <module> import *` binds: ComfyUI's modules declare no `__all__`, so there
        a star import takes every public global, the names re-exported from other ComfyUI modules
        included. Here most of those are resolved on first read, so they are listed (and resolved,
        now) explicitly: the facade's names, the module's re-exports (compat/reexports.py) and its
        own public globals; a name whose home cannot be imported here is left out, as a star
        import would not have bound a name that ComfyUI's module lacked."""
        from compat.reexports import reexports

        candidates = [*self.__dict__.get("_facade_names", {}), *reexports().get(self.__name__, {}),
                      *(n for n, v in list(self.__dict__.items())
                        if not isinstance(v, ModuleType) and getattr(v, "__module__", None) != __name__)]
        found: list[str] = []
        for name in dict.fromkeys(candidates):
            if name.startswith("_"):
                continue
            try:
                getattr(self, name)
            except (AttributeError, ImportError):
                continue
            found.append(name)
        return found

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.__dict__.get("_facade_names", {})))


def as_facade(module: ModuleType) -> ModuleType:
    """Make a plain surface module a `FacadeModule` with no names of its own, so it answers
    ComfyUI's re-exported names (compat/reexports.py); a facade already is one."""
    if type(module) is ModuleType:
        module.__class__ = FacadeModule
        module.__dict__.setdefault("_facade_names", {})
    return module


def facade(module_name: str, names: Mapping[str, Union[str, ExtensionPoint]]) -> ModuleType:
    """Make the already-imported module `module_name` a `FacadeModule` over `names` (merged with
    any it had); returns it. Names the module defines itself win over `names`."""
    module = sys.modules[module_name]
    merged = dict(getattr(module, "_facade_names", {}))
    merged.update(names)
    for name, target in merged.items():
        # reject a malformed table at import, not on first read
        _home(target.built_in if isinstance(target, ExtensionPoint) else target)
    module.__class__ = FacadeModule
    module.__dict__["_facade_names"] = merged
    return module


_NAMESPACE = ModuleType.__dict__["__dict__"].__get__  # a module's own dictionary, as stored


def _torch_loaded() -> bool:
    """torch imported and done initialising (not mid-import on another thread)."""
    torch = sys.modules.get("torch")
    return torch is not None and not getattr(getattr(torch, "__spec__", None), "_initializing", False)


class ListedFacadeModule(FacadeModule):
    """A facade whose dictionary, asked for as a whole (`vars(module)`, `module.__dict__`) once torch
    is loaded, first reads every one of its names, so it lists what ComfyUI's module, whose globals
    all exist after its import, lists (packs that walk `vars(comfy.latent_formats)` for classes).
    Before torch is loaded it is left as it is: reading a name may import torch, which importing a
    surface module must not (tests/compat/test_compat_startup.py). Extension points are never in a
    facade's dictionary and stay out; a name whose home cannot be imported is left out. The
    interpreter's own name lookups (and this module's code above, which only reads the stored
    dictionary's entries) do not go through this."""

    @property  # type: ignore[misc]
    def __dict__(self) -> dict:  # type: ignore[override]
        namespace = _NAMESPACE(self)
        if not namespace.get("_facade_listed") and _torch_loaded():
            namespace["_facade_listed"] = True  # first: the reads below come back here
            for name, target in namespace.get("_facade_names", {}).items():
                if name not in namespace and not isinstance(target, ExtensionPoint):
                    try:
                        getattr(self, name)
                    except (AttributeError, ImportError):
                        continue
        return namespace


def listed(module_name: str) -> ModuleType:
    """Make the facade `module_name` a `ListedFacadeModule` (after `facade(...)`); returns it."""
    module = sys.modules[module_name]
    if not isinstance(module, FacadeModule):
        raise TypeError(f"listed({module_name!r}): make it a facade first")
    module.__class__ = ListedFacadeModule
    return module

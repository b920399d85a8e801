"""The import hook: ComfyUI's top-level module names resolve to the files in `comfy_surface/`.

A meta-path finder placed first on `sys.meta_path` answers only for the names in `TOP_LEVEL`
and their submodules (a submodule such as `comfy.utils` is found through its package's
`__path__`, as usual), and for the `comfy_extras.nodes_*` modules that have no file, which it
generates from the built-in nodes' facades (compat/extras_modules.py). Every surface module is
loaded by `SurfaceLoader`, which makes it a `FacadeModule`, so it also answers the names
ComfyUI's module imported from another ComfyUI module (compat/reexports.py).

`utils` is ComfyUI's top-level helper package (`utils.install_util`, `utils.json_util`,
`utils.extra_config`, which ComfyUI-Manager imports). The name is common: many packs carry their
own `utils` module or package and import it as `import utils` once their folder is on
`sys.path`. In ComfyUI those win only when their folder precedes ComfyUI's root on `sys.path`;
here the rule is: a `utils` found on a `sys.path` entry that is not an installed-packages or
standard-library folder (a pack's folder, the working directory) wins, and ours answers
otherwise (as ComfyUI's root precedes site-packages). Our own code never imports `utils`.
`app` (ComfyUI's application package, of which only `app.logger` is here) is as common a name
and follows the same rule.

ComfyUI also puts its `comfy/` folder on `sys.path` before it loads packs, so `import
model_management` or `from ldm.modules.diffusionmodules.util import ...` (Marigold, CCSR) find
`comfy.model_management` and `comfy.ldm...`. Here such a name (`COMFY_CHILDREN`, and its
submodules) is the same module object as its `comfy.` twin (one state, where ComfyUI has two
copies), and only when no installed module or package of that name exists (ComfyUI's folder
precedes site-packages; here an installed package keeps its name). The finder stays installed once a server installed it, because packs
also import lazily while nodes run. It also remembers the most recently installed `CompatSession`, the fallback of
`compat.session.active()`, and answers ComfyUI's names on our `nodes` package
(`comfy_module_attribute`, which nodes/__init__.py looks for on `sys.meta_path`).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

SURFACE = Path(__file__).resolve().parent / "comfy_surface"
# ComfyUI's module names that packs import (our `nodes` package answers `import nodes` itself).
TOP_LEVEL = frozenset({"folder_paths", "server", "comfy", "comfy_execution", "comfy_api", "comfy_extras",
                       "latent_preview", "node_helpers", "execution", "utils", "comfyui_version", "app", "comfy_api_nodes"})
# Names a module of the same name elsewhere on sys.path takes over (see the module docstring).
YIELDING = frozenset({"utils", "app"})  # `app`: ComfyUI's app.logger here; a pack's own `app` wins
# The modules and packages of ComfyUI's `comfy` package, importable by their bare names too (see above).
COMFY_CHILDREN = frozenset(p.stem for p in (SURFACE / "comfy").iterdir()
                           if not p.name.startswith("_") and (p.suffix == ".py" or (p / "__init__.py").is_file())) - TOP_LEVEL


class ComfyModuleFinder(importlib.abc.MetaPathFinder):
    """Finds `TOP_LEVEL` modules in `SURFACE` only."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith("comfy_extras.") and not (SURFACE / "comfy_extras" / f"{fullname[13:]}.py").is_file():
            return self.session.generated_module_spec(fullname)  # a module made of node facades
        top = fullname.partition(".")[0]
        if top in COMFY_CHILDREN:
            return self._comfy_child_spec(fullname, top)
        if top not in TOP_LEVEL:
            return None
        if fullname in TOP_LEVEL:
            if fullname in YIELDING and _found_outside_installed_packages(fullname):
                return None  # the pack's own module: the next finders import it
            spec = importlib.machinery.PathFinder.find_spec(fullname, [str(SURFACE)])
        else:  # a submodule: found through its package's __path__, as usual
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not str(spec.origin or "").startswith(str(SURFACE)):
            return None  # not ours (a pack's own `utils.x`): the next finders decide
        spec.loader = SurfaceLoader(spec.loader, self)
        return spec

    def _comfy_child_spec(self, fullname: str, top: str) -> importlib.machinery.ModuleSpec | None:
        """`model_management`, `ldm.modules...`: the `comfy.` module of that name, unless an
        installed module owns the top-level name (see the module docstring)."""
        if fullname == top and importlib.machinery.PathFinder.find_spec(top) is not None:
            return None
        try:
            twin = importlib.import_module(f"comfy.{fullname}")
        except ImportError:
            return None
        return importlib.util.spec_from_loader(fullname, AliasLoader(twin),
                                               is_package=hasattr(twin, "__path__"))

    def comfy_module_attribute(self, module: str, name: str) -> Any:
        """ComfyUI's module-level name `name` of our package `module` (`nodes.KSampler`, ...):
        our `nodes` package forwards the names it lacks here (nodes/__init__.py), so it needs
        no import of compat; the session answers (CompatSession.module_attribute)."""
        return self.session.module_attribute(module, name)


class SurfaceLoader(importlib.abc.Loader):
    """Loads a surface module with its file's loader, then hands it to the session's
    `prepare_surface_module` (which makes it a `FacadeModule`, so every surface module also
    answers the names ComfyUI's module imported from another one, compat/reexports.py).
    Everything else is the file loader's (source, resources)."""

    def __init__(self, inner: Any, finder: ComfyModuleFinder) -> None:
        self.inner = inner
        self.finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        prepare = getattr(self.finder.session, "prepare_surface_module", None)
        if prepare is not None:
            prepare(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class AliasLoader(importlib.abc.Loader):
    """Loads a name as an existing module object (`model_management` is `comfy.model_management`):
    the import system's own attributes written onto it while loading are put back."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.own = {k: module.__dict__[k] for k in ("__spec__", "__loader__") if k in module.__dict__}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.module

    def exec_module(self, module: Any) -> None:
        for key, value in self.own.items():
            module.__dict__[key] = value


def _installed_package_roots() -> set[str]:
    """Folders of installed distributions and the standard library (resolved)."""
    import site
    import sysconfig

    roots = {p for key in ("stdlib", "platstdlib", "purelib", "platlib") if (p := sysconfig.get_paths().get(key))}
    try:
        roots.update(site.getsitepackages())
    except AttributeError:  # virtualenv's old site module
        pass
    user = getattr(site, "getusersitepackages", lambda: None)()
    if user:
        roots.add(user)
    return {str(Path(r).resolve()) for r in roots}


def _found_outside_installed_packages(name: str) -> bool:
    """True when the first `sys.path` entry holding a module or package `name` is not an
    installed-packages or standard-library folder (see the module docstring)."""
    installed = _installed_package_roots()
    for entry in sys.path:
        folder = Path(entry or ".")
        if not ((folder / name / "__init__.py").is_file() or (folder / f"{name}.py").is_file()
                or (folder / name).is_dir() and any((folder / name).glob("*.py"))):
            continue
        resolved = str(folder.resolve())
        return not any(resolved == root or resolved.startswith(root + os.sep) for root in installed)
    return False


def _installed() -> ComfyModuleFinder | None:
    for entry in sys.meta_path:
        if isinstance(entry, ComfyModuleFinder):
            return entry
    return None


def install(session: Any) -> ComfyModuleFinder:
    """Put the finder first on `sys.meta_path` (once) and make `session` its fallback session."""
    found = _installed()
    if found is None:
        found = ComfyModuleFinder(session)
        sys.meta_path.insert(0, found)
    found.session = session
    return found


def installed_session() -> Any:
    """The session of the most recent `install`, or None."""
    found = _installed()
    return found.session if found is not None else None

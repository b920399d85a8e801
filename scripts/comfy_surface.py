"""Record ComfyUI's Python surface (module names, call signatures, node class attributes, folder
kinds) from a ComfyUI checkout, by reading its files with `ast` only.

    .venv/bin/python scripts/comfy_surface.py /path/to/ComfyUI             # print a summary
    .venv/bin/python scripts/comfy_surface.py /path/to/ComfyUI --write     # rewrite the data files

`--write` writes tests/data/comfy_surface_<version>.json, and two tables the compat layer reads:
compat/comfy_reexports.json (names a ComfyUI module imported from another, compat/reexports.py)
and compat/comfy_node_classes.json (the built-in node classes' names and members,
compat/node_facades.py).

The test data is tests/data/comfy_surface_<version>.json; tests/compat/test_comfy_surface.py
compares the compat layer's modules with it. Nothing of ComfyUI is imported or run, and no code is
recorded: names, parameter names and kinds, whether a parameter has a default, and the folder kinds
`folder_paths` registers.

What counts as the surface (issue 31): every module of `comfy/**`, `comfy_extras/**`,
`comfy_execution/**`, `comfy_api/**`, `comfy_config/**`, `app/*.py`, `utils/**` and the top-level
modules `folder_paths`, `nodes`, `server`, `execution`, `latent_preview`, `node_helpers`. Of each
module, its public module-level names (not starting with `_`), found at module level and inside
module-level `if` / `try` / `with` blocks, in four groups:

- `functions`: name -> signature string, e.g. `"(model, seed, steps=, *, denoise=, **kwargs)"`,
  where `name=` marks a parameter with a default, `/` and `*` are Python's markers;
- `classes`: name -> `{"bases": [...], "methods": {name: [kind, signature]}, "attributes": [...]}`,
  where kind is `method` (signature without `self`), `classmethod` (without `cls`), `static` or
  `property`; methods are the public ones plus `__init__` and `__call__`; attributes are the names
  assigned in the class body (and nested classes);
- `constants`: names assigned at module level;
- `imports`: name -> where it comes from (`"numpy"` for `import numpy as np`,
  `"comfy.k_diffusion:sampling"` for `from comfy.k_diffusion import sampling`, relative imports
  made absolute), for the names bound by imports at module level: a pack may read
  `comfy.samplers.k_diffusion_sampling` or `comfy.sample.np` through them.

`node_classes` maps, per module (nodes.py and comfy_extras), each class its `NODE_CLASS_MAPPINGS`
names or that is a V3 node (an `io.ComfyNode` subclass) to its node id, so the test can report the built-in nodes' attributes (`ImageScale.upscale_methods`,
`FUNCTION`, `RETURN_TYPES`, ...) apart. `folder_kinds` is every kind `folder_paths` assigns in
`folder_names_and_paths[...] = ...`.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = REPO / "tests" / "data"
COMPAT_DIR = REPO / "compat"

PACKAGES = ("comfy", "comfy_extras", "comfy_execution", "comfy_api", "comfy_config", "utils")
TOP_MODULES = ("folder_paths", "nodes", "server", "execution", "latent_preview", "node_helpers")
COMFY_TOP_LEVEL = frozenset(PACKAGES + TOP_MODULES + ("app",))
APP_PACKAGE = "app"  # only its own modules, not app/database (the asset database, no pack imports it)
KEPT_DUNDER_METHODS = ("__init__", "__call__")


class SurfaceError(ValueError):
    """The folder is not a ComfyUI checkout, or a file cannot be parsed."""


# -- signatures ----------------------------------------------------------------------------------

def signature_text(args: ast.arguments, drop_first: bool = False) -> str:
    """`"(a, b=, /, c, *args, d=, **kw)"`: names, defaults present, Python's `/` and `*` markers."""
    positional = [(a.arg, False) for a in args.posonlyargs] + [(a.arg, False) for a in args.args]
    # defaults belong to the last positional parameters
    for i in range(len(args.defaults)):
        index = len(positional) - len(args.defaults) + i
        positional[index] = (positional[index][0], True)
    n_posonly = len(args.posonlyargs)
    if drop_first and positional:
        positional = positional[1:]
        n_posonly = max(0, n_posonly - 1)
    parts: list[str] = []
    for i, (name, has_default) in enumerate(positional):
        parts.append(name + ("=" if has_default else ""))
        if n_posonly and i == n_posonly - 1:
            parts.append("/")
    if args.vararg is not None:
        parts.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        parts.append("*")
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        parts.append(arg.arg + ("=" if default is not None else ""))
    if args.kwarg is not None:
        parts.append("**" + args.kwarg.arg)
    return "(" + ", ".join(parts) + ")"


def _decorator_names(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set()
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            names.add(target.attr if target.attr in ("setter", "getter", "deleter") else target.attr)
    return names


# -- walking a module ----------------------------------------------------------------------------

def module_level_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a module body, descending into `if` / `try` / `with` blocks (names they
    bind are module-level names), never into functions or classes."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield from module_level_statements(stmt.body)
            yield from module_level_statements(stmt.orelse)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            yield from module_level_statements(stmt.body)
            for handler in stmt.handlers:
                yield from module_level_statements(handler.body)
            yield from module_level_statements(stmt.orelse)
            yield from module_level_statements(stmt.finalbody)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            yield from module_level_statements(stmt.body)
        else:
            yield stmt


def _target_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _target_names(element)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


def _public(name: str) -> bool:
    return not name.startswith("_")


def class_record(node: ast.ClassDef) -> dict[str, Any]:
    methods: dict[str, list[str]] = {}
    attributes: set[str] = set()
    for stmt in module_level_statements(node.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = stmt.name
            if not (_public(name) or name in KEPT_DUNDER_METHODS):
                continue
            decorators = _decorator_names(stmt)
            if "property" in decorators or decorators & {"setter", "getter", "deleter"} or "cached_property" in decorators:
                methods.pop(name, None)
                attributes.add(name)
                continue
            if "classmethod" in decorators:
                methods[name] = ["classmethod", signature_text(stmt.args, drop_first=True)]
            elif "staticmethod" in decorators:
                methods[name] = ["static", signature_text(stmt.args)]
            else:
                methods[name] = ["method", signature_text(stmt.args, drop_first=True)]
        elif isinstance(stmt, ast.Assign):
            names = [n for t in stmt.targets for n in _target_names(t) if _public(n)]
            if isinstance(stmt.value, ast.Name) and stmt.value.id in methods:
                # `append = execute`: another name of a method (0.3.64's V3 nodes keep their V1 names so)
                methods.update({n: methods[stmt.value.id] for n in names})
            else:
                attributes.update(names)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and _public(stmt.target.id):
            # `x: int` without a value is a dataclass field / annotation: an attribute of instances
            attributes.add(stmt.target.id)
        elif isinstance(stmt, ast.ClassDef) and _public(stmt.name):
            attributes.add(stmt.name)
    attributes -= set(methods)
    return {"bases": [ast.unparse(b) for b in node.bases],
            "methods": dict(sorted(methods.items())),
            "attributes": sorted(attributes)}


def module_record(tree: ast.Module, package: str = "") -> dict[str, Any]:
    """The public names of a module; `package` is the one its relative imports start from."""
    functions: dict[str, str] = {}
    classes: dict[str, dict[str, Any]] = {}
    constants: set[str] = set()
    imports: dict[str, str] = {}
    for stmt in module_level_statements(tree.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(stmt.name):
            functions[stmt.name] = signature_text(stmt.args)
        elif isinstance(stmt, ast.ClassDef) and _public(stmt.name):
            classes[stmt.name] = class_record(stmt)
        elif isinstance(stmt, ast.Assign):
            constants.update(n for t in stmt.targets for n in _target_names(t) if _public(n))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and _public(stmt.target.id):
            constants.add(stmt.target.id)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                name = alias.asname or alias.name.split(".")[0]
                if _public(name):
                    imports.setdefault(name, alias.name if alias.asname else name)
        elif isinstance(stmt, ast.ImportFrom):
            source = _absolute(stmt, package)
            for alias in stmt.names:
                name = alias.asname or alias.name
                if name != "*" and _public(name):
                    imports.setdefault(name, f"{source}:{alias.name}")
    # a name defined twice (a fallback in `except`) is one name; a def wins over an assignment
    constants -= set(functions) | set(classes)
    for name in set(imports) & (set(functions) | set(classes) | constants):
        del imports[name]
    return {"functions": dict(sorted(functions.items())), "classes": dict(sorted(classes.items())),
            "constants": sorted(constants), "imports": dict(sorted(imports.items()))}


def _absolute(stmt: ast.ImportFrom, package: str) -> str:
    """The module a `from ... import` reads, relative imports resolved against `package`."""
    if not stmt.level:
        return stmt.module or ""
    parts = package.split(".") if package else []
    base = parts[: len(parts) - (stmt.level - 1)] if stmt.level > 1 else parts
    return ".".join(base + ([stmt.module] if stmt.module else []))


# -- built-in node classes and folder kinds ------------------------------------------------------

def node_class_ids(tree: ast.Module, classes: dict[str, Any]) -> dict[str, str]:
    """`{class name: node id}` of the classes a module registers as nodes: the entries of its
    `NODE_CLASS_MAPPINGS` literal (and `.update({...})` / item assignments), plus V3 nodes
    (classes whose bases name ComfyNode; the id is `node_id=` of the schema in `define_schema`)."""
    found: dict[str, str] = {}

    def take(key: ast.expr | None, value: ast.expr) -> None:
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Name):
            found.setdefault(value.id, key.value)

    for stmt in module_level_statements(tree.body):
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "NODE_CLASS_MAPPINGS"
                                                for t in stmt.targets):
            value = stmt.value
        elif isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                        and t.value.id == "NODE_CLASS_MAPPINGS"):
                    take(t.slice, stmt.value)
        elif (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
              and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "update"
              and isinstance(stmt.value.func.value, ast.Name) and stmt.value.func.value.id == "NODE_CLASS_MAPPINGS"
              and stmt.value.args):
            value = stmt.value.args[0]
        if isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values):
                take(key, item)
    for stmt in module_level_statements(tree.body):
        if not (isinstance(stmt, ast.ClassDef) and stmt.name in classes
                and any(base.endswith("ComfyNode") for base in classes[stmt.name]["bases"])):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.keyword) and node.arg == "node_id" and isinstance(node.value, ast.Constant):
                found.setdefault(stmt.name, str(node.value.value))
                break
    return dict(sorted((name, node_id) for name, node_id in found.items() if name in classes))


FOLDER_KIND = re.compile(r"^folder_names_and_paths$")


def folder_kinds(tree: ast.Module) -> list[str]:
    """Kinds `folder_paths` registers: `folder_names_and_paths["kind"] = (...)` at module level."""
    kinds: set[str] = set()
    for stmt in module_level_statements(tree.body):
        if not isinstance(stmt, ast.Assign):
            continue
        for target in stmt.targets:
            if (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                    and FOLDER_KIND.match(target.value.id) and isinstance(target.slice, ast.Constant)
                    and isinstance(target.slice.value, str)):
                kinds.add(target.slice.value)
    return sorted(kinds)


# -- the checkout --------------------------------------------------------------------------------

def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def surface_files(root: Path) -> Iterator[Path]:
    for package in PACKAGES:
        folder = root / package
        if folder.is_dir():
            yield from sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)
    yield from sorted((root / APP_PACKAGE).glob("*.py"))
    for name in TOP_MODULES:
        path = root / f"{name}.py"
        if path.is_file():
            yield path


def comfy_version(root: Path) -> str:
    path = root / "comfyui_version.py"
    if not path.is_file():
        raise SurfaceError(f"{root} is not a ComfyUI checkout (no comfyui_version.py)")
    for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
        if (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__version__" for t in stmt.targets)
                and isinstance(stmt.value, ast.Constant)):
            return str(stmt.value.value)
    raise SurfaceError(f"{path} names no __version__")


def read_surface(root: str | Path) -> dict[str, Any]:
    root = Path(root).resolve()
    version = comfy_version(root)
    modules: dict[str, Any] = {}
    node_classes: dict[str, dict[str, str]] = {}
    kinds: list[str] = []
    for path in surface_files(root):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except SyntaxError as exc:
            raise SurfaceError(f"cannot parse {path}: {exc}") from exc
        name = module_name(root, path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        record = module_record(tree, package)
        modules[name] = record
        if name == "nodes" or name.startswith("comfy_extras."):
            found = node_class_ids(tree, record["classes"])
            if found:
                node_classes[name] = found
        if name == "folder_paths":
            kinds = folder_kinds(tree)
    return {"comfyui_version": version, "modules": dict(sorted(modules.items())),
            "node_classes": dict(sorted(node_classes.items())), "folder_kinds": kinds}


def counts(surface: dict[str, Any]) -> dict[str, int]:
    modules = surface["modules"].values()
    return {
        "modules": len(surface["modules"]),
        "functions": sum(len(m["functions"]) for m in modules),
        "classes": sum(len(m["classes"]) for m in modules),
        "methods": sum(len(c["methods"]) for m in modules for c in m["classes"].values()),
        "class attributes": sum(len(c["attributes"]) for m in modules for c in m["classes"].values()),
        "constants": sum(len(m["constants"]) for m in modules),
        "imports": sum(len(m["imports"]) for m in modules),
        "node classes": sum(len(v) for v in surface["node_classes"].values()),
        "folder kinds": len(surface["folder_kinds"]),
    }


def dump(surface: dict[str, Any]) -> str:
    """JSON with one line per module and per node-class list, so a new ComfyUI's diff reads by module."""
    def line(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"))

    out = ["{", f'"comfyui_version":{line(surface["comfyui_version"])},', '"modules":{']
    items = list(surface["modules"].items())
    out += [f"{line(name)}:{line(record)}" + ("," if i < len(items) - 1 else "") for i, (name, record) in enumerate(items)]
    out += ["},", '"node_classes":{']
    nodes = list(surface["node_classes"].items())
    out += [f"{line(name)}:{line(found)}" + ("," if i < len(nodes) - 1 else "") for i, (name, found) in enumerate(nodes)]
    out += ["},", f'"folder_kinds":{line(surface["folder_kinds"])}', "}"]
    return "\n".join(out) + "\n"


def reexports(surface: dict[str, Any]) -> dict[str, dict[str, str]]:
    """compat/comfy_reexports.json: per module, the names it imported from another ComfyUI
    module (`{name: "module:attribute"}`; a whole module as `"package:module"`), not the
    top-level packages `import comfy.x` binds."""
    out: dict[str, dict[str, str]] = {}
    for module, record in surface["modules"].items():
        found = {}
        for name, source in record["imports"].items():
            home = source.split(":")[0]
            if home.split(".")[0] not in COMFY_TOP_LEVEL or name in COMFY_TOP_LEVEL:
                continue
            if ":" not in source:  # `import comfy.model_management as mm`: the module itself
                package, _, leaf = source.rpartition(".")
                if not package:
                    continue
                source = f"{package}:{leaf}"
            found[name] = source
        if found:
            out[module] = found
    return out


def node_class_members(surface: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """compat/comfy_node_classes.json: per built-in node id, ComfyUI's class name, module, and
    its class's recorded methods and attributes (the facades in compat/node_facades.py add the
    ones they can answer: V1 method names of V3 nodes, `upscale_methods`, ...)."""
    out: dict[str, dict[str, Any]] = {}
    for module, classes in surface["node_classes"].items():
        for class_name, node_id in classes.items():
            record = surface["modules"][module]["classes"][class_name]
            out[node_id] = {"class": class_name, "module": module, "methods": record["methods"],
                            "attributes": record["attributes"]}
    return dict(sorted(out.items()))


def data_path(version: str) -> Path:
    return DATA_DIR / f"comfy_surface_{version}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", help="a ComfyUI checkout (a work tree; only its .py files are read)")
    parser.add_argument("--write", action="store_true", help="write tests/data/comfy_surface_<version>.json")
    args = parser.parse_args(argv)
    try:
        surface = read_surface(args.checkout)
    except SurfaceError as exc:
        print(f"comfy_surface: {exc}", file=sys.stderr)
        return 2
    for key, value in counts(surface).items():
        print(f"{key:>17}: {value}")
    if args.write:
        out = data_path(surface["comfyui_version"])
        out.write_text(dump(surface), encoding="utf-8")
        print(f"wrote {out.relative_to(REPO)} ({out.stat().st_size // 1024} KiB)")
        for path, table in ((COMPAT_DIR / "comfy_reexports.json", reexports(surface)),
                            (COMPAT_DIR / "comfy_node_classes.json", node_class_members(surface))):
            lines = [f"{json.dumps(k)}:{json.dumps(v, separators=(',', ':'))}" for k, v in table.items()]
            path.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

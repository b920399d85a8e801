"""How many of ComfyUI's official local-model workflow templates this engine covers.

Two packages: ComfyUI 0.3.64's `comfyui-workflow-templates` 0.1.95 (requirements-test-data.txt,
which setup.sh --dev installs in .venv/test-data) and the newest `comfyui-workflow-templates-json`
(`--newest WHEEL_OR_FOLDER`; else the installed module, which requirements.txt's templates pull;
else the newest wheel, fetched once with `pip download --no-deps` into
~/.cache/comfy-engine/templates/, again with `--update`).

A template is a local-model one when the package's index says so: `openSource` true, or no
`openSource` field and no "API" tag (the paid cloud nodes' templates are counted apart). It is
covered when every node type it uses, inside its subgraphs too, exists here and it converts to an
API prompt (`graph.editor_workflow`, subgraphs flattened to compound ids; that is what
`main.py run` executes). Covered means the nodes exist: that the model family runs is what
tests/web/test_template_workflows*.py check on tiny files.

    .venv/bin/python bench/template_coverage.py [--missing] [--covered] [--newest PATH] [--update]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graph.editor_workflow import EditorWorkflowError, editor_to_prompt, unknown_types  # noqa: E402

PINNED = "comfyui_workflow_templates"
NEWEST = "comfyui_workflow_templates_json"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "comfy-engine" / "templates"


def installed_templates(module: str) -> Path | None:
    if module == PINNED:  # beside the environment: today's package of that name is a meta package
        folder = Path(sys.prefix) / "test-data" / PINNED / "templates"
        return folder if folder.is_dir() else None
    try:
        found = __import__(module)
    except ImportError:
        return None
    return Path(found.__file__).parent / "templates"


def _unpacked(wheel: Path) -> Path:
    target = CACHE / wheel.stem
    if not (target / NEWEST / "templates" / "index.json").is_file():
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)
    return target / NEWEST / "templates"


def _cached_wheels() -> list[Path]:
    return sorted(CACHE.glob(f"{NEWEST}-*.whl"),
                  key=lambda p: [int(x) if x.isdigit() else 0 for x in p.name.split("-")[1].split(".")])


def newest_templates(source: str | None = None, download: bool = True, update: bool = False) -> Path | None:
    """The newest package's templates folder (see the module docstring for where it is looked for);
    the wheel is fetched when none is cached yet (`download`), or again to look for a newer one
    (`update`)."""
    if source:
        path = Path(source)
        if path.suffix == ".whl":
            return _unpacked(path)
        return path / NEWEST / "templates" if (path / NEWEST).is_dir() else path
    installed = installed_templates(NEWEST)
    if installed is not None:
        return installed
    if (download and not _cached_wheels()) or update:
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(CACHE),
                        NEWEST.replace("_", "-")], check=False)
    wheels = _cached_wheels()
    return _unpacked(wheels[-1]) if wheels else None


def package_version(folder: Path) -> str:
    for parent in folder.parents:
        for info in list(parent.glob(f"{NEWEST}-*.dist-info")) + list(parent.glob(f"{PINNED}-*.dist-info")):
            if info.name.split("-")[0] == folder.parent.name:
                return info.name.removesuffix(".dist-info").split("-")[1]
    return "?"


def local_model_names(folder: Path) -> set[str]:
    """The index's local-model templates (see the module docstring)."""
    names = set()
    for category in json.loads((folder / "index.json").read_text()):
        for template in category.get("templates") or []:
            open_source = template.get("openSource")
            if open_source is True or (open_source is None and "API" not in (template.get("tags") or [])):
                names.add(template["name"])
    return names


def has_subgraphs(workflow: dict) -> bool:
    return bool((workflow.get("definitions") or {}).get("subgraphs"))


@dataclass
class Coverage:
    folder: Path
    local: list[str] = field(default_factory=list)
    covered: list[str] = field(default_factory=list)
    uncovered: dict[str, str] = field(default_factory=dict)  # name -> why
    lacking: collections.Counter = field(default_factory=collections.Counter)
    with_subgraphs: set[str] = field(default_factory=set)


def coverage(folder: Path, node_defs: dict) -> Coverage:
    result = Coverage(folder)
    for name in sorted(local_model_names(folder)):
        path = folder / f"{name}.json"
        if not path.is_file():
            continue
        workflow = json.loads(path.read_text())
        result.local.append(name)
        if has_subgraphs(workflow):
            result.with_subgraphs.add(name)
        try:
            missing = unknown_types(workflow, node_defs)
            if missing:
                result.lacking.update(missing)
                result.uncovered[name] = "missing nodes: " + ", ".join(missing)
                continue
            editor_to_prompt(workflow, node_defs)
        except EditorWorkflowError as exc:
            result.uncovered[name] = f"does not convert: {exc}"
            continue
        result.covered.append(name)
    return result


def builtin_object_info() -> dict:
    from graph.registry import Registry
    from nodes import register_builtin_nodes
    from nodes.environment import Environment

    registry = Registry()
    register_builtin_nodes(registry)
    with tempfile.TemporaryDirectory() as base:
        return registry.object_info(Environment.rooted_at(base))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--missing", action="store_true", help="list each uncovered template and why")
    parser.add_argument("--covered", action="store_true", help="list the covered templates")
    parser.add_argument("--newest", help="the newest package's wheel or unpacked folder")
    parser.add_argument("--no-download", action="store_true", help="never run pip download")
    parser.add_argument("--update", action="store_true", help="look for a newer wheel than the cached one")
    args = parser.parse_args()
    node_defs = builtin_object_info()
    packages = [("pinned", PINNED, installed_templates(PINNED)),
                ("newest", NEWEST, newest_templates(args.newest, download=not args.no_download,
                                                   update=args.update))]
    for label, module, folder in packages:
        if folder is None or not (folder / "index.json").is_file():
            print(f"{label} {module}: not found")
            continue
        result = coverage(folder, node_defs)
        covered_sub = len(result.with_subgraphs & set(result.covered))
        print(f"{label} {module} {package_version(folder)}: {len(result.local)} local-model templates "
              f"({len(result.with_subgraphs)} with subgraphs); covered {len(result.covered)} "
              f"({covered_sub} of them with subgraphs)")
        print("  most-needed missing nodes: " + ", ".join(f"{t} ({n})" for t, n in result.lacking.most_common(15)))
        if args.covered:
            for name in result.covered:
                print(f"  covered: {name}{' (subgraphs)' if name in result.with_subgraphs else ''}")
        if args.missing:
            for name, why in sorted(result.uncovered.items()):
                print(f"  {name}: {why}")


if __name__ == "__main__":
    main()

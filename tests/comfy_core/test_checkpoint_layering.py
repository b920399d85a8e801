"""`comfy_core/checkpoint/` is the file format only: it imports nothing of ours above it
(families, models, encoders, patchers, loading), not even inside functions. Composition lives in
`comfy_core.loading`, which imports all of them at module level."""
from __future__ import annotations

import ast
from pathlib import Path

import comfy_core

ROOT = Path(comfy_core.__file__).parent


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_checkpoint_package_imports_only_itself_from_comfy_core():
    offending = {}
    for path in sorted((ROOT / "checkpoint").glob("*.py")):
        upward = {m for m in _imported_modules(path)
                  if m.startswith("comfy_core") and not m.startswith("comfy_core.checkpoint")}
        if upward:
            offending[path.name] = sorted(upward)
    assert offending == {}


def test_loading_imports_what_it_composes_at_module_level():
    tree = ast.parse((ROOT / "loading.py").read_text(encoding="utf-8"))
    top = {node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
    assert {"comfy_core.families", "comfy_core.models.diffusion", "comfy_core.models.vae", "comfy_core.patching.model",
            "comfy_core.text_encoders", "comfy_core.checkpoint.materialize"} <= top
    local = [node for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
             for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert local == []

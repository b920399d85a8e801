"""`graph` and all its submodules import without torch (DESIGN.md: graph/ never imports torch)."""
from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import graph

ROOT = Path(__file__).resolve().parents[2]


def test_graph_never_imports_torch():
    modules = sorted(m.name for m in pkgutil.iter_modules(graph.__path__, "graph."))
    assert "graph.executor" in modules and len(modules) > 10
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = [m for m in ('torch', 'numpy', 'PIL') if m in sys.modules]\n"
        "print(','.join(bad))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""

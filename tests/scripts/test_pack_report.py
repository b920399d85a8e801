"""scripts/pack_report.py: one real server per pack, the pack's node types and its import error."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKS = REPO / "tests" / "compat" / "packs"


def _script():
    spec = importlib.util.spec_from_file_location("pack_report", REPO / "scripts" / "pack_report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("pack_report", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_loading_pack_lists_its_nodes_and_a_failing_one_its_error():
    report = _script()
    command = [sys.executable, str(REPO / "main.py")]
    loaded = report.run_server(command, REPO, PACKS / "compat-v1-pack", timeout=120)
    assert loaded.started and loaded.error is None
    assert {"CompatNumber", "CompatAdd"} <= set(loaded.nodes)
    assert "KSampler" not in loaded.nodes  # only the pack's own node types
    broken = report.run_server(command, REPO, PACKS / "broken_pack", timeout=120)
    assert broken.started and broken.nodes == []
    assert "comfy.this_module_does_not_exist" in broken.error

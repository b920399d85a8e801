"""Which of ComfyUI's official workflow templates this engine has every node for.

For each template of the pinned `comfyui-workflow-templates` package (and of the newest
`comfyui-workflow-templates-json` package's, when installed), converts the editor workflow as
the editor does when it queues (`graph.editor_workflow`) and lists the node types we lack.
API-node templates (ComfyUI's paid cloud nodes) are counted apart. That a template's nodes all
exist does not mean its model family runs here: `tests/web/test_template_workflows.py` runs the
SD1.x/SD2.x/SDXL ones end to end on tiny files.

    .venv/bin/python bench/template_coverage.py [--missing]
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graph.editor_workflow import VIRTUAL_TYPES, EditorWorkflowError, editor_to_prompt  # noqa: E402
from graph.registry import Registry  # noqa: E402
from nodes import register_builtin_nodes  # noqa: E402
from nodes.environment import Environment  # noqa: E402
from tests.fixtures.object_info_parity import comfyui_object_info  # noqa: E402


def template_files(package: str) -> list[Path]:
    try:
        module = __import__(package)
    except ImportError:
        return []
    folder = Path(module.__file__).parent / "templates"
    return sorted(p for p in folder.glob("*.json") if not p.name.startswith("index"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--missing", action="store_true", help="list the missing node types per template")
    args = parser.parse_args()
    registry = Registry()
    register_builtin_nodes(registry)
    with tempfile.TemporaryDirectory() as base:
        ours = registry.object_info(Environment.rooted_at(base))
    comfy = comfyui_object_info()
    for package in ("comfyui_workflow_templates", "comfyui_workflow_templates_json"):
        files = template_files(package)
        if not files:
            continue
        covered, api, lacking = 0, 0, collections.Counter()
        per_template = {}
        for path in files:
            workflow = json.loads(path.read_text())
            if not isinstance(workflow, dict) or "nodes" not in workflow:
                continue
            subgraphs = (workflow.get("definitions") or {}).get("subgraphs") or []
            nodes = workflow["nodes"] + [n for graph in subgraphs for n in graph.get("nodes", [])]
            types = {n.get("type") for n in nodes} - VIRTUAL_TYPES - {g.get("id") for g in subgraphs}
            if any(t not in comfy and t not in ours for t in types):  # ComfyUI's API nodes
                api += 1
                continue
            missing = sorted(t for t in types if t not in ours)
            lacking.update(missing)
            if missing:
                per_template[path.stem] = missing
                continue
            try:
                editor_to_prompt(workflow, ours)
                covered += 1
            except EditorWorkflowError as exc:  # subgraphs: every node there, not runnable headless yet
                per_template[path.stem] = [str(exc)]
        total = covered + len(per_template)
        print(f"{package}: {total} templates outside API nodes ({api} API-node templates apart); "
              f"every node present: {covered}")
        print("  most-needed missing nodes: " + ", ".join(f"{t} ({n})" for t, n in lacking.most_common(15)))
        if args.missing:
            for name, missing in sorted(per_template.items()):
                print(f"  {name}: {', '.join(missing)}")


if __name__ == "__main__":
    main()

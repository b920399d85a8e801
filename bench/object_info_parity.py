"""How much of ComfyUI 0.3.64's node set this engine has, and how exactly.

Prints: ComfyUI's node count (outside API nodes, from `tests/data/comfyui_0.3.64_object_info.json`),
ours, the nodes both have and how many of those differ in any field a workflow or the editor
reads (`tests/fixtures/object_info_parity.py`), then ComfyUI's nodes we lack, by module, and
with `--diffs` every difference.

    .venv/bin/python bench/object_info_parity.py [--diffs] [--missing]
"""
from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graph.registry import Registry  # noqa: E402
from nodes import register_builtin_nodes  # noqa: E402
from nodes.environment import Environment  # noqa: E402
from tests.fixtures.object_info_parity import comfyui_object_info, differences  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--diffs", action="store_true", help="print every difference")
    parser.add_argument("--missing", action="store_true", help="list every missing node by name")
    args = parser.parse_args()
    registry = Registry()
    register_builtin_nodes(registry)
    with tempfile.TemporaryDirectory() as base:
        ours = registry.object_info(Environment.rooted_at(base))
    theirs = comfyui_object_info()
    common = set(ours) & set(theirs)
    diffs = differences(ours, theirs)
    print(f"ComfyUI 0.3.64 nodes (no API nodes): {len(theirs)}")
    print(f"ours: {len(ours)} ({len(set(ours) - set(theirs))} of them ours only)")
    print(f"both: {len(common)}; identical: {len(common) - len(diffs)}; differing: {len(diffs)} "
          f"({sum(len(v) for v in diffs.values())} fields)")
    missing = collections.defaultdict(list)
    for name in sorted(set(theirs) - set(ours)):
        missing[theirs[name].get("python_module", "?")].append(name)
    print(f"missing: {sum(len(v) for v in missing.values())}")
    for module, names in sorted(missing.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"  {len(names):3d}  {module}" + (f": {', '.join(names)}" if args.missing else ""))
    if args.diffs:
        for name, lines in diffs.items():
            for line in lines:
                print(f"  {line}")


if __name__ == "__main__":
    main()

"""Cost of pack isolation (graph/pack_isolation.py): loading packs and rendering /object_info with
each pack's import and each node's INPUT_TYPES() in a bounded helper thread, against ComfyUI's way
(everything in the caller's thread, `PackLimits.unbounded()`).

    .venv/bin/python bench/pack_isolation.py [--packs 20] [--nodes 25] [--repeat 5]

Prints, for both, the time to load `packs` generated packs of `nodes` V1 nodes each, and the best
of `repeat` `Registry.object_info()` renders (one INPUT_TYPES() call per node).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NODE = '''
class Node{i}:
    @classmethod
    def INPUT_TYPES(cls):
        return {{"required": {{"x": ("INT", {{"default": {i}}}), "name": (["a", "b", "c"],)}}}}
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    def run(self, x, name):
        return (x,)
'''


def write_packs(root: Path, packs: int, nodes: int) -> None:
    for p in range(packs):
        body = "".join(NODE.format(i=p * nodes + i) for i in range(nodes))
        mapping = ", ".join(f'"Bench{p}_{i}": Node{p * nodes + i}' for i in range(nodes))
        (root / f"bench_pack_{p}.py").write_text(body + f"NODE_CLASS_MAPPINGS = {{{mapping}}}\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--packs", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=25)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from graph.pack_isolation import PackLimits
    from graph.packs import load_custom_nodes
    from graph.registry import Registry

    print(f"{args.packs} packs x {args.nodes} V1 nodes")
    runs = (("unbounded (ComfyUI's way)", PackLimits.unbounded()), ("bounded (default limits)", PackLimits()))
    for label, limits in runs:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / f"custom_nodes_{label.split()[0]}"
            root.mkdir()
            write_packs(root, args.packs, args.nodes)
            registry = Registry()
            started = time.perf_counter()
            results = load_custom_nodes(registry, [root], limits=limits)
            load_s = time.perf_counter() - started
            assert all(r.ok for r in results)
            renders = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                info = registry.object_info()
                renders.append(time.perf_counter() - started)
            assert len(info) == args.packs * args.nodes
        per_node_us = min(renders) / len(info) * 1e6
        print(f"  {label:26s} load {load_s * 1000:8.1f} ms   /object_info {min(renders) * 1000:7.1f} ms "
              f"({per_node_us:6.1f} us per node)")


if __name__ == "__main__":
    main()

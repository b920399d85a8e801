"""Cost of the ComfyUI compatibility layer: loading packs, and per-call overhead of V1 and V3 nodes.

    .venv/bin/python bench/compat.py [--calls 300]

Prints (1) after the built-in nodes (torch, comfy_core) are imported, as in the server, the time to load the example pack and the test fixture packs through
`CompatSession.load_packs` (prestartup scripts, import hook, V3 entry points), and (2) the
executor's time per node call for a chain of trivial pack nodes: V1 (`CompatAdd`) and V3
(`V3Scale`, which also builds a per-call class clone for its hidden values).
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()

    import compat
    from graph.executor import Executor
    from graph.registry import Registry
    from nodes.environment import Environment

    from nodes import register_builtin_nodes

    env = Environment.rooted_at(tempfile.mkdtemp())
    env.ensure_dirs()
    started = time.perf_counter()
    registry = Registry()
    register_builtin_nodes(registry)  # as the server does first (imports torch and comfy_core)
    print(f"built-in nodes: {(time.perf_counter() - started) * 1000:.0f} ms")
    session = compat.install(env, registry)
    started = time.perf_counter()
    packs = session.load_packs([ROOT / "tests" / "compat" / "packs", ROOT / "custom_nodes"])
    load_s = time.perf_counter() - started
    print(f"load {len(packs)} packs ({sum(p.ok for p in packs)} ok): {load_s * 1000:.1f} ms")
    for pack in packs:
        print(f"  {pack.name:16s} {pack.seconds * 1000:7.1f} ms {'ok' if pack.ok else 'IMPORT FAILED'}")

    def chain(kind: str, n: int) -> dict:
        prompt: dict = {"0": {"class_type": "CompatNumber", "inputs": {"value": 1}}}
        for i in range(1, n + 1):
            if kind == "v1":
                prompt[str(i)] = {"class_type": "CompatAdd", "inputs": {"a": [str(i - 1), 0], "b": 0}}
            else:
                prompt[str(i)] = {"class_type": "V3Scale", "inputs": {"value": [str(i - 1), 0], "factor": 1.0,
                                                                     "mode": "mul"}}
        prompt["out"] = {"class_type": "V3Show", "inputs": {"value": [str(n), 0]}}
        return prompt

    for kind in ("v1", "v3"):  # warm-up: first calls import and cache lazily built pieces
        asyncio.run(Executor(session.registry, env=env, before_node_call=[session.before_node_call]).execute(
            chain(kind, 5), f"warm-{kind}", outputs=["out"]))
    for kind in ("v1", "v3"):
        executor = Executor(session.registry, env=env, before_node_call=[session.before_node_call])
        prompt = chain(kind, args.calls)
        started = time.perf_counter()
        outcome = asyncio.run(executor.execute(prompt, kind, outputs=["out"]))
        elapsed = time.perf_counter() - started
        assert outcome.status == "success", outcome
        print(f"{kind}: {args.calls} chained node calls in {elapsed * 1000:.0f} ms "
              f"({elapsed / (args.calls + 2) * 1e6:.0f} us per node, executor included)")


if __name__ == "__main__":
    main()

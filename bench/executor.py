"""Benchmark of the graph engine: validation and execution cost against graph size.

Prints, for N = 100, 1 000, 10 000 trivial nodes arranged as a chain and as a wide fan-in (N-1
constants feeding one output node through declared inputs): validation time, cold execution,
fully cached re-execution, and re-execution after changing one constant at the root. The `k`
row gives the measured scaling exponent in time ~ N^k, a least-squares fit over all sizes
(1.0 = linear in nodes + edges).

    .venv/bin/python bench/executor.py [--sizes 100 1000 10000] [--repeat 3] [--progress-state all|active]
                                       [--nodes v1|native] [--clock cpu|wall] [--read-maps]

Times are process CPU time by default (`--clock cpu`: all threads of this process, stable on a
shared machine); `--clock wall` gives elapsed time.

`--progress-state all` (the default) sends ComfyUI's progress_state messages, which list every
node that has started so far: that traffic is quadratic in N for a consumer that reads every
map. The engine builds a map only when its event's data is read (graph/versions.py), and the
sink here reads none (as a prompt without a client, or the server's coalescer for all but a few
maps), so the figures are the engine's own cost; `--read-maps` makes the sink read every event's
data, the cost of a consumer that looks at every map. `active` lists only running nodes (see
graph/progress.py).

`--nodes v1` (default) declares the trivial nodes as V1 classes, as custom-node packs do;
`--nodes native` declares the same nodes with `graph.native.node`, so the two rows compare the
V1 adapter's cost per node with the native path's.

Each figure is the best of `--repeat` runs; the machine is shared, so compare figures printed
by one run (or medians of several runs), never single figures across runs.
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graph.executor import Executor  # noqa: E402
from graph.native import Input, Int, Output, node  # noqa: E402
from graph.registry import Registry  # noqa: E402
from graph.validation import validate_prompt  # noqa: E402


class Const:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 0, "min": -10**9, "max": 10**9})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, value):
        return (value,)


class Inc:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",), "step": ("INT", {"default": 1})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    def run(self, value, step):
        return (value + step,)


class Show:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT",)}}

    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    def run(self, value):
        return {"ui": {"value": [value]}}


def make_sum(width: int) -> type:
    class Sum:
        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {}, "optional": {f"in{i}": ("INT",) for i in range(width)}}

        RETURN_TYPES = ()
        FUNCTION = "run"
        OUTPUT_NODE = True

        def run(self, **values):
            return {"ui": {"value": [sum(values.values())]}}

    return Sum


def native_nodes(widths: list[int]) -> list:
    """The same trivial nodes, declared natively (no V1 class, instance or INPUT_TYPES call)."""
    @node("Const", inputs=[Int("value", default=0, min=-10**9, max=10**9)], outputs=[Output("INT")])
    def const(value):
        return (value,)

    @node("Inc", inputs=[Input("value", "INT"), Int("step", default=1)], outputs=[Output("INT")])
    def inc(value, step):
        return (value + step,)

    @node("Show", inputs=[Input("value", "INT")], output_node=True)
    def show(value):
        return {"ui": {"value": [value]}}

    def make_native_sum(width: int):
        @node(f"Sum{width}", inputs=[Input(f"in{i}", "INT", optional=True) for i in range(width)],
              output_node=True)
        def total(**values):
            return {"ui": {"value": [sum(values.values())]}}
        return total

    return [const, inc, show] + [make_native_sum(w) for w in widths]


def chain(n: int) -> dict:
    prompt = {"0": {"class_type": "Const", "inputs": {"value": 0}}}
    for i in range(1, n - 1):
        prompt[str(i)] = {"class_type": "Inc", "inputs": {"value": [str(i - 1), 0], "step": 1}}
    prompt[str(n - 1)] = {"class_type": "Show", "inputs": {"value": [str(n - 2), 0]}}
    return prompt


def fan_in(n: int) -> dict:
    prompt = {str(i): {"class_type": "Const", "inputs": {"value": i}} for i in range(n - 1)}
    prompt["sum"] = {"class_type": f"Sum{n - 1}", "inputs": {f"in{i}": [str(i), 0] for i in range(n - 1)}}
    return prompt


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys on xs: the exponent k in t ~ N^k."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


async def measure(registry: Registry, prompt: dict, root: str, repeat: int, scope: str,
                  clock, read_maps: bool = False) -> dict[str, float]:
    """Best-of-`repeat` seconds for each phase."""
    best: dict[str, float] = {}

    def keep(name: str, seconds: float) -> None:
        best[name] = min(best.get(name, math.inf), seconds)

    events = [0]

    def sink(event) -> None:  # a cheap consumer, as a server queue would be
        events[0] += 1
        if read_maps:
            event.data  # noqa: B018 -- builds a lazy progress_state map, as a reader would

    for _ in range(repeat):
        work = copy.deepcopy(prompt)
        t = clock()
        result = await validate_prompt(work, registry)
        keep("validate", clock() - t)
        assert result.ok, result.node_errors
        executor = Executor(registry, progress_state=scope)
        t = clock()
        out = await executor.execute(work, "cold", outputs=result.outputs, sink=sink)
        keep("cold", clock() - t)
        assert out.status == "success", out.error
        t = clock()
        out = await executor.execute(work, "cached", outputs=result.outputs, sink=sink)
        keep("cached", clock() - t)
        assert out.executed == []
        work[root]["inputs"]["value"] += 1
        t = clock()
        out = await executor.execute(work, "changed", outputs=result.outputs, sink=sink)
        keep("changed", clock() - t)
        assert out.executed
    return best


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--progress-state", choices=("all", "active"), default="all")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--nodes", choices=("v1", "native"), default="v1")
    parser.add_argument("--read-maps", action="store_true", help="the sink reads every event's data")
    args = parser.parse_args()
    registry = Registry()
    if args.nodes == "native":
        for fn in native_nodes([n - 1 for n in args.sizes]):
            registry.add_native(fn)
    else:
        for name, cls in (("Const", Const), ("Inc", Inc), ("Show", Show)):
            registry.add_v1(name, cls)
        for n in args.sizes:
            registry.add_v1(f"Sum{n - 1}", make_sum(n - 1))

    phases = ("validate", "cold", "cached", "changed")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    print(f"progress_state={args.progress_state} clock={args.clock} nodes={args.nodes} read_maps={args.read_maps}")
    print(f"{'shape':8} {'N':>6} " + " ".join(f"{p + ' ms':>12}" for p in phases))
    for shape, build, root in (("chain", chain, "0"), ("fan-in", fan_in, "0")):
        rows = []
        for n in args.sizes:
            repeat = args.repeat if n <= 1000 else 1
            figures = await measure(registry, build(n), root, repeat, args.progress_state, clock, args.read_maps)
            rows.append((n, figures))
            print(f"{shape:8} {n:>6} " + " ".join(f"{figures[p] * 1000:12.1f}" for p in phases), flush=True)
        if len(rows) >= 2:
            exps = [slope([math.log(n) for n, _ in rows], [math.log(max(f[p], 1e-9)) for _, f in rows])
                    for p in phases]
            print(f"{shape:8} {'k':>6} " + " ".join(f"{k:12.2f}" for k in exps)
                  + f"   (least-squares fit of log t on log N over N = {[n for n, _ in rows]})")


if __name__ == "__main__":
    asyncio.run(main())

"""StartLoop and EndLoop of ComfyUI's comfy_extras/nodes_loop.py (2026), with its dev-only
LoopIteration, declared as ComfyUI's V3 schema renders them (graph/v3_schema.py). The loop's
behaviour is ComfyUI's (read from that file); the mechanism is ours, built on node expansion
(graph/expansion.py) and lazy inputs only, with no change to the executor.

A loop is a Start Loop node, an End Loop node, and the *body*: the nodes that descend from Start
Loop and lead to End Loop (`output_value`, `next_iteration_value`, `terminations.*`). The body
runs once per iteration; each iteration sees `iteration_index`, `is_first`, `is_last`, the
current `list_item` (List mode) and `current_iteration_value` (the initial value, then what
`next_iteration_value` gave in the previous iteration). End Loop outputs the last iteration's
`output_value`, or every iteration's when `accumulate` is on, as a list output.

How it runs here:

1. End Loop's loop inputs are lazy and never asked for, so End Loop runs as soon as the prompt
   reaches it. It finds its Start Loop (the nearest unpaired one among its ancestors; inner loops
   pair first) and expands into one node, a *driver*: a copy of Start Loop with Start Loop's
   inputs, marked with `_loop_start` / `_loop_end` (ComfyUI marks prompt nodes with `_loop_end`
   too). As an `is_input_list` node the driver receives those inputs resolved: the list to walk,
   the iteration count from links or widgets.
2. The driver unrolls the loop by expansion: per iteration a `LoopIteration` node (ComfyUI's
   dev-only node: the iteration's values; it depends on the previous iteration's outputs, carried
   value and terminations, so iterations run in order) and a copy of every body node, links to
   Start Loop rewritten to that iteration's `LoopIteration`, links between body nodes to the same
   iteration's copies. A `LoopResult` node (ComfyUI's dev-only node, its schema) gathers the
   outputs; its one result value (the list) becomes End Loop's list output.
   A `LoopProgress` node (ComfyUI's too) after each iteration shows "Iteration i / n" on the
   Start Loop node, as ComfyUI's progress text.
3. The body nodes of the prompt itself never run: Start Loop, when the prompt itself reaches it
   (an output node inside the body, such as a preview wired to `terminations`), outputs silent
   `ExecutionBlocker`s, so those nodes do nothing; their per-iteration copies do the work.

Caching: without `cache_iterations` (the default) every iteration runs again on every prompt, as
in ComfyUI (Start Loop and each `LoopIteration` have a NaN fingerprint). With it, ComfyUI reuses
unchanged iterations one by one; here a loop in which nothing changed is reused whole (End Loop
hits the cache), and one in which something changed runs all its iterations again (the expanded
nodes' entries belong to End Loop's signature, graph/cache.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from graph.context import current
from graph.expansion import ExecutionBlocker, GraphBuilder
from graph.prompt import is_link
from graph.v3_schema import (Autogrow, Boolean, ComboOption, DynamicCombo, Int, MatchType, MatchTypeOutput, Output,
                             Socket, String, v3_node)
from nodes.errors import NodeInputError
from nodes.image_batch import PROGRESS_TEXT_EVENT, progress_text_payload

MODULE = "comfy_extras.nodes_loop"
START, END, ITERATION, PROGRESS, COLLECT = "StartLoop", "EndLoop", "LoopIteration", "LoopProgress", "LoopResult"
LOOP_INPUTS = ("output_value", "next_iteration_value")  # and terminations.*
MAX_ITERATIONS = 0xFFFFFFFFFFFFFFFF


class LoopStructureError(ValueError):
    """A loop whose Start and End cannot be paired, or whose body reaches outside it wrongly."""


# -- the loop's shape in the prompt ------------------------------------------------------------------

def _loop_input(name: str) -> bool:
    return name in LOOP_INPUTS or name.startswith("terminations.")


def _links(node: dict) -> Iterable[tuple[str, str, int]]:
    for name, value in (node.get("inputs") or {}).items():
        if is_link(value):
            yield name, str(value[0]), int(value[1])


class PromptView:
    """The nodes of a running prompt (its own and those expansion added), as one graph."""

    def __init__(self, nodes: dict[str, dict]) -> None:
        self.nodes = nodes
        self._consumers: dict[str, set[str]] | None = None
        self._ancestors: dict[str, frozenset[str]] = {}

    @classmethod
    def of(cls, dynprompt: Any) -> "PromptView":
        nodes = dict(getattr(dynprompt, "original_prompt", {}) or {})
        nodes.update(getattr(dynprompt, "ephemeral_prompt", {}) or {})
        return cls(nodes)

    def class_of(self, node_id: str) -> str | None:
        node = self.nodes.get(node_id)
        return node.get("class_type") if node else None

    def ancestors(self, node_id: str, *, loop_inputs_of: str | None = None) -> frozenset[str]:
        """Every node `node_id` reads through links (for `loop_inputs_of`, only through its loop
        inputs; for other nodes, through all)."""
        if loop_inputs_of is None and node_id in self._ancestors:
            return self._ancestors[node_id]
        seen: set[str] = set()
        first = [src for name, src, _ in _links(self.nodes.get(node_id, {}))
                 if loop_inputs_of is None or _loop_input(name)]
        stack = [s for s in first if s in self.nodes]
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            stack.extend(src for _, src, _ in _links(self.nodes[current]) if src in self.nodes and src not in seen)
        result = frozenset(seen)
        if loop_inputs_of is None:
            self._ancestors[node_id] = result
        return result

    def descendants(self, node_id: str) -> set[str]:
        if self._consumers is None:
            self._consumers = {}
            for consumer, node in self.nodes.items():
                for _, src, _ in _links(node):
                    self._consumers.setdefault(src, set()).add(consumer)
        seen: set[str] = set()
        stack = list(self._consumers.get(node_id, ()))
        while stack:
            current = stack.pop()
            if current not in seen:
                seen.add(current)
                stack.extend(self._consumers.get(current, ()))
        return seen

    def partner(self, end_id: str, _memo: dict[str, str] | None = None) -> str:
        """The Start Loop that End Loop `end_id` closes: among the Start Loops it reads (through
        its loop inputs), those not closed by an End Loop it also reads, the one nearest to it."""
        memo = {} if _memo is None else _memo
        if end_id in memo:
            return memo[end_id]
        upstream = self.ancestors(end_id, loop_inputs_of=end_id)
        closed = {self.partner(inner, memo) for inner in upstream if self.class_of(inner) == END}
        candidates = [s for s in upstream if self.class_of(s) == START and s not in closed]
        nearest = [s for s in candidates if not any(s in self.ancestors(other) for other in candidates if other != s)]
        if len(nearest) != 1:
            found = "no Start Loop" if not nearest else f"Start Loops {sorted(nearest)}"
            raise LoopStructureError(f"End Loop {end_id}: its loop inputs must lead back to exactly one Start "
                                     f"Loop it closes; found {found}")
        memo[end_id] = nearest[0]
        return nearest[0]

    def body(self, start_id: str, end_id: str) -> list[str]:
        """The nodes between them, in the prompt's order: descendants of Start Loop that End
        Loop's loop inputs read."""
        between = self.descendants(start_id) & self.ancestors(end_id, loop_inputs_of=end_id)
        between.discard(end_id)
        return [node_id for node_id in self.nodes if node_id in between]


# -- unrolling -------------------------------------------------------------------------------------

def _iteration_values(mode: dict[str, Any]) -> tuple[list[int], list[Any] | None]:
    """The iteration indexes (and, List mode, the items) of a Start Loop's `mode` (input lists)."""
    def first(name: str, default: Any) -> Any:
        value = mode.get(name)
        return value[0] if isinstance(value, list) and value else default

    kind = first("mode", "simple")
    if kind == "simple":
        count = first("num_iterations", 4)
        if count < 0:
            raise NodeInputError("mode.num_iterations", "an int >= 0", repr(count))
        return list(range(count)), None
    if kind == "For":
        step = first("step", 1)
        if step == 0:
            raise NodeInputError("mode.step", "a step other than 0", "0")
        return list(range(first("start_iteration_index", 0), first("max_iteration", 4), step)), None
    items = list(mode.get("list") or [])
    return list(range(len(items))), items


def unroll(view: PromptView, start_id: str, end_id: str, values: list[int], items: list[Any] | None,
           initial: Any, reuse_cache: bool, accumulate: bool, builder: GraphBuilder) -> tuple[dict, list]:
    """The loop's iterations as an expansion subgraph, and its result (a link to the collector)."""
    body = view.body(start_id, end_id)
    end_inputs = view.nodes[end_id].get("inputs") or {}
    output_source = end_inputs.get("output_value")
    next_source = end_inputs.get("next_iteration_value")
    terminations = [v for k, v in sorted(end_inputs.items()) if k.startswith("terminations.") and is_link(v)]
    # Position flags a body never reads stay False, so a change of the loop's length keeps the
    # iterations' cache keys (ComfyUI's rule).
    read_slots = {slot for node_id in (*body, end_id) for _, src, slot in _links(view.nodes[node_id])
                  if src == start_id}
    carry = initial
    dependencies: list[Any] = []
    collected: dict[str, Any] = {}
    progress: Any = None
    for position, value in enumerate(values):
        iteration = builder.node(ITERATION, f"iteration_{position}", iteration_index=value,
                                 is_first=1 in read_slots and position == 0,
                                 is_last=2 in read_slots and position == len(values) - 1,
                                 list_item=items[position] if items is not None else None,
                                 current_iteration_value=carry, reuse_cache=reuse_cache,
                                 **{f"dependency{i}": d for i, d in enumerate(dependencies)})
        iteration.set_override_display_id(start_id)
        copies = {node_id: builder.node(view.nodes[node_id]["class_type"], f"{position}_{node_id}")
                  for node_id in body}

        def relinked(source: Any) -> Any:
            if not is_link(source):
                return source
            if str(source[0]) == start_id:
                return iteration.out(int(source[1]))
            if str(source[0]) in copies:
                return copies[str(source[0])].out(int(source[1]))
            return source

        for node_id, copy in copies.items():
            copy.set_override_display_id(node_id)
            for name, input_value in (view.nodes[node_id].get("inputs") or {}).items():
                copy.set_input(name, relinked(input_value))
        dependencies = []
        if is_link(output_source):
            out = relinked(output_source)
            if accumulate:
                collected[f"output{position}"] = out
            elif position == len(values) - 1:
                collected["output0"] = out
            dependencies.append(out)
        if is_link(next_source):
            carry = relinked(next_source)
            dependencies.append(carry)
        dependencies += [relinked(t) for t in terminations]
        progress = builder.node(PROGRESS, f"progress_{position}", start_id=start_id, position=position + 1,
                                total=len(values), previous_progress=progress,
                                **{f"dependency{i}": d for i, d in enumerate(dependencies)}).out(0)
    collector = builder.node(COLLECT, "result", close_id=end_id, progress=progress, **collected,
                             **{f"dependency{i}": d for i, d in enumerate(dependencies)})
    collector.set_override_display_id(end_id)
    return builder.finalize(), [collector.out(0)]


# -- the nodes -------------------------------------------------------------------------------------

def _progress_text(node_id: str, text: str) -> None:
    """ComfyUI's progress text on a node ("Iteration 2 / 5" under Start Loop in the editor)."""
    ctx = current()
    if ctx is not None:
        ctx.send(PROGRESS_TEXT_EVENT, progress_text_payload(node_id, text))


def _start_fingerprint(cache_iterations: Any = False, **_: Any) -> float | None:
    """NaN (run every time) unless `cache_iterations`: then an unchanged loop is reused whole.
    ComfyUI's Start Loop is always NaN and reuses iterations one by one from its cache; here the
    expanded nodes' cache entries belong to End Loop's signature (graph/cache.py), which a NaN
    Start Loop upstream would change on every run, so the loop is reused as a whole when nothing
    in it changed, and runs again whole when something did."""
    return None if _first(cache_iterations, False) else float("nan")


def _first(value: Any, default: Any = None) -> Any:
    return value[0] if isinstance(value, list) and value else (default if isinstance(value, list) else value)


MODE = DynamicCombo("mode", tooltip="The loop iteration mode.", options=(
    ComboOption("simple", (
        Int("num_iterations", default=4, min=0, tooltip="Number of times to execute the loop body."),)),
    ComboOption("For", (
        Int("start_iteration_index", default=0, tooltip="Index of the first iteration when using For loop mode."),
        Int("max_iteration", default=4, max=MAX_ITERATIONS,
            tooltip="The exclusive stopping value for iteration_index in For mode."),
        Int("step", default=1, min=1,
            tooltip="The index step size between each iteration when using For loop mode."))),
    ComboOption("List", (
        MatchType("list", "list_item",
                  tooltip="List of items the loop iterates on. The loop body executes once per item."),)),
))


@v3_node(START, display_name="Start Loop", category="utilities/looping", python_module=MODULE, input_is_list=True,
         inputs=[MODE,
                 Boolean("cache_iterations", default=False, advanced=True,
                         tooltip="Reuse unchanged iteration results from previous executions. Disable to execute "
                                 "every iteration again."),
                 Int("parent_iteration", optional=True, forceInput=True,
                     tooltip="Connect iteration_index from an outer Start Loop to nest this loop."),
                 MatchType("initial_iteration_value", "carried_value", optional=True,
                           tooltip="Value exposed as current_iteration_value on the first iteration.")],
         outputs=[Output("INT", "iteration_index", tooltip="Index of the current loop iteration."),
                  Output("BOOLEAN", "is_first", tooltip="True during the first iteration of the loop."),
                  Output("BOOLEAN", "is_last", tooltip="True during the last iteration of the loop."),
                  MatchTypeOutput("list_item", "list_item",
                                  tooltip="Current item from the list when using List mode. None in Simple and For "
                                          "modes."),
                  MatchTypeOutput("carried_value", "current_iteration_value",
                                  tooltip="Loop-carried value for the current iteration: initial_iteration_value on "
                                          "the first iteration, then next_iteration_value from End Loop on each "
                                          "subsequent iteration.")],
         hidden=[("dynprompt", "DYNPROMPT"), ("execution_list", "EXECUTION_LIST"), ("unique_id", "UNIQUE_ID")],
         is_changed=_start_fingerprint)
def start_loop(mode: dict[str, Any], cache_iterations: Any = False, parent_iteration: Any = None,
               initial_iteration_value: Any = None, dynprompt: Any = None, execution_list: Any = None,
               unique_id: Any = None) -> Any:
    """The prompt's own Start Loop blocks its body (the iterations' copies do the work); the
    driver End Loop made unrolls the loop."""
    unique_id = _first(unique_id)
    dynprompt = _first(dynprompt)
    node = dynprompt.get_node(unique_id) if dynprompt is not None and unique_id is not None else {}
    if "_loop_end" not in node:
        return (ExecutionBlocker(None),) * 5
    view = PromptView.of(dynprompt)
    start_id, end_id = node["_loop_start"], node["_loop_end"]
    values, items = _iteration_values(mode)
    _progress_text(start_id, f"Iteration 0 / {len(values)}")
    initial = (view.nodes[start_id].get("inputs") or {}).get("initial_iteration_value")
    graph, result = unroll(view, start_id, end_id, values, items, initial, bool(_first(cache_iterations, False)),
                           bool(node.get("_loop_accumulate", False)), GraphBuilder())
    return {"result": tuple(result), "expand": graph}


def _lazy_inputs_none(**_: Any) -> list[str]:
    # The loop inputs are read by the iterations' copies, never by End Loop itself.
    return []


@v3_node(END, display_name="End Loop", category="utilities/looping", python_module=MODULE, input_is_list=True,
         inputs=[MatchType("output_value", "output_value", optional=True, lazy=True,
                           tooltip="Value returned by End Loop. It returns the final iteration or all iterations "
                                   "according to accumulate."),
                 MatchType("next_iteration_value", "carried_value", optional=True, lazy=True,
                           tooltip="Value sent from End Loop back to Start Loop for the next iteration."),
                 Boolean("accumulate", default=False,
                         tooltip="Return output_value from every iteration when enabled; otherwise return only the "
                                 "final iteration."),
                 Autogrow("terminations", Socket("termination", "*", lazy=True,
                                                 tooltip="Connect a preview or side-effect output that must execute "
                                                         "on every iteration. Its value is not returned."),
                          prefix="termination", min=0, max=50, optional=True,
                          tooltip="Connect outputs that must execute on every iteration. Their values are not "
                                  "returned.")],
         outputs=[MatchTypeOutput("output_value", "outputs", is_list=True,
                                  tooltip="The final iteration's output_value, or values accumulated across "
                                          "iterations when accumulate is enabled.")],
         hidden=[("execution_list", "EXECUTION_LIST"), ("unique_id", "UNIQUE_ID"), ("_dynprompt", "DYNPROMPT")],
         check_lazy_status=_lazy_inputs_none)
def end_loop(accumulate: Any = False, unique_id: Any = None, _dynprompt: Any = None, **_: Any) -> dict:
    """Expand into the driver: a copy of this loop's Start Loop that unrolls it."""
    unique_id, dynprompt = _first(unique_id), _first(_dynprompt)
    view = PromptView.of(dynprompt)
    start_id = view.partner(unique_id)
    builder = GraphBuilder()
    start = view.nodes[start_id]
    driver = builder.node(START, "driver", **dict(start.get("inputs") or {}))
    driver.set_override_display_id(start_id)
    graph = builder.finalize()
    graph[driver.id].update({"_loop_start": start_id, "_loop_end": unique_id,
                             "_loop_accumulate": bool(_first(accumulate, False))})
    return {"result": (driver.out(0),), "expand": graph}


def _strip_lazy(entry: Any) -> Any:
    """ComfyUI's End Loop declares no lazy inputs: the laziness is how this engine runs it."""
    if isinstance(entry, dict):
        return {k: _strip_lazy(v) for k, v in entry.items() if k != "lazy"}
    if isinstance(entry, list):
        return [_strip_lazy(v) for v in entry]
    return entry


def _render_without_lazy(spec: Any) -> Any:
    render = spec.render_info

    def rendered(env: Any) -> dict:
        info = render(env)
        return {**info, "input": _strip_lazy(info["input"])}

    return dataclasses.replace(spec, render_info=rendered)


def _hide_dynprompt(spec: Any) -> Any:
    """End Loop reads the prompt through a hidden input ComfyUI's schema does not list (its
    `execution_list` plays that part there): keep it out of `/object_info`."""
    render = spec.render_info

    def rendered(env: Any) -> dict:
        info = render(env)
        hidden = {k: v for k, v in info["input"].get("hidden", {}).items() if k != "_dynprompt"}
        shown = [k for k in info["input_order"].get("hidden", []) if k != "_dynprompt"]
        order = {**info["input_order"], "hidden": shown}
        return {**info, "input": {**info["input"], "hidden": hidden}, "input_order": order}

    return dataclasses.replace(spec, render_info=rendered)


end_loop.__node_spec__ = _hide_dynprompt(_render_without_lazy(end_loop.__node_spec__))


@v3_node(ITERATION, python_module=MODULE, input_is_list=True, dev_only=True, accept_all_inputs=True,
         inputs=[Int("iteration_index"), Boolean("is_first"), Boolean("is_last"),
                 Socket("list_item", "*", optional=True), Socket("current_iteration_value", "*", optional=True),
                 Boolean("reuse_cache")],
         outputs=[Output("INT"), Output("BOOLEAN"), Output("BOOLEAN"), Output("*"), Output("*", is_list=True)],
         is_changed=lambda reuse_cache=False, **_: None if _first(reuse_cache, False) else float("nan"))
def loop_iteration(iteration_index: list, is_first: list, is_last: list, reuse_cache: list,
                   list_item: Any = None, current_iteration_value: Any = None, **_: Any) -> tuple:
    """One iteration's values (the dependency inputs only order the iterations)."""
    carried = current_iteration_value if current_iteration_value is not None else [None]
    return (_first(iteration_index), _first(is_first), _first(is_last), _first(list_item) if list_item else None,
            carried)


@v3_node(PROGRESS, python_module=MODULE, input_is_list=True, dev_only=True, accept_all_inputs=True, output_node=True,
         inputs=[String("start_id"), Int("position"), Int("total")], outputs=[Output("INT")],
         is_changed=lambda **_: float("nan"))
def loop_progress(start_id: list, position: list, total: list, prompt: Any = None, extra_pnginfo: Any = None,
                  **_: Any) -> tuple[int]:
    """After an iteration: "Iteration <position> / <total>" on the Start Loop node (ComfyUI's
    dev-only LoopProgress; its dependency inputs make it wait for the iteration)."""
    _progress_text(_first(start_id), f"Iteration {_first(position)} / {_first(total)}")
    return (_first(position),)


@v3_node(COLLECT, python_module=MODULE, input_is_list=True, dev_only=True, accept_all_inputs=True, output_node=True,
         inputs=[String("close_id")], outputs=[], hidden=[("execution_list", "EXECUTION_LIST")])
def loop_result(close_id: Any = None, execution_list: Any = None, prompt: Any = None, extra_pnginfo: Any = None,
                **outputs: Any) -> tuple[list]:
    """The loop's outputs (`output0`, `output1`, ... in order) as one list value.

    ComfyUI's dev-only LoopResult, with its schema; ComfyUI's hands the outputs to End Loop
    through the execution list and outputs nothing. Here End Loop's expansion reads them from
    this node's one (undeclared) result slot, whose value End Loop hands on as its list output."""
    gathered: list = []
    position = 0
    while f"output{position}" in outputs:
        gathered += list(outputs[f"output{position}"])
        position += 1
    return (gathered,)

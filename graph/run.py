"""One prompt's execution (ComfyUI's `execution.py: PromptExecutor.execute_async` and
`execute`, reference/comfyui-contract.md §5), as a small state object.

Order of events: `execution_start`, then IS_CHANGED and signatures of every node of the prompt,
`execution_cached` (every prompt node whose output is cached), then for each node that really
runs `executing`, `progress_state`, (`progress`...), `executed` when it has UI output, and
finally `execution_success`, or `execution_error` / `execution_interrupted` at the first
failure (outputs computed so far stay cached). Cached output nodes replay `executed` with their
cached UI. `execution_start`, `execution_cached` and the final event carry a timestamp and are
recorded in `messages` (history `status.messages`).

A node returns to PENDING (and announces `executing` again when restaged) when its lazy inputs
are requested, when it expanded into a subgraph, or while its async calls run; other ready
nodes run meanwhile, so independent async nodes overlap.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Hashable

from graph import events as ev
from graph.cache import CacheEntry
from graph.context import Interrupted, NodeContext
from graph.errors import DependencyCycleError
from graph.inputs import AssembledInputs
from graph.invoke import call_sync
from graph.node_step import FAILURE, PENDING, execute_node
from graph.outcome import ExecutionOutcome
from graph.progress import ProgressState
from graph.prompt import DynamicPrompt
from graph.schedule import Schedule
from graph.signature import Signatures, Unique
from graph.spec import InputSpec, NodeSpec
from graph.value_keys import has_handle, value_token

if TYPE_CHECKING:
    from graph.executor import Executor

log = logging.getLogger(__name__)


class Run:
    """The state of one prompt's execution; `run()` is its main loop."""

    def __init__(self, executor: "Executor", prompt: dict, prompt_id: str, *, extra_data: dict,
                 emit: Callable[[ev.Event], None] | None, interrupt: Any) -> None:
        self.executor = executor
        self.registry = executor.registry
        self.cache = executor.outputs
        self.prompt_id = prompt_id
        self.dynprompt = DynamicPrompt(prompt)
        self.extra_data = extra_data
        self._emit = emit
        self.interrupt = interrupt
        self.messages: list[tuple[str, dict]] = []
        self.executed: dict[str, None] = {}
        self.ui_outputs: dict[str, dict] = {}
        self.local: dict[str, CacheEntry] = {}
        self.consumers: dict[str, set[str]] = {}
        # Producers an expanding node reads its results from (links in its "result").
        self.expansion_sources: dict[str, set[str]] = {}
        self.pending_async: dict[str, list] = {}
        self.pending_subgraph: dict[str, list] = {}
        # node -> (value key, reached by value), from its first call until its entry is stored.
        self.value_keys: dict[str, tuple[Hashable | None, bool]] = {}
        self._specs: dict[str, NodeSpec] = {}
        self._inputs: dict[str, dict[str, InputSpec]] = {}
        self._node_specs: dict[str, NodeSpec] = {}
        self._lazy: dict[str, frozenset[str]] = {}  # class_type -> names of its lazy inputs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.async_done: asyncio.Event | None = None
        self.waiters: set[asyncio.Task] = set()
        self.progress = ProgressState(prompt_id, self.dynprompt, self.emit, executor.progress_scope)
        # IS_CHANGED is node code too: it runs with the host's environment in its context.
        helper_context = NodeContext(prompt_id=prompt_id, node_id="", display_node_id="", list_index=None,
                                     env=executor.env)
        self.signatures = Signatures(self.dynprompt, self.spec, self.inputs_of, extra_data=extra_data,
                                     call=lambda fn, kwargs: call_sync(fn, kwargs, helper_context))
        self._computed = self.signatures.computed
        self.schedule = Schedule(self.dynprompt, is_cached=self.is_cached, lazy_inputs=self.lazy_inputs,
                                 is_output=self.is_output, is_async=self.is_async)

    # -- lookups ------------------------------------------------------------------------------
    def spec(self, class_type: str) -> NodeSpec:
        spec = self._specs.get(class_type)
        if spec is None:
            spec = self._specs[class_type] = self.registry.get(class_type)
        return spec

    def inputs_of(self, class_type: str) -> dict[str, InputSpec]:
        specs = self._inputs.get(class_type)
        if specs is None:
            specs = self._inputs[class_type] = {s.name: s for s in self.spec(class_type).current_inputs()}
        return specs

    def spec_of_node(self, node_id: str) -> NodeSpec:
        spec = self._node_specs.get(node_id)
        if spec is None:
            spec = self._node_specs[node_id] = self.spec(self.dynprompt.get_node(node_id)["class_type"])
        return spec

    def lazy_inputs(self, node_id: str) -> frozenset[str]:
        """Names of the node's lazy inputs."""
        class_type = self.dynprompt.get_node(node_id)["class_type"]
        lazy = self._lazy.get(class_type)
        if lazy is None:
            lazy = self._lazy[class_type] = frozenset(s.name for s in self.inputs_of(class_type).values() if s.lazy)
        return lazy

    def is_output(self, node_id: str) -> bool:
        return self.spec_of_node(node_id).output_node

    def is_async(self, node_id: str) -> bool:
        return self.spec_of_node(node_id).behaviour.is_coroutine

    def sig(self, node_id: str) -> Hashable:
        sig = self._computed.get(node_id)
        return sig if sig is not None else self.signatures.get(node_id)

    def owner_sig(self, node_id: str) -> Hashable:
        return self.sig(self.dynprompt.get_real_node_id(node_id))

    def is_cached(self, node_id: str) -> bool:
        if node_id in self.local:
            return True
        sig = self.sig(node_id)
        return not isinstance(sig, Unique) and self.cache.contains(sig)

    def cached_entry(self, node_id: str) -> CacheEntry | None:
        entry = self.local.get(node_id)
        if entry is None:
            sig = self.sig(node_id)
            if not isinstance(sig, Unique):
                entry = self.cache.get(sig)
                if entry is not None:
                    self.local[node_id] = entry
        return entry

    def value_key(self, node_id: str, assembled: AssembledInputs) -> tuple[Hashable | None, bool]:
        """The node's value key and whether a model handle reaches it (graph/value_keys.py),
        from its assembled inputs, just before it would run. A node no handle reaches gets no
        value key: its structural key already says everything."""
        links = self.dynprompt.links(node_id) if self.executor.value_keys else ()
        if not links:
            return None, False
        values, missing = assembled.values, assembled.missing
        reached = False
        for name, source, _slot in links:
            if name in missing:
                return None, False
            if has_handle(values.get(name)):
                reached = True
                break
            entry = self.cached_entry(source)
            if entry is not None and entry.by_value:
                reached = True
                break
        if not reached:
            return None, False

        def link_part(name: str, source: str, slot: int) -> Any:
            token = value_token(values.get(name))
            if token is not None:
                return ("v", token)
            entry = self.cached_entry(source)
            if entry is not None and entry.value_key is not None:
                return ("@", entry.value_key, slot)
            sig = self.sig(source)  # a producer no handle reaches: its structural key names it
            return None if isinstance(sig, Unique) else ("s", sig, slot)

        key = self.signatures.value_key(node_id, link_part)
        return (None, False) if isinstance(key, Unique) else (key, True)

    def output_slot(self, node_id: str, slot: int) -> list | None:
        entry = self.cached_entry(node_id)
        if entry is None or slot >= len(entry.outputs):
            return None
        return entry.outputs[slot]

    # -- events -------------------------------------------------------------------------------
    def emit(self, event: ev.Event) -> None:
        """Send an event to the caller (thread-safe, order preserved)."""
        if self._emit is not None:
            self._emit(event)

    def message(self, event: ev.Event) -> None:
        """An event that also goes into history `status.messages`."""
        self.messages.append((event.type, event.data))
        self.emit(event)

    def node_context(self, node_id: str, list_index: int | None, display: str | None = None) -> NodeContext:
        if display is None:
            display = self.dynprompt.get_display_node_id(node_id)
        return NodeContext(prompt_id=self.prompt_id, node_id=node_id, display_node_id=display,
                           list_index=list_index, env=self.executor.env,
                           report=partial(self.emit_progress, node_id),
                           is_interrupted=self.interrupt.is_set, send=self.send)

    def send(self, event_type: str, data: Any) -> None:
        """A custom event from node code (packs' `send_sync`)."""
        self.emit(ev.Event(event_type, data))

    def emit_progress(self, node_id: str, value: float, total: float, preview: Any = None) -> None:
        """progress_state, progress, then the preview image, as one ordered batch."""
        if threading.get_ident() != self._loop_thread and self._loop is not None:
            # Progress from a thread the node started: handle it on the prompt's loop.
            self._loop.call_soon_threadsafe(self.emit_progress, node_id, value, total, preview)
            return
        self.progress.update(node_id, value, total)
        self.emit(ev.progress(self.prompt_id, node_id, value, total))
        if preview is not None:
            fmt, image, max_size = preview
            self.emit(ev.Event(ev.PREVIEW, {
                "image": image, "format": fmt, "max_size": max_size, "prompt_id": self.prompt_id,
                "node_id": node_id, "display_node_id": self.dynprompt.get_display_node_id(node_id),
                "parent_node_id": self.dynprompt.get_parent_node_id(node_id),
                "real_node_id": self.dynprompt.get_real_node_id(node_id)}))

    # -- the loop -----------------------------------------------------------------------------
    async def run(self, outputs: list[str]) -> ExecutionOutcome:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.async_done = asyncio.Event()
        self.message(ev.execution_start(self.prompt_id))
        prompt = self.dynprompt.original_prompt
        await self.signatures.prepare(prompt)
        keys = {self.sig(n) for n in prompt}
        self.cache.begin_prompt({k for k in keys if not isinstance(k, Unique)})
        self.executor.objects.begin_prompt({(n, node["class_type"]) for n, node in prompt.items()})
        cached_nodes = [n for n in prompt if self.is_cached(n)]
        self.message(ev.execution_cached(self.prompt_id, cached_nodes))
        for node_id in prompt:
            self._add_consumers(node_id)

        status, error = "success", None
        try:
            for output_id in outputs:
                self.schedule.add_node(output_id)
            while not self.schedule.is_empty():
                node_id = self.schedule.stage()
                if node_id is None:
                    if self.schedule.has_external_blocks:
                        await self.async_done.wait()
                        self.async_done.clear()
                        continue
                    details, ex = self._cycle_error()
                    status, error = self._fail(details, ex, cached_nodes)
                    break
                result, details, ex = await execute_node(self, node_id)
                if result == FAILURE:
                    status, error = self._fail(details, ex, cached_nodes)
                    break
                if result == PENDING:
                    self.schedule.unstage()
                else:
                    self.schedule.complete()
                    self._completed(node_id)
                self.cache.poll()
            else:
                self.message(ev.execution_success(self.prompt_id))
        finally:
            for task in list(self.pending_tasks()):
                task.cancel()
            self.cache.end_prompt()
        return ExecutionOutcome(
            status=status,
            ui_outputs={n: info["output"] for n, info in self.ui_outputs.items()},
            meta={n: info["meta"] for n, info in self.ui_outputs.items()},
            messages=self.messages, executed=list(self.executed), error=error)

    def pending_tasks(self) -> list[asyncio.Task]:
        return [t for results in self.pending_async.values() for t in results
                if isinstance(t, asyncio.Task) and not t.done()]

    def _add_consumers(self, node_id: str) -> None:
        # Nodes that failed validation (inputs not a dict) have no links and never run.
        consumers = self.consumers
        for _name, source, _slot in self.dynprompt.links(node_id):
            waiting = consumers.get(source)
            if waiting is None:
                consumers[source] = {node_id}
            else:
                waiting.add(node_id)

    def _completed(self, node_id: str) -> None:
        """Release producers whose every consumer has now run (the `none` strategy frees them)."""
        sources = {source for _name, source, _slot in self.dynprompt.links(node_id)}
        expanded = self.expansion_sources.pop(node_id, None)
        if expanded:
            sources |= expanded
        for source in sources:
            waiting = self.consumers.get(source)
            if waiting is None:
                continue
            waiting.discard(node_id)
            if not waiting and source in self.local:
                self._release(source)
        if not self.consumers.get(node_id) and node_id in self.local:
            self._release(node_id)

    def _release(self, node_id: str) -> None:
        self.local.pop(node_id, None)
        sig = self.sig(node_id)
        if not isinstance(sig, Unique):
            self.cache.release(sig)

    def _cycle_error(self) -> tuple[dict, Exception]:
        cycle = self.schedule.nodes_in_cycle()
        blamed = cycle[0] if cycle else next(iter(self.schedule.pending))
        for node_id in cycle:
            display = self.dynprompt.get_display_node_id(node_id)
            if display != node_id:
                blamed = display
                break
        ex = DependencyCycleError("Dependency cycle detected")
        return ({"node_id": blamed, "exception_message": str(ex), "exception_type": "graph.DependencyCycleError",
                 "traceback": [], "current_inputs": []}, ex)

    def _fail(self, details: dict, ex: BaseException, current_outputs: list[str]) -> tuple[str, dict]:
        node_id = details["node_id"]
        node_type = self.dynprompt.get_node(node_id)["class_type"] if self.dynprompt.has_node(node_id) else ""
        if isinstance(ex, Interrupted):
            event = ev.execution_interrupted(self.prompt_id, node_id, node_type, list(self.executed))
            self.message(event)
            return "interrupted", event.data
        event = ev.execution_error(
            self.prompt_id, node_id, node_type, list(self.executed),
            exception_message=details["exception_message"], exception_type=details["exception_type"],
            traceback=details["traceback"], current_inputs=details["current_inputs"],
            current_outputs=list(current_outputs))
        self.message(event)
        return "error", event.data

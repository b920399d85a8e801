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
import traceback
from functools import partial
from typing import Any, Callable, Hashable

from graph import events as ev
from graph.cache import CacheEntry, OutputCache
from graph.consumers import Consumers
from graph.context import Interrupted, NodeContext
from graph.errors import DependencyCycleError
from graph.inputs import AssembledInputs
from graph.invoke import call_sync
from graph.node_record import NodeRecord, ValueKey
from graph.node_step import FAILURE, PENDING, Expansion, StepResult, execute_node, failure, routed_step
from graph.objects import ObjectCache
from graph.outcome import ExecutionOutcome
from graph.progress import ProgressState
from graph.prompt import DynamicPrompt
from graph.schedule import Schedule
from graph.settings import RunSettings
from graph.signature import Signatures, Unique
from graph.spec import InputSpec, NodeSpec
from graph.spec_index import SpecIndex
from graph.value_keys import has_handle, value_token

log = logging.getLogger(__name__)


def _drop(event: ev.Event) -> None:
    """The emit of a run nobody listens to."""


class Run:
    """The state of one prompt's execution; `run()` is its main loop.

    It gets the executor's `settings`, its output cache (`cache`) and V1 instance cache
    (`objects`); it never sees the executor. Each node's state is one `NodeRecord`; `consumers`
    frees outputs nobody needs any more; `execute_node` (graph/node_step.py) computes a step
    and `_apply` applies it.
    """

    def __init__(self, settings: RunSettings, cache: OutputCache, objects: ObjectCache, prompt: dict,
                 prompt_id: str, *, extra_data: dict, emit: Callable[[ev.Event], None] | None,
                 interrupt: Any) -> None:
        self.settings = settings
        self.cache = cache
        self.objects = objects
        self.prompt_id = prompt_id
        self.dynprompt = DynamicPrompt(prompt)
        self.extra_data = extra_data
        # The host's routes for this prompt (graph/settings.py `NodeRoutes`), None almost always.
        self.routes = settings.routes() if settings.routes is not None else None
        self._emit = emit
        self.interrupt = interrupt
        self.messages: list[tuple[str, dict]] = []
        self.executed: dict[str, None] = {}  # insertion-ordered: ComfyUI's `executed` list
        self.ui_outputs: dict[str, dict] = {}  # node -> {"meta", "output"}, in the order shown
        self._records: dict[str, NodeRecord] = {}
        self._below_custom: dict[str, bool] = {}  # memo of `below_custom_node`
        self.consumers = Consumers(self.dynprompt)
        self.specs = SpecIndex(settings.registry)
        self._node_specs: dict[str, NodeSpec] = {}  # memo: the schedule asks several times per node
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._async_done: asyncio.Event | None = None
        self._waiters: set[asyncio.Task] = set()
        # The caller's emit itself, not the bound `self.emit`: a bound method here would make a
        # reference cycle (Run -> progress -> Run) that only the cyclic collector could free.
        self.progress = ProgressState(prompt_id, self.dynprompt, emit if emit is not None else _drop,
                                      settings.progress_state)
        # IS_CHANGED is node code too: it runs with the host's environment in its context.
        helper_context = NodeContext(prompt_id=prompt_id, node_id="", display_node_id="", list_index=None,
                                     env=settings.env)
        self.signatures = Signatures(self.dynprompt, self.spec, self.inputs_of, extra_data=extra_data,
                                     call=lambda fn, kwargs: call_sync(fn, kwargs, helper_context))
        self._computed = self.signatures.computed
        self.schedule = Schedule(self.dynprompt, is_cached=self.is_cached, lazy_inputs=self.lazy_inputs,
                                 is_output=self.is_output, is_async=self.is_async)

    # -- lookups (what a node step reads: graph/node_step.py's StepView) -----------------------
    def spec(self, class_type: str) -> NodeSpec:
        return self.specs.spec(class_type)

    def inputs_of(self, class_type: str) -> dict[str, InputSpec]:
        return self.specs.inputs_of(class_type)

    def record(self, node_id: str) -> NodeRecord:
        """The node's record (made on first use)."""
        record = self._records.get(node_id)
        if record is None:
            record = self._records[node_id] = NodeRecord()
        return record

    def spec_of_node(self, node_id: str) -> NodeSpec:
        spec = self._node_specs.get(node_id)
        if spec is None:
            spec = self._node_specs[node_id] = self.spec(self.dynprompt.get_node(node_id)["class_type"])
        return spec

    def lazy_inputs(self, node_id: str) -> frozenset[str]:
        """Names of the node's lazy inputs."""
        return self.specs.lazy_inputs(self.dynprompt.get_node(node_id)["class_type"])

    def is_output(self, node_id: str) -> bool:
        return self.spec_of_node(node_id).output_node

    def is_async(self, node_id: str) -> bool:
        return self.spec_of_node(node_id).behaviour.is_coroutine

    def ui_of(self, node_id: str) -> dict | None:
        return self.ui_outputs.get(node_id)

    def executed_ids(self) -> list[str]:
        return list(self.executed)

    def is_interrupted(self) -> bool:
        return bool(self.interrupt.is_set())

    def sig(self, node_id: str) -> Hashable:
        sig = self._computed.get(node_id)
        return sig if sig is not None else self.signatures.get(node_id)

    def owner_sig(self, node_id: str) -> Hashable:
        return self.sig(self.dynprompt.get_real_node_id(node_id))

    def is_cached(self, node_id: str) -> bool:
        record = self._records.get(node_id)
        if record is not None and record.entry is not None:
            return True
        sig = self.sig(node_id)
        return not isinstance(sig, Unique) and self.cache.contains(sig)

    def cached_entry(self, node_id: str) -> CacheEntry | None:
        """The node's outputs in this run: computed here, or found in the cache (and then kept
        for the rest of the run)."""
        record = self._records.get(node_id)
        if record is not None and record.entry is not None:
            return record.entry
        sig = self.sig(node_id)
        if isinstance(sig, Unique):
            return None
        entry = self.cache.get(sig)
        if entry is not None:
            self.record(node_id).entry = entry
        return entry

    def by_value(self, value_key: Hashable) -> CacheEntry | None:
        return self.cache.get_by_value(value_key)

    def value_key(self, node_id: str, assembled: AssembledInputs) -> ValueKey:
        """The node's value key and whether a model handle reaches it (graph/value_keys.py),
        from its assembled inputs, just before it would run. A node no handle reaches gets no
        value key: its structural key already says everything."""
        links = self.dynprompt.links(node_id) if self.settings.value_keys else ()
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
            token = None if self.below_custom_node(source) else value_token(values.get(name))
            if token is not None:
                return ("v", token)
            entry = self.cached_entry(source)
            if entry is not None and entry.value_key is not None:
                return ("@", entry.value_key, slot)
            sig = self.sig(source)  # a producer no handle reaches: its structural key names it
            return None if isinstance(sig, Unique) else ("s", sig, slot)

        key = self.signatures.value_key(node_id, link_part)
        return (None, False) if isinstance(key, Unique) else (key, True)

    def below_custom_node(self, node_id: str) -> bool:
        """True when `node_id` or a node above it in this prompt is not a built-in node. A pack's
        node may change a MODEL in place and return it (LTXTricks' ModifyLTXModel swaps the
        diffusion model's class; others assign `diffusion_model.forward`), on the object it was
        given or on a clone sharing its modules: the handle's `cache_signature()` cannot see that,
        so values made from it are keyed by their producers' value keys (which name the pack node
        and its inputs), never by their own signatures (graph/value_keys.py)."""
        memo = self._below_custom
        pending = [node_id]
        while pending:
            current = pending[-1]
            if current in memo:
                pending.pop()
                continue
            if not self.settings.registry.is_builtin(self.dynprompt.get_node(current)["class_type"]):
                memo[current] = True
                pending.pop()
                continue
            sources = [source for _name, source, _slot in self.dynprompt.links(current)]
            unknown = [source for source in sources if source not in memo]
            if unknown:
                pending.extend(unknown)
                continue
            memo[current] = any(memo[source] for source in sources)
            pending.pop()
        return memo[node_id]

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
        class_type = self.dynprompt.get_node(node_id)["class_type"] if self.dynprompt.has_node(node_id) else None
        return NodeContext(prompt_id=self.prompt_id, node_id=node_id, display_node_id=display,
                           list_index=list_index, env=self.settings.env, class_type=class_type,
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
        """Run the prompt for `outputs`: through the host's prompt route when it has one (which
        gets the run itself as its continuation; what it returns when that is no outcome is a
        host error), else directly."""
        prompt_route = self.routes.prompt if self.routes is not None else None
        if prompt_route is None:
            return await self._run(outputs)
        outcome = await prompt_route(self, list(outputs), partial(self._run, outputs))
        if not isinstance(outcome, ExecutionOutcome):
            raise TypeError(f"the prompt route of prompt {self.prompt_id} returned {type(outcome).__name__}, "
                            f"not an ExecutionOutcome")
        return outcome

    async def _run(self, outputs: list[str]) -> ExecutionOutcome:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._async_done = asyncio.Event()
        self.message(ev.execution_start(self.prompt_id))
        prompt = self.dynprompt.original_prompt
        await self.signatures.prepare(prompt)
        keys = {self.sig(n) for n in prompt}
        self.cache.begin_prompt({k for k in keys if not isinstance(k, Unique)})
        self.objects.begin_prompt({(n, node["class_type"]) for n, node in prompt.items()})
        cached_nodes = [n for n in prompt if self.is_cached(n)]
        self.message(ev.execution_cached(self.prompt_id, cached_nodes))
        for node_id in prompt:
            self.consumers.add(node_id)

        status, error = "success", None
        step_route = self.routes.step if self.routes is not None else None
        try:
            for output_id in outputs:
                self.schedule.add_node(output_id)
            while not self.schedule.is_empty():
                node_id = self.schedule.stage()
                if node_id is None:
                    if self.schedule.has_external_blocks:
                        await self._async_done.wait()
                        self._async_done.clear()
                        continue
                    details, ex = self._cycle_error()
                    status, error = self._fail(details, ex, cached_nodes)
                    break
                if step_route is None:
                    step = await self._apply(node_id, await execute_node(self, node_id))
                else:
                    step = await self._apply(node_id, await routed_step(self, node_id, step_route))
                if step.status == FAILURE:
                    status, error = self._fail(step.error, step.exception, cached_nodes)
                    break
                if step.status == PENDING:
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
            self._release()
        return ExecutionOutcome(
            status=status,
            ui_outputs={n: info["output"] for n, info in self.ui_outputs.items()},
            meta={n: info["meta"] for n, info in self.ui_outputs.items()},
            messages=self.messages, executed=list(self.executed), error=error)

    def _release(self) -> None:
        """Drop the per-node state once the prompt is over (its outcome keeps what it needs).

        The schedule and the signatures call back into this run through bound methods, so they
        and the run form reference cycles; left alone, a big prompt's records, schedule,
        signatures and progress map (about ten objects per node) would wait for a full pass of
        the cyclic collector, which walks every live object while holding the GIL and so stops
        the server's event loop for as long (issue 34). Dropped here, they are freed at once by
        reference counting, on the prompt's own thread."""
        self.progress.close()
        self._records = {}
        self._below_custom = {}
        self._node_specs = {}
        self._waiters = set()
        for name in ("schedule", "signatures", "_computed", "consumers"):
            self.__dict__.pop(name, None)

    def pending_tasks(self) -> list[asyncio.Task]:
        return [t for record in self._records.values() for t in record.waiting or ()
                if isinstance(t, asyncio.Task) and not t.done()]

    # -- applying a node step -----------------------------------------------------------------
    async def _apply(self, node_id: str, step: StepResult) -> StepResult:
        """Apply what a node step produced; a failure while applying is the node's failure."""
        record = self.record(node_id)
        record.waiting = record.expanded = None  # the step has consumed them
        if step.ui is not None:
            self.ui_outputs[node_id] = step.ui
        if step.value_key is not None:
            record.value_key = step.value_key
        if step.status == FAILURE:
            return step
        try:
            if step.needs:
                for name in step.needs:
                    self.schedule.make_input_strong_link(node_id, name)
            elif step.waiting is not None:
                record.waiting = step.waiting
                self._await_tasks(node_id, step.tasks)
            elif step.expansion is not None:
                await self._expand(node_id, step.expansion)
                record.expanded = step.expansion.returned
            elif step.entry is not None:
                record.value_key = None
                record.entry = step.entry
                sig = self.sig(node_id)
                if not isinstance(sig, Unique):
                    self.cache.set(sig, step.entry, self.owner_sig(node_id))
                self.executed[node_id] = None
        except Exception as ex:  # noqa: BLE001 -- as in the step: the node's error
            return failure(self, node_id, ex, step.inputs)
        return step

    def _await_tasks(self, node_id: str, tasks: list[asyncio.Task]) -> None:
        """Block the node until its running async calls end, then wake the loop."""
        self.schedule.add_external_block(node_id)
        schedule, done = self.schedule, self._async_done

        async def wait() -> None:
            await asyncio.gather(*tasks, return_exceptions=True)
            schedule.release_external_block(node_id)
            done.set()

        waiter = asyncio.get_running_loop().create_task(wait())
        self._waiters.add(waiter)
        waiter.add_done_callback(self._waiters.discard)

    async def _expand(self, node_id: str, expansion: Expansion) -> None:
        """Add the returned subgraphs as ephemeral nodes; the node resumes when their outputs exist."""
        for new_id, info, display in expansion.nodes:
            self.dynprompt.add_ephemeral_node(new_id, info, node_id, display)
        new_ids = [new_id for new_id, _info, _display in expansion.nodes]
        await self.signatures.prepare(new_ids)
        for new_id in new_ids:
            self.consumers.add(new_id)
        for source, _slot in expansion.links:
            self.consumers.add_result_source(node_id, source)
        for new_id in expansion.outputs:
            self.schedule.add_node(new_id)
        for source, slot in expansion.links:
            self.schedule.add_strong_link(source, slot, node_id)

    def _completed(self, node_id: str) -> None:
        """Release producers whose every consumer has now run (the `none` strategy frees them)."""
        for free in self.consumers.done(node_id):
            record = self._records.get(free)
            if record is not None and record.entry is not None:
                record.entry = None
                sig = self.sig(free)
                if not isinstance(sig, Unique):
                    self.cache.release(sig)

    # -- failures -----------------------------------------------------------------------------
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
        # The details hold the traceback as text already; the frames it names hold this run (and
        # the exception, a cycle), so their locals go now, or the run would wait for the cyclic
        # collector (see `_release`).
        traceback.clear_frames(ex.__traceback__)
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

"""Executing one staged node (ComfyUI's `execution.py: execute`, reference §4.3, §5.2–5.3).

`execute_node(view, node_id)` runs the node's code and returns a `StepResult`: SUCCESS (its
outputs to store, or a replay of a cached node), PENDING (lazy inputs to run first, async calls
still running, or a subgraph to add; the node is staged again later) or FAILURE with ComfyUI's
error details. The step only reads the run's state, through `StepView`; the run (graph/run.py)
applies the result. What the step does live is what ComfyUI does live: it emits the node's
events (`executing`, `progress_state`, `executed`, a blocked call's error) and calls the node.

Routes (graph/settings.py `NodeRoutes`, a host's, for one prompt): with a step route the run
calls `routed_step`, which hands the route this step as a continuation; with a call route a
node's calls (its main function, its check_lazy_status) are handed to the route as a `CallSite`
whose `run(values)` makes them. Without routes nothing of this is on the path.
"""
from __future__ import annotations

import asyncio
import logging
import traceback
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Hashable, Mapping, Protocol, Sequence

from graph import events as ev
from graph.cache import CacheEntry
from graph.context import Interrupted, NodeContext
from graph.errors import DuplicateNodeError
from graph.expansion import ExecutionBlocker
from graph.inputs import AssembledInputs, assemble_inputs, blocker_in, call_slices, format_value
from graph.invoke import call_sync, start_async
from graph.node_record import NodeRecord, ValueKey
from graph.objects import ObjectCache
from graph.progress import ProgressState
from graph.prompt import DynamicPrompt, is_link
from graph.results import Returns, resolve_expansions, split_returns
from graph.settings import LAZY_CHECK, MAIN_CALL, CallSite, NodeRoutes, RunSettings, StepRoute
from graph.spec import InputSpec, NodeSpec
from graph.validation import full_type_name
from graph.value_keys import holds_handles

log = logging.getLogger(__name__)

SUCCESS, FAILURE, PENDING = "success", "failure", "pending"


class StepView(Protocol):
    """What a node step reads of its run (graph/run.py's `Run` provides it)."""

    prompt_id: str
    settings: RunSettings
    dynprompt: DynamicPrompt
    extra_data: Mapping[str, Any]
    objects: ObjectCache
    progress: ProgressState
    routes: NodeRoutes | None  # the host's routes for this prompt (graph/settings.py)

    def spec(self, class_type: str) -> NodeSpec: ...
    def inputs_of(self, class_type: str) -> Mapping[str, InputSpec]: ...
    def record(self, node_id: str) -> NodeRecord: ...
    def ui_of(self, node_id: str) -> dict | None: ...
    def executed_ids(self) -> list[str]: ...
    def cached_entry(self, node_id: str) -> CacheEntry | None: ...
    def output_slot(self, node_id: str, slot: int) -> list | None: ...
    def value_key(self, node_id: str, assembled: AssembledInputs) -> ValueKey: ...
    def by_value(self, value_key: Hashable) -> CacheEntry | None: ...
    def is_interrupted(self) -> bool: ...
    def emit(self, event: ev.Event) -> None: ...
    def node_context(self, node_id: str, list_index: int | None, display: str | None = None) -> NodeContext: ...


@dataclass(frozen=True)
class Expansion:
    """A node's returned subgraphs, checked and ready to add: `nodes` as (id, node, display id),
    `outputs` the new output nodes, `links` the (producer, slot) its result reads, `returned` the
    `(subgraph, result)` pairs to resolve when it resumes."""

    nodes: tuple[tuple[str, dict, str], ...]
    outputs: tuple[str, ...]
    links: tuple[tuple[str, int], ...]
    returned: list[tuple[dict | None, Any]]


@dataclass(slots=True)
class StepResult:
    """What one step of a node produced, for the run to apply.

    SUCCESS: `entry` is the outputs to store and the node has run (None: a cached node replayed).
    PENDING: exactly one of `needs` (lazy inputs whose producers must run first), `waiting` (the
    calls' returns, some still running tasks) and `expansion`.
    FAILURE: `error` (ComfyUI's details, `{"node_id"}` only for an interrupt) and `exception`.
    Any status: `ui` is a UI record to keep for the node, `value_key` a value key computed now.
    `inputs` are the assembled inputs, for the error details should applying the step fail.
    """

    status: str
    entry: CacheEntry | None = None
    ui: dict | None = None
    value_key: ValueKey | None = None
    needs: tuple[str, ...] = ()
    waiting: list[Any] | None = None
    expansion: Expansion | None = None
    error: dict | None = None
    exception: BaseException | None = None
    inputs: AssembledInputs | None = None

    @property
    def tasks(self) -> list[asyncio.Task]:
        """The async calls still running (PENDING on `waiting`)."""
        return [r for r in self.waiting or () if isinstance(r, asyncio.Task)]


def failure(view: StepView, node_id: str, ex: BaseException, inputs: AssembledInputs | None,
            **kept: Any) -> StepResult:
    """A failed step (or a failure applying it), with ComfyUI's error details; logs the error.
    Call it while handling `ex` (the log carries the current traceback)."""
    dynprompt = view.dynprompt
    real_id = dynprompt.get_real_node_id(node_id)
    if isinstance(ex, Interrupted):
        log.info("prompt %s interrupted at node %s", view.prompt_id, node_id)
        return StepResult(FAILURE, error={"node_id": real_id}, exception=ex, **kept)
    class_type = dynprompt.get_node(node_id)["class_type"]
    log.error("!!! Exception during processing of node %s (%s) !!! %s\n%s", node_id, class_type, ex,
              traceback.format_exc())
    current_inputs: Any = {}
    if inputs is not None:
        current_inputs = {name: [format_value(x) for x in values] for name, values in inputs.values.items()}
    return StepResult(FAILURE, error={"node_id": real_id, "exception_message": f"{ex}\n",
                                      "exception_type": full_type_name(type(ex)),
                                      "traceback": traceback.format_tb(ex.__traceback__),
                                      "current_inputs": current_inputs}, exception=ex, **kept)


class ExecutionListView:
    """What a node that asks for the hidden EXECUTION_LIST input receives: ComfyUI hands such a
    node its scheduler, and what nodes call on it is `get_cache(node_id, requester)` (a node's
    outputs so far, as its own input assembly reads them: an entry with `.outputs`, a list per
    slot, and `.ui`, or None while the node has not run). Only that reading is offered; the run's
    scheduling stays the executor's."""

    __slots__ = ("_view",)

    def __init__(self, view: StepView) -> None:
        self._view = view

    def get_cache(self, node_id: str, requester: str | None = None) -> CacheEntry | None:
        return self._view.cached_entry(node_id)


async def execute_node(view: StepView, node_id: str) -> StepResult:
    dynprompt = view.dynprompt
    node = dynprompt.get_node(node_id)
    class_type = node["class_type"]
    display_id = dynprompt.get_display_node_id(node_id)
    real_id = dynprompt.get_real_node_id(node_id)

    cached = view.cached_entry(node_id)
    if cached is not None:
        # A cached node in the list (an output node, or a duplicate computed meanwhile): replay.
        view.emit(ev.executed(view.prompt_id, node_id, display_id, cached.ui.get("output") if cached.ui else None))
        view.progress.finish(node_id)
        return StepResult(SUCCESS, ui=cached.ui)

    assembled: AssembledInputs | None = None
    record = view.record(node_id)
    value_key = record.value_key
    computed_key: ValueKey | None = None
    ui: dict | None = None
    try:
        spec = view.spec(class_type)
        if record.waiting is not None:
            returns = [item.result() if isinstance(item, asyncio.Task) else item for item in record.waiting]
            produced = split_returns(spec, node_id, returns)
        elif record.expanded is not None:
            outputs = resolve_expansions(spec, record.expanded,
                                         lambda src, slot: view.cached_entry(src).outputs[slot])
            produced = Returns(outputs, {}, None)
        else:
            view.progress.start(node_id)
            assembled = assemble_inputs(node.get("inputs") or {}, view.inputs_of(class_type), node_id,
                                        get_output=view.output_slot,
                                        original_prompt=dynprompt.get_original_prompt(), dynprompt=dynprompt,
                                        extra_data=view.extra_data, execution_list=ExecutionListView(view))
            view.emit(ev.executing(view.prompt_id, node_id, display_id))
            if value_key is None:
                value_key = computed_key = view.value_key(node_id, assembled)
            reused = view.by_value(value_key[0]) if value_key[0] is not None else None
            if reused is not None:
                # Equal input values were computed from before (graph/value_keys.py): take that result.
                log.debug("node %s (%s): reusing the result of equal inputs", node_id, class_type)
                produced = Returns(reused.outputs, dict(reused.ui["output"]) if reused.ui else {}, None)
            else:
                owner_type = class_type if real_id == node_id else dynprompt.get_node(real_id)["class_type"]
                instance = view.objects.get_or_make(
                    (node_id, class_type), (real_id, owner_type), spec.behaviour.make_instance)
                routes = view.routes
                call_route = routes.calls if routes is not None else None
                if spec.behaviour.check_lazy_status is not None:
                    if call_route is None:
                        requested = await _lazy_calls(view, node_id, spec, instance, assembled.values)
                    else:
                        requested = await _routed_calls(call_route, CallSite(
                            view, node_id, spec, instance, assembled.values, LAZY_CHECK,
                            partial(_lazy_calls, view, node_id, spec, instance)))
                    needed = await _needed_inputs(requested, assembled)
                    if needed:
                        return StepResult(PENDING, value_key=computed_key, needs=tuple(needed), inputs=assembled)
                if call_route is None:
                    returns = await _map_calls(view, node_id, display_id, spec, instance, assembled.values)
                else:
                    returns = await _routed_calls(call_route, CallSite(
                        view, node_id, spec, instance, assembled.values, MAIN_CALL,
                        partial(_map_calls, view, node_id, display_id, spec, instance)))
                if any(isinstance(r, asyncio.Task) for r in returns):
                    return StepResult(PENDING, value_key=computed_key, waiting=returns, inputs=assembled)
                produced = split_returns(spec, node_id, returns)

        if produced.ui:
            ui = {"meta": {"node_id": node_id, "display_node": display_id,
                           "parent_node": dynprompt.get_parent_node_id(node_id), "real_node_id": real_id},
                  "output": produced.ui}
            view.emit(ev.executed(view.prompt_id, node_id, display_id, produced.ui))
        if produced.expansions is not None:
            expansion = _plan_expansion(view, node_id, produced.expansions)
            return StepResult(PENDING, ui=ui, value_key=computed_key, expansion=expansion, inputs=assembled)

        key, by_value = value_key if value_key is not None else (None, False)
        entry = CacheEntry(produced.outputs, ui if ui is not None else view.ui_of(node_id), key, by_value,
                           by_value and holds_handles(produced.outputs))
    except Exception as ex:  # noqa: BLE001 -- any node failure (or interrupt) becomes a FAILURE
        return failure(view, node_id, ex, assembled, ui=ui, value_key=computed_key)

    view.progress.finish(node_id)
    return StepResult(SUCCESS, entry=entry, ui=ui, value_key=computed_key, inputs=assembled)


async def routed_step(view: StepView, node_id: str, route: StepRoute) -> StepResult:
    """The node's step through the host's step route, which gets `execute_node` as its
    continuation; whatever the route raises (or a result that is no StepResult) fails the
    node, as its own error would."""
    try:
        result = await route(view, node_id, partial(execute_node, view, node_id))
        if not isinstance(result, StepResult):
            raise TypeError(f"the step route of node {node_id} returned {type(result).__name__}, not a StepResult")
        return result
    except Exception as ex:  # noqa: BLE001 -- the route's failure is the node's
        return failure(view, node_id, ex, None)


async def _routed_calls(route: Any, site: CallSite) -> list[Any]:
    """One node's calls through the host's call route (one return value per call)."""
    returns = await route(site)
    if isinstance(returns, tuple):
        returns = list(returns)
    if not isinstance(returns, list):
        raise TypeError(f"the call route of node {site.node_id} returned {type(returns).__name__}, "
                        f"not a list of per-call results")
    return returns


async def _lazy_calls(view: StepView, node_id: str, spec: NodeSpec, instance: Any,
                      values: Mapping[str, list]) -> list[Any]:
    """The check_lazy_status result of each call (one per input slice)."""
    results: list[Any] = []
    check = spec.behaviour.check_lazy_status
    for index, kwargs in enumerate(call_slices(values, spec.input_is_list)):
        _check_interrupt(view)
        results.append(await call_sync(lambda **kw: check(instance, **kw), kwargs,
                                       view.node_context(node_id, index)))
    return results


async def _needed_inputs(results: list[Any], assembled: AssembledInputs) -> list[str]:
    """Names of lazy inputs the node still needs, from its check_lazy_status results."""
    requested: list[str] = []
    for result in results:
        if isinstance(result, asyncio.Task):  # a route's own async call
            result = await result
        if isinstance(result, list):
            requested.extend(result)
    names: list[str] = []
    for name in requested:
        if isinstance(name, str) and (name not in assembled.values or name in assembled.missing) \
                and name not in names:
            names.append(name)
    return names


def _check_interrupt(view: StepView) -> None:
    if view.is_interrupted():
        raise Interrupted(f"prompt {view.prompt_id} interrupted")


async def _map_calls(view: StepView, node_id: str, display_id: str, spec: NodeSpec, instance: Any,
                     values: Mapping[str, list]) -> list[Any]:
    """One call per list element (or one call with whole lists); async calls may stay running."""
    behaviour = spec.behaviour
    call = partial(behaviour.call, instance)
    hooks: Sequence[Any] = view.settings.hooks
    recover: Callable[[BaseException], bool] | None = view.settings.recover
    returns: list[Any] = []
    for index, kwargs in enumerate(call_slices(values, spec.input_is_list)):
        _check_interrupt(view)
        block = blocker_in(kwargs, spec.input_is_list)
        if block is not None:
            returns.append(blocked_call(view, node_id, block))
            continue
        ctx = view.node_context(node_id, index, display_id)
        if behaviour.is_coroutine:
            task = start_async(call, kwargs, ctx, index, hooks, recover)
            await asyncio.sleep(0)  # let it finish at once if it can, as ComfyUI does
            returns.append(task.result() if task.done() else task)
        else:
            returns.append(await call_sync(call, kwargs, ctx, index, hooks, recover))
    return returns


def blocked_call(view: StepView, node_id: str, block: ExecutionBlocker) -> ExecutionBlocker:
    """A blocked call: report a message once here; downstream sees a silent blocker."""
    if block.message is None:
        return block
    node = view.dynprompt.get_node(node_id)
    view.emit(ev.execution_error(
        view.prompt_id, node_id, node["class_type"], view.executed_ids(),
        exception_message=f"Execution Blocked: {block.message}", exception_type="ExecutionBlocked",
        traceback=[], current_inputs=[], current_outputs=[], timestamp=False))
    return ExecutionBlocker(None)


def _plan_expansion(view: StepView, node_id: str, returned: list[tuple[dict | None, Any]]) -> Expansion:
    """Check the returned subgraphs (ComfyUI's duplicate-id rule) and list what to add."""
    dynprompt = view.dynprompt
    nodes: list[tuple[str, dict, str]] = []
    planned: set[str] = set()
    outputs: list[str] = []
    links: list[tuple[str, int]] = []
    for subgraph, result in returned:
        if subgraph is None:
            continue
        if not isinstance(subgraph, dict):
            raise TypeError(f"node {node_id}: 'expand' must be a dict of nodes, got {type(subgraph).__name__}")
        for new_id in subgraph:
            if dynprompt.has_node(new_id) or new_id in planned:
                raise DuplicateNodeError(
                    f"Attempt to add duplicate node {new_id}. Ensure node ids are unique and deterministic "
                    f"or use graph.expansion.GraphBuilder.")
        for new_id, info in subgraph.items():
            nodes.append((new_id, info, info.get("override_display_id", node_id)))
            planned.add(new_id)
            if view.spec(info["class_type"]).output_node:
                outputs.append(new_id)
        for item in result:
            if is_link(item):
                links.append((item[0], int(item[1])))
    return Expansion(tuple(nodes), tuple(outputs), tuple(links), returned)

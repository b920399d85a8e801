"""Executing one staged node (ComfyUI's `execution.py: execute`, reference §4.3, §5.2–5.3).

Returns SUCCESS (outputs stored), PENDING (lazy inputs requested, expansion, or async calls
still running; the node is staged again later) or FAILURE with ComfyUI's error details.
"""
from __future__ import annotations

import asyncio
import logging
import traceback
from functools import partial
from typing import TYPE_CHECKING, Any

from graph import events as ev
from graph.cache import CacheEntry
from graph.context import Interrupted
from graph.errors import DuplicateNodeError
from graph.expansion import ExecutionBlocker
from graph.inputs import AssembledInputs, assemble_inputs, blocker_in, call_slices, format_value
from graph.invoke import call_sync, start_async
from graph.prompt import is_link
from graph.results import Returns, resolve_expansions, split_returns
from graph.signature import Unique
from graph.spec import NodeSpec
from graph.validation import full_type_name
from graph.value_keys import holds_handles

if TYPE_CHECKING:
    from graph.run import Run

log = logging.getLogger(__name__)

SUCCESS, FAILURE, PENDING = "success", "failure", "pending"


async def execute_node(run: "Run", node_id: str) -> tuple[str, dict | None, BaseException | None]:
    dynprompt = run.dynprompt
    node = dynprompt.get_node(node_id)
    class_type = node["class_type"]
    display_id = dynprompt.get_display_node_id(node_id)
    real_id = dynprompt.get_real_node_id(node_id)

    cached = run.cached_entry(node_id)
    if cached is not None:
        # A cached node in the list (an output node, or a duplicate computed meanwhile): replay.
        run.emit(ev.executed(run.prompt_id, node_id, display_id, cached.ui.get("output") if cached.ui else None))
        if cached.ui is not None:
            run.ui_outputs[node_id] = cached.ui
        run.progress.finish(node_id)
        return SUCCESS, None, None

    assembled: AssembledInputs | None = None
    try:
        spec = run.spec(class_type)
        if node_id in run.pending_async:
            returns = []
            for item in run.pending_async.pop(node_id):
                returns.append(item.result() if isinstance(item, asyncio.Task) else item)
            produced = split_returns(spec, node_id, returns)
        elif node_id in run.pending_subgraph:
            expansions = run.pending_subgraph.pop(node_id)
            outputs = resolve_expansions(spec, expansions, lambda src, slot: run.cached_entry(src).outputs[slot])
            produced = Returns(outputs, {}, None)
        else:
            run.progress.start(node_id)
            specs = run.inputs_of(class_type)
            assembled = assemble_inputs(node.get("inputs") or {}, specs, node_id, get_output=run.output_slot,
                                        original_prompt=dynprompt.get_original_prompt(), dynprompt=dynprompt,
                                        extra_data=run.extra_data)
            run.emit(ev.executing(run.prompt_id, node_id, display_id))
            keyed = run.value_keys.get(node_id)
            if keyed is None:
                keyed = run.value_keys[node_id] = run.value_key(node_id, assembled)
            reused = run.cache.get_by_value(keyed[0]) if keyed[0] is not None else None
            if reused is not None:
                # Equal input values were computed from before (graph/value_keys.py): take that result.
                log.debug("node %s (%s): reusing the result of equal inputs", node_id, class_type)
                produced = Returns(reused.outputs, dict(reused.ui["output"]) if reused.ui else {}, None)
            else:
                owner_type = class_type if real_id == node_id else dynprompt.get_node(real_id)["class_type"]
                instance = run.executor.objects.get_or_make(
                    (node_id, class_type), (real_id, owner_type), spec.behaviour.make_instance)
                if spec.behaviour.check_lazy_status is not None:
                    needed = await _lazy_inputs(run, node_id, spec, instance, assembled)
                    if needed:
                        for name in needed:
                            run.schedule.make_input_strong_link(node_id, name)
                        return PENDING, None, None
                returns = await _map_calls(run, node_id, display_id, spec, instance, assembled)
                if any(isinstance(r, asyncio.Task) for r in returns):
                    run.pending_async[node_id] = returns
                    _await_tasks(run, node_id, [r for r in returns if isinstance(r, asyncio.Task)])
                    return PENDING, None, None
                produced = split_returns(spec, node_id, returns)

        if produced.ui:
            run.ui_outputs[node_id] = {
                "meta": {"node_id": node_id, "display_node": display_id,
                         "parent_node": dynprompt.get_parent_node_id(node_id), "real_node_id": real_id},
                "output": produced.ui}
            run.emit(ev.executed(run.prompt_id, node_id, display_id, produced.ui))
        if produced.expansions is not None:
            await _expand(run, node_id, produced.expansions)
            return PENDING, None, None

        value_key, by_value = run.value_keys.pop(node_id, (None, False))
        entry = CacheEntry(produced.outputs, run.ui_outputs.get(node_id), value_key, by_value,
                           by_value and holds_handles(produced.outputs))
        run.local[node_id] = entry
        sig = run.sig(node_id)
        if not isinstance(sig, Unique):
            run.cache.set(sig, entry, run.owner_sig(node_id))
    except Interrupted as ex:
        log.info("prompt %s interrupted at node %s", run.prompt_id, node_id)
        return FAILURE, {"node_id": real_id}, ex
    except Exception as ex:  # noqa: BLE001 -- any node failure becomes execution_error
        log.error("!!! Exception during processing of node %s (%s) !!! %s\n%s", node_id, class_type, ex,
                  traceback.format_exc())
        current_inputs: Any = {}
        if assembled is not None:
            current_inputs = {name: [format_value(x) for x in values] for name, values in assembled.values.items()}
        return FAILURE, {"node_id": real_id, "exception_message": f"{ex}\n",
                         "exception_type": full_type_name(type(ex)),
                         "traceback": traceback.format_tb(ex.__traceback__),
                         "current_inputs": current_inputs}, ex

    run.progress.finish(node_id)
    run.executed[node_id] = None
    return SUCCESS, None, None


async def _lazy_inputs(run: "Run", node_id: str, spec: NodeSpec, instance: Any,
                       assembled: AssembledInputs) -> list[str]:
    """Names of lazy inputs the node still needs, from (repeated) check_lazy_status calls."""
    requested: list[str] = []
    check = spec.behaviour.check_lazy_status
    for index, kwargs in enumerate(call_slices(assembled.values, spec.input_is_list)):
        _check_interrupt(run)
        result = await call_sync(lambda **kw: check(instance, **kw), kwargs,
                                run.node_context(node_id, index))
        if isinstance(result, list):
            requested.extend(result)
    names: list[str] = []
    for name in requested:
        if isinstance(name, str) and (name not in assembled.values or name in assembled.missing) \
                and name not in names:
            names.append(name)
    return names


def _check_interrupt(run: "Run") -> None:
    if run.interrupt.is_set():
        raise Interrupted(f"prompt {run.prompt_id} interrupted")


async def _map_calls(run: "Run", node_id: str, display_id: str, spec: NodeSpec, instance: Any,
                     assembled: AssembledInputs) -> list[Any]:
    """One call per list element (or one call with whole lists); async calls may stay running."""
    behaviour = spec.behaviour
    call = partial(behaviour.call, instance)
    hooks = run.executor.before_node_call
    recover = run.executor.recover
    returns: list[Any] = []
    for index, kwargs in enumerate(call_slices(assembled.values, spec.input_is_list)):
        _check_interrupt(run)
        block = blocker_in(kwargs, spec.input_is_list)
        if block is not None:
            returns.append(_blocked(run, node_id, block))
            continue
        ctx = run.node_context(node_id, index, display_id)
        if behaviour.is_coroutine:
            task = start_async(call, kwargs, ctx, index, hooks, recover)
            await asyncio.sleep(0)  # let it finish at once if it can, as ComfyUI does
            returns.append(task.result() if task.done() else task)
        else:
            returns.append(await call_sync(call, kwargs, ctx, index, hooks, recover))
    return returns


def _blocked(run: "Run", node_id: str, block: ExecutionBlocker) -> ExecutionBlocker:
    """A blocked call: report a message once here; downstream sees a silent blocker."""
    if block.message is None:
        return block
    node = run.dynprompt.get_node(node_id)
    run.emit(ev.execution_error(
        run.prompt_id, node_id, node["class_type"], list(run.executed),
        exception_message=f"Execution Blocked: {block.message}", exception_type="ExecutionBlocked",
        traceback=[], current_inputs=[], current_outputs=[], timestamp=False))
    return ExecutionBlocker(None)


def _await_tasks(run: "Run", node_id: str, tasks: list[asyncio.Task]) -> None:
    """Block the node until its running async calls end, then wake the loop."""
    run.schedule.add_external_block(node_id)

    async def wait() -> None:
        await asyncio.gather(*tasks, return_exceptions=True)
        run.schedule.release_external_block(node_id)
        run.async_done.set()

    waiter = asyncio.get_running_loop().create_task(wait())
    run.waiters.add(waiter)
    waiter.add_done_callback(run.waiters.discard)


async def _expand(run: "Run", node_id: str, expansions: list[tuple[dict | None, Any]]) -> None:
    """Add the returned subgraphs as ephemeral nodes; the node resumes when their outputs exist."""
    dynprompt = run.dynprompt
    new_ids: list[str] = []
    new_outputs: list[str] = []
    links: list[tuple[str, int]] = []
    for subgraph, result in expansions:
        if subgraph is None:
            continue
        if not isinstance(subgraph, dict):
            raise TypeError(f"node {node_id}: 'expand' must be a dict of nodes, got {type(subgraph).__name__}")
        for new_id in subgraph:
            if dynprompt.has_node(new_id):
                raise DuplicateNodeError(
                    f"Attempt to add duplicate node {new_id}. Ensure node ids are unique and deterministic "
                    f"or use graph.expansion.GraphBuilder.")
        for new_id, info in subgraph.items():
            dynprompt.add_ephemeral_node(new_id, info, node_id, info.get("override_display_id", node_id))
            new_ids.append(new_id)
            if run.spec(info["class_type"]).output_node:
                new_outputs.append(new_id)
        for item in result:
            if is_link(item):
                links.append((item[0], int(item[1])))
    await run.signatures.prepare(new_ids)
    for new_id in new_ids:
        run._add_consumers(new_id)
    for source, _slot in links:
        run.consumers.setdefault(source, set()).add(node_id)
        run.expansion_sources.setdefault(node_id, set()).add(source)
    for new_id in new_outputs:
        run.schedule.add_node(new_id)
    for source, slot in links:
        run.schedule.add_strong_link(source, slot, node_id)
    run.pending_subgraph[node_id] = expansions

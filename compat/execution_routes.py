"""How a session's executor reaches the packs that replaced ComfyUI's executor functions.

ComfyUI's packs watch the executor by replacing its functions and calling the originals:
`execution.PromptExecutor.execute` (once per prompt, on the server's one `PromptExecutor`:
metadata savers keep `self` to read `self.caches.outputs` while their save node runs, profilers
time the prompt), `execution.execute` (each node step), `execution._async_map_node_over_list`
(each node's calls) and `execution.get_input_data` (each node step's inputs, as the step reads
them). This engine's executor never calls those names; the session's routes provider
(compat/execution_api.py `SessionRoutes`, graph/settings.py `NodeRoutes`) asks at the start of
each prompt which of them a pack replaced in the session, and `node_routes` here answers routes
that lead the prompt, its steps and its calls through the pack's functions with ComfyUI's
arguments. The built-ins (compat/execution_api.py), called
back from a pack's wrapper, run the executor's own prompt, step or calls, which this module hands
them through context variables. Nothing replaced: no routes, the executor runs unrouted.

Threads: `PromptExecutor.execute` is synchronous in ComfyUI (it runs its own event loop), so a
pack's replacement runs on a helper thread while the prompt's loop waits for it; the built-in
`execute_async` it calls back schedules the executor's run on the prompt's loop, in the run's own
context, and waits for its outcome.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import inspect
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

log = logging.getLogger(__name__)


@dataclass
class _RoutedCalls:
    """The executor's calls of one node, handed to a pack's `_async_map_node_over_list`: the
    built-in, called from it with this node, `obj` and `func`, makes them (`run(values)`)."""

    unique_id: str
    obj: Any
    func: str
    run: Callable[[Mapping[str, list]], Awaitable[list]]


@dataclass
class _RoutedStep:
    """The executor's step of one node, handed to a pack's `execute`: the built-in, called from
    it for this node, runs it (`run()`) and keeps its StepResult here for the executor."""

    node_id: str
    run: Callable[[], Awaitable[Any]]
    results: list = field(default_factory=list)


@dataclass
class _RoutedInputs:
    """The executor's input values of one node, handed to a pack's `get_input_data`: the
    built-in, called from it for this node and class, answers them."""

    unique_id: str
    class_def: Any
    values: Mapping[str, list]


@dataclass
class _RoutedPrompt:
    """The executor's run of one prompt, handed to a pack's `PromptExecutor.execute`: the
    built-in `execute_async`, called from it on `executor` (the host's `PromptExecutor`),
    starts the run (`start()`: a future of its ExecutionOutcome) once."""

    executor: Any
    start: Callable[[], concurrent.futures.Future]
    started: bool = False


routed_calls: contextvars.ContextVar[_RoutedCalls | None] = contextvars.ContextVar("compat_routed_calls",
                                                                                   default=None)
routed_step: contextvars.ContextVar[_RoutedStep | None] = contextvars.ContextVar("compat_routed_step", default=None)
routed_inputs: contextvars.ContextVar[_RoutedInputs | None] = contextvars.ContextVar("compat_routed_inputs",
                                                                                     default=None)
routed_prompt: contextvars.ContextVar[_RoutedPrompt | None] = contextvars.ContextVar("compat_routed_prompt",
                                                                                     default=None)


class OutputCacheView:
    """ComfyUI's `caches.outputs` as packs read it while a prompt runs: `await get(node_id)` and
    `get_local(node_id)`, the node's cache entry (`.outputs`, a list per slot, and `.ui`) in the
    running prompt or None, and `all_node_ids()`. Over no run (`view` None) it answers nothing."""

    def __init__(self, view: Any) -> None:
        self._view = view

    def get_local(self, node_id: str) -> Any:
        return self._view.cached_entry(str(node_id)) if self._view is not None else None

    async def get(self, node_id: str) -> Any:
        return self.get_local(node_id)

    def all_node_ids(self) -> set[str]:
        return set(self._view.dynprompt.all_node_ids()) if self._view is not None else set()


class CacheSet:
    """ComfyUI's `CacheSet` over the running prompt, for reading: `outputs` (the node instances,
    ComfyUI's `objects`, stay the executor's)."""

    def __init__(self, view: Any = None) -> None:
        self.outputs = OutputCacheView(view)
        self.all = [self.outputs]

def prompt_server_of(session: Any) -> Any:
    """The session's `PromptServer.instance`."""
    from compat.prompt_server import PromptServer

    if session.prompt_server is None:
        session.prompt_server = PromptServer(session)
    return session.prompt_server


def _comfy_object(site: Any) -> Any:
    """The node object ComfyUI's executor passes for `site`'s node: the V1 instance kept for
    the node, else an instance of the class packs see in `nodes.NODE_CLASS_MAPPINGS` (a
    built-in node's V1 facade, a V3 class); None when there is no such class."""
    from compat.node_facades import class_for

    if site.instance is not None:
        return site.instance
    cls = class_for(site.spec)
    if cls is None:
        return None
    try:
        return cls()
    except Exception:  # noqa: BLE001 -- a class that needs arguments: ComfyUI would fail; the class answers
        return cls


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _name(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"


def node_routes(session: Any, node_execute: Any, map_node_over_list: Any, input_data: Any = None,
                prompt_executor: Callable[[], Any] | None = None) -> Any:
    """The executor's routes (graph/settings.py `NodeRoutes`) through a pack's `execute`,
    `_async_map_node_over_list` and `get_input_data` (None for a name no pack replaced), and,
    with `prompt_executor` (the host's object), each prompt through `PromptExecutor.execute`."""
    from graph.node_step import ExecutionListView, blocked_call
    from graph.settings import MAIN_CALL, NodeRoutes

    async def step(view: Any, node_id: str, run: Callable[[], Awaitable[Any]]) -> Any:
        routed = _RoutedStep(node_id, run)
        executed = set(view.executed_ids())
        args = (prompt_server_of(session), view.dynprompt, CacheSet(view), node_id, view.extra_data, executed,
                view.prompt_id, ExecutionListView(view), {}, {}, {}, None)
        token = routed_step.set(routed)
        try:
            with session.activate():
                returned = await _maybe_await(node_execute(*args))
        finally:
            routed_step.reset(token)
        if not routed.results:
            raise RuntimeError(f"execution.execute replacement {getattr(node_execute, '__qualname__', node_execute)} "
                               f"returned {returned!r} without running node {node_id} (its call of the "
                               f"original execute runs the node)")
        return routed.results[-1]

    def read_inputs(site: Any) -> Any:
        """ComfyUI reads a node's inputs with `get_input_data` before it calls the node (its lazy
        check, its main function): the pack's replacement gets that call, with ComfyUI's
        arguments; the built-in it calls back answers the executor's own values for the node,
        and what the replacement returns is what the node is called with (a pack may add a
        hidden input of its own). Here it is asked before each of the node's call sites."""
        from compat.node_facades import class_for

        class_def = class_for(site.spec)
        if class_def is None:
            return site
        view, node_id = site.view, site.node_id
        token = routed_inputs.set(_RoutedInputs(node_id, class_def, site.values))
        try:
            with session.activate():
                returned = input_data(dict(view.dynprompt.get_node(node_id).get("inputs") or {}), class_def,
                                      node_id, ExecutionListView(view), view.dynprompt, view.extra_data)
        finally:
            routed_inputs.reset(token)
        values = returned[0] if isinstance(returned, (tuple, list)) and returned else None
        if not isinstance(values, Mapping):
            raise TypeError(f"execution.get_input_data replacement {_name(input_data)} returned "
                            f"{type(returned).__name__}, not ComfyUI's (input_data_all, missing_keys, ...) tuple")
        if values is site.values:
            return site
        return dataclasses.replace(site, values={name: list(v) for name, v in values.items()})

    async def mapped(site: Any) -> list:
        with session.activate():  # a facade's __init__ (SaveImage's) reads this session's folders
            obj = _comfy_object(site)
        if obj is None:  # no class packs see for the node: nothing ComfyUI would pass
            return await site.run(site.values)
        func = getattr(obj, "FUNCTION", None) if site.kind == MAIN_CALL else site.kind
        if not isinstance(func, str):
            return await site.run(site.values)
        view, node_id = site.view, site.node_id

        def execution_block_cb(block: Any) -> Any:
            return blocked_call(view, node_id, block)

        def pre_execute_cb(call_index: int) -> None:
            from compat.graph_builder import GraphBuilder

            GraphBuilder.set_default_prefix(node_id, call_index, 0)

        token = routed_calls.set(_RoutedCalls(node_id, obj, func, site.run))
        try:
            with session.activate():
                return await _maybe_await(map_node_over_list(
                    view.prompt_id, node_id, obj, {k: list(v) for k, v in site.values.items()}, func, True,
                    execution_block_cb, pre_execute_cb, {"hidden_inputs": {}}))
        finally:
            routed_calls.reset(token)

    async def calls(site: Any) -> list:
        if input_data is not None:
            site = read_inputs(site)
        if map_node_over_list is not None:
            return await mapped(site)
        return await site.run(site.values)

    async def prompt(view: Any, outputs: list, run: Callable[[], Awaitable[Any]]) -> Any:
        return await _routed_prompt_run(session, prompt_executor(), view, outputs, run)

    return NodeRoutes(step=step if node_execute is not None else None,
                      calls=calls if map_node_over_list is not None or input_data is not None else None,
                      prompt=prompt if prompt_executor is not None else None)


async def _routed_prompt_run(session: Any, executor: Any, view: Any, outputs: list,
                             run: Callable[[], Awaitable[Any]]) -> Any:
    """Run one prompt through `executor.execute` as a pack replaced it: the pack's function runs
    on a helper thread (ComfyUI's is synchronous); its call of the original starts `run()` on
    this loop, in this run's own context, and waits for the outcome.

    A replacement that raises before it ran the prompt is logged and the prompt runs without it
    (ComfyUI's worker thread would die there); one that raises after it is logged and the
    outcome stands; one that returns without running the prompt skips it, as in ComfyUI (logged)."""
    from graph.outcome import ExecutionOutcome

    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()  # the run's own context, before this route's variable
    finished: concurrent.futures.Future = concurrent.futures.Future()

    def begin() -> None:
        task = loop.create_task(run(), context=context)

        def settle(done: asyncio.Task) -> None:
            if done.cancelled():
                finished.cancel()
            elif done.exception() is not None:
                finished.set_exception(done.exception())
            else:
                finished.set_result(done.result())

        task.add_done_callback(settle)

    def start() -> concurrent.futures.Future:
        loop.call_soon_threadsafe(begin)
        return finished

    routed = _RoutedPrompt(executor, start)
    replacement = type(executor).execute
    executor.caches = CacheSet(view)

    def call_pack() -> None:
        with session.activate():
            executor.execute(view.dynprompt.get_original_prompt(), view.prompt_id, dict(view.extra_data),
                             list(outputs))

    token = routed_prompt.set(routed)
    try:
        await _on_daemon_thread(call_pack)
    except Exception:  # noqa: BLE001 -- a pack's wrapper failing never loses the prompt
        # (the run's own failure, passed on by the wrapper, is raised below as unrouted)
        run_failed = finished.done() and not finished.cancelled() and finished.exception() is not None
        if not routed.started:
            log.exception("PromptExecutor.execute as a pack replaced it (%s) failed before running prompt %s; "
                          "running the prompt without it", _name(replacement), view.prompt_id)
            return await run()
        if not run_failed:
            log.exception("PromptExecutor.execute as a pack replaced it (%s) failed after running prompt %s",
                          _name(replacement), view.prompt_id)
    finally:
        routed_prompt.reset(token)
        executor.caches = CacheSet()
    if not routed.started:
        log.warning("PromptExecutor.execute as a pack replaced it (%s) returned without running prompt %s "
                    "(ComfyUI skips the prompt then, so does this server)", _name(replacement), view.prompt_id)
        return ExecutionOutcome(status="success")
    return await asyncio.wrap_future(finished)


async def _on_daemon_thread(fn: Callable[[], Any]) -> Any:
    """`fn()` on a daemon thread, in a copy of this context, awaited here. Not the loop's thread
    pool: a pack's wrapper waits there for a run on this loop, and a server shutting down while
    it waits must not wait for that thread at exit."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if not done.done():
            done.set_exception(error) if error is not None else done.set_result(result)

    def work() -> None:
        result, error = None, None
        try:
            result = context.run(fn)
        except BaseException as exc:  # noqa: BLE001 -- handed to the awaiting coroutine
            error = exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=work, name="prompt-executor-route", daemon=True).start()
    return await done

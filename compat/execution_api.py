"""ComfyUI's top-level `execution` module for packs: validation and an executor with ComfyUI's
signatures and return shapes, over our graph engine (graph.validation, graph.executor).

- `validate_prompt(prompt_id, prompt, partial_execution_list)` answers ComfyUI's tuple
  `(ok, error, good_outputs, node_errors)`; `validate_inputs(prompt_id, prompt, item, validated)`
  validates one node and its ancestors into `validated` (`{node_id: (ok, errors, node_id)}`);
  both run graph.validation against the active session's registry and environment.
- `get_input_data(inputs, class_def, unique_id, outputs, dynprompt, extra_data)` is ComfyUI's
  input resolution for one node: links read from `outputs` (an execution list's `get_cache`,
  today's `caches.outputs.get_local`, or 0.3.64's output map), widget values wrapped in a
  one-item list, hidden inputs filled.
- `PromptExecutor(server)` runs prompts on its own `graph.executor.Executor` (its own caches),
  reporting through `add_message` and `handle_execution_error` as ComfyUI's does, so a pack
  that wraps those methods sees each message.
- `_async_map_node_over_list(prompt_id, unique_id, obj, input_data_all, func, ...)` is ComfyUI's
  mapping of `getattr(obj, func)` over the input lists (graph/inputs.py `call_slices`: one call
  with whole lists for INPUT_IS_LIST, else max(len) calls, a shorter list repeating its last
  element; an `ExecutionBlocker` argument skips the call; an async function becomes a task);
  `execute(server, dynprompt, caches, current_item, extra_data, executed, prompt_id,
  execution_list, ...)` runs one node step of the prompt the executor is running.

The executor never calls these names, but packs replace them to watch it: `execute`,
`_async_map_node_over_list` and `get_input_data` are extension points
(`ExtensionPoints.node_execute` / `map_node_over_list` / `node_input_data`), and packs assign
`PromptExecutor.execute` on the class. A session's executor then leads every prompt, node step,
node call and input reading through the pack's function with ComfyUI's arguments
(compat/execution_routes.py; ComfyUI-Lora-Manager's collector and the metadata-saving packs
wrap them, record and call the original), and the built-ins called back from a wrapper run the
executor's own prompt, step and calls. `validate_prompt` / `validate_inputs` replaced change
what packs calling them get; the server validates with graph.validation.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
from enum import Enum
from typing import Any, Iterable, Mapping

log = logging.getLogger(__name__)

SENSITIVE_EXTRA_DATA_KEYS = ("auth_token_comfy_org", "api_key_comfy_org")
MAXIMUM_HISTORY_SIZE = 10000
_HIDDEN_FROM_EXTRA = {"EXTRA_PNGINFO": "extra_pnginfo", "AUTH_TOKEN_COMFY_ORG": "auth_token_comfy_org",
                      "API_KEY_COMFY_ORG": "api_key_comfy_org", "COMFY_USAGE_SOURCE": "comfy_usage_source"}


class ExecutionResult(Enum):
    """ComfyUI's result of one node step."""

    SUCCESS = 0
    FAILURE = 1
    PENDING = 2


class CacheType(Enum):
    """ComfyUI's cache strategies (graph.cache kinds: classic, lru, none, ram)."""

    CLASSIC = 0
    LRU = 1
    NONE = 2
    RAM_PRESSURE = 3


_CACHE_KINDS = {CacheType.CLASSIC: "classic", CacheType.LRU: "lru", CacheType.NONE: "none",
                CacheType.RAM_PRESSURE: "ram"}


class IsChangedCache:
    """ComfyUI's `execution.IsChangedCache(prompt_id, dynprompt, outputs_cache)`: each node's
    `fingerprint_inputs` (a V3 class's own) or `IS_CHANGED` value, computed once from its
    constant inputs (links are not followed: "only constants in IS_CHANGED", as ComfyUI says),
    for the key sets of `comfy_execution.caching` (`await cache.get(node_id)`). The value is kept
    in the prompt's node as `"is_changed"`, which a later cache reads first; a check that raises
    gives NaN (logged), which keys the node apart, as ComfyUI's does. The engine's own executor
    keys its cache in graph/signature.py; this is for packs that build ComfyUI's caches."""

    def __init__(self, prompt_id: str, dynprompt: Any, outputs_cache: Any = None) -> None:
        self.prompt_id = prompt_id
        self.dynprompt = dynprompt
        self.outputs_cache = outputs_cache
        self.is_changed: dict[str, Any] = {}

    async def get(self, node_id: str) -> Any:
        if node_id in self.is_changed:
            return self.is_changed[node_id]
        from compat.node_facades import node_class_mappings
        from graph.expansion import ExecutionBlocker

        node = self.dynprompt.get_node(node_id)
        class_def = node_class_mappings()[node["class_type"]]
        overrides = getattr(class_def, "overrides", None)
        if callable(overrides) and hasattr(class_def, "define_schema") and overrides("fingerprint_inputs"):
            method = "fingerprint_inputs"
        elif hasattr(class_def, "IS_CHANGED"):
            method = "IS_CHANGED"
        else:
            self.is_changed[node_id] = False
            return False
        if "is_changed" not in node:
            input_data_all, _missing, v3_data = get_input_data(node["inputs"], class_def, node_id, None)
            try:
                results = await _async_map_node_over_list(self.prompt_id, node_id, class_def, input_data_all,
                                                          method, v3_data=v3_data)
                results = await resolve_map_node_over_list_results(results)
                node["is_changed"] = [None if isinstance(x, ExecutionBlocker) else x for x in results]
            except Exception as ex:  # noqa: BLE001 -- a failing check keys the node apart, as ComfyUI
                log.warning("WARNING: %s", ex)
                node["is_changed"] = float("NaN")
        self.is_changed[node_id] = node["is_changed"]
        return node["is_changed"]


class DuplicateNodeError(Exception):
    """ComfyUI's error for an expansion that reuses a node id."""


class NodeExecutionError(Exception):
    """The exception `PromptExecutor.handle_execution_error` receives for a failed node: the
    node's own exception was raised on the executor's thread and is reported by value
    (`exception_type`, `exception_message`, `traceback`), as in the execution_error message."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        super().__init__(error.get("exception_message", ""))
        self.exception_type = error.get("exception_type", "")
        self.traceback = error.get("traceback", [])


def full_type_name(klass: type) -> str:
    from graph.validation import full_type_name as name

    return name(klass)


def _session() -> Any:
    from compat.active import active

    return active()


# -- validation -------------------------------------------------------------------------------
async def validate_prompt(prompt_id: str, prompt: dict, partial_execution_list: list[str] | None = None
                          ) -> tuple[bool, dict | None, list[str], dict]:
    """ComfyUI's `execution.validate_prompt`: `(ok, error, good_outputs, node_errors)`."""
    from graph.validation import validate_prompt as validate

    session = _session()
    result = await validate(prompt, session.registry, env=session.env,
                            partial_execution_targets=partial_execution_list)
    return (result.ok, result.error, list(result.outputs), result.node_errors)


async def validate_inputs(prompt_id: str, prompt: dict, item: str, validated: dict) -> tuple[bool, list[dict], str]:
    """ComfyUI's `execution.validate_inputs`: validate node `item` (and what it links to) into
    `validated`; returns `(ok, errors, item)`."""
    from graph.validation import _Validator  # noqa: PLC2701 -- the engine's one-node walk

    session = _session()
    validator = _Validator(prompt, session.registry, session.env)
    validator.validated = validated
    if item not in validated:
        await validator.validate_output(item)
    return validated[item]


# -- one node's inputs --------------------------------------------------------------------------
def _is_link(value: Any) -> bool:
    return (isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], str)
            and isinstance(value[1], int) and not isinstance(value[1], bool))


def _cached_outputs(outputs: Any, source_id: str, requester: str) -> Any:
    """The per-slot outputs of `source_id` from an execution list (`get_cache`) or an output map."""
    if outputs is None:
        return None
    if hasattr(outputs, "get_cache"):
        entry = outputs.get_cache(source_id, requester)
    elif hasattr(outputs, "get_local"):  # today's `caches.outputs` itself, as some packs pass it
        entry = outputs.get_local(source_id)
    else:
        return outputs.get(source_id)
    return getattr(entry, "outputs", None) if entry is not None else None


def get_input_data(inputs: Mapping[str, Any], class_def: type, unique_id: str, outputs: Any = None,
                   dynprompt: Any = None, extra_data: Mapping[str, Any] | None = None
                   ) -> tuple[dict[str, Any], dict[str, bool], dict]:
    """ComfyUI's `execution.get_input_data` for a V1 class: `(input_data_all, missing_keys,
    hidden_inputs_v3)`. `outputs` is what ComfyUI passed there, in either of its shapes: today's
    execution list (`outputs.get_cache(source_id, unique_id).outputs[index]`) or 0.3.64's output
    map (`outputs.get(source_id)[index]`); a link it cannot answer is marked missing, as `(None,)`.
    A widget value becomes `[value]`; the hidden PROMPT, DYNPROMPT, EXTRA_PNGINFO, UNIQUE_ID,
    EXECUTION_LIST (`outputs` itself), API-key and COMFY_USAGE_SOURCE inputs are filled.
    Called back from a pack's replacement for the node the executor is about to call, it answers
    the executor's own values for that node (compat/execution_routes.py)."""
    from compat.execution_routes import routed_inputs

    routed = routed_inputs.get()
    if routed is not None and routed.unique_id == unique_id and routed.class_def is class_def:
        # called back from a pack's replacement for the node the executor is about to call
        return {name: list(values) for name, values in routed.values.items()}, {}, {}
    extra_data = extra_data or {}
    valid = class_def.INPUT_TYPES()
    declared: dict[str, dict] = {}
    for section in ("required", "optional"):
        for name, entry in (valid.get(section) or {}).items():
            options = entry[1] if isinstance(entry, (list, tuple)) and len(entry) > 1 else {}
            declared[name] = options if isinstance(options, dict) else {}
    input_data_all: dict[str, Any] = {}
    missing: dict[str, bool] = {}
    for name, value in inputs.items():
        options = declared.get(name)
        if _is_link(value) and not (options or {}).get("rawLink", False):
            cached = _cached_outputs(outputs, value[0], unique_id)
            if cached is None or value[1] >= len(cached):
                missing[name] = True
                input_data_all[name] = (None,)
                continue
            input_data_all[name] = cached[value[1]]
        elif options is not None:
            input_data_all[name] = [value]
    for name, kind in (valid.get("hidden") or {}).items():
        if kind == "PROMPT":
            input_data_all[name] = [dynprompt.get_original_prompt() if dynprompt is not None else {}]
        elif kind == "DYNPROMPT":
            input_data_all[name] = [dynprompt]
        elif kind == "UNIQUE_ID":
            input_data_all[name] = [unique_id]
        elif kind == "EXECUTION_LIST":
            input_data_all[name] = [outputs]
        elif kind in _HIDDEN_FROM_EXTRA:
            input_data_all[name] = [extra_data.get(_HIDDEN_FROM_EXTRA[kind])]
    return input_data_all, missing, {}


# -- the executor -------------------------------------------------------------------------------
class PromptExecutor:
    """ComfyUI's `execution.PromptExecutor(server, cache_type, cache_size)` over a
    `graph.executor.Executor` of the active session's registry (caches kept across `execute`
    calls until `reset`). After `execute`: `success`, `status_messages` and `history_result`
    (`{"outputs", "meta"}`) as ComfyUI sets them."""

    def __init__(self, server: Any, cache_type: Any = False, cache_size: int | None = None) -> None:
        self.server = server
        self.cache_type = cache_type
        self.cache_size = cache_size
        self.reset()

    def _cache_config(self) -> Any:
        from graph.cache import CacheConfig

        kind = _CACHE_KINDS.get(self.cache_type, "classic") if isinstance(self.cache_type, CacheType) else "classic"
        if kind == "lru" and not self.cache_size:
            kind = "classic"  # ComfyUI: --cache-lru 0 is the classic cache
        return CacheConfig(kind=kind, size=int(self.cache_size or 0))

    def reset(self) -> None:
        from graph.executor import Executor

        from compat.execution_routes import CacheSet

        session = _session()
        # Its own runs route node steps and calls as the session's, never the prompt: the pack's
        # PromptExecutor.execute (if any) is what is running around them.
        self._executor = Executor(session.registry, cache=self._cache_config(), env=session.env,
                                  before_node_call=[session.before_node_call],
                                  routes=SessionRoutes(session, prompts=False))
        # ComfyUI's caches, as packs read them (`caches.outputs`) while a prompt of the server's
        # runs through a pack's `execute` (compat/execution_routes.py); empty otherwise.
        self.caches = CacheSet()
        self.status_messages: list[tuple[str, dict]] = []
        self.success = True
        self.history_result: dict = {}
        self.client_id: str | None = None

    def add_message(self, event: str, data: dict, broadcast: bool) -> None:
        """Record a status message (timestamped) and send it to the prompt's client, or to every
        client when `broadcast` (ComfyUI's rule). The client is the one `extra_data` named
        (ComfyUI keeps it on `server.client_id`; here that is the server's running prompt's)."""
        data = {**data, "timestamp": int(time.time() * 1000)}
        self.status_messages.append((event, data))
        if self.client_id is not None or broadcast:
            self.server.send_sync(event, data, self.client_id)

    def handle_execution_error(self, prompt_id: str, prompt: dict, current_outputs: Iterable[str],
                               executed: Iterable[str], error: dict, ex: BaseException) -> None:
        """Report a failed (or interrupted) node, ComfyUI's message shapes."""
        from compat.devices import InterruptProcessingException

        node_id = error["node_id"]
        message = {"prompt_id": prompt_id, "node_id": node_id, "node_type": prompt[node_id]["class_type"],
                   "executed": list(executed)}
        if isinstance(ex, InterruptProcessingException):
            self.add_message("execution_interrupted", message, broadcast=True)
            return
        message.update({"exception_message": error["exception_message"], "exception_type": error["exception_type"],
                        "traceback": error["traceback"], "current_inputs": error["current_inputs"],
                        "current_outputs": list(current_outputs)})
        self.add_message("execution_error", message, broadcast=False)

    def execute(self, prompt: dict, prompt_id: str, extra_data: Mapping[str, Any] | None = None,
                execute_outputs: Iterable[str] = ()) -> None:
        asyncio.run(self.execute_async(prompt, prompt_id, extra_data, execute_outputs))

    async def execute_async(self, prompt: dict, prompt_id: str, extra_data: Mapping[str, Any] | None = None,
                            execute_outputs: Iterable[str] = ()) -> None:
        """Run the nodes `execute_outputs` need; every engine message goes through
        `add_message` (errors and interrupts through `handle_execution_error`).

        Called back from a pack's replacement of `execute` / `execute_async` that the server's
        prompt is running through (compat/execution_routes.py), it runs that prompt instead,
        on the server's executor, and takes its outcome."""
        from compat.execution_routes import routed_prompt
        from graph.context import Interrupted

        routed = routed_prompt.get()
        if routed is not None and routed.executor is self and not routed.started:
            routed.started = True
            outcome = await asyncio.wrap_future(routed.start())
            self.success = outcome.status == "success"
            self.status_messages = list(outcome.messages)
            self.history_result = {"outputs": outcome.ui_outputs, "meta": outcome.meta}
            return

        extra_data = dict(extra_data or {})
        self.client_id = extra_data.get("client_id")
        self.status_messages = []
        current_outputs = sorted(str(k) for k in prompt)

        def sink(event: Any) -> None:
            kind, data = event.type, dict(event.data)
            data.pop("timestamp", None)
            if kind == "preview":
                return  # preview frames go to the running node's client through its ProgressBar
            if kind in ("execution_error", "execution_interrupted"):
                ex = Interrupted() if kind == "execution_interrupted" else NodeExecutionError(data)
                self.handle_execution_error(prompt_id, prompt, current_outputs, data.get("executed", []), data, ex)
                return
            self.add_message(kind, data, broadcast=False)

        outcome = await self._executor.execute(prompt, prompt_id, outputs=list(execute_outputs),
                                               extra_data=extra_data, sink=sink)
        self.success = outcome.status == "success"
        self.history_result = {"outputs": outcome.ui_outputs, "meta": outcome.meta}


_BUILT_IN_PROMPT_METHODS = {"execute": PromptExecutor.__dict__["execute"],
                             "execute_async": PromptExecutor.__dict__["execute_async"]}


def prompt_executor_replaced() -> bool:
    """Whether a pack replaced `PromptExecutor.execute` or `execute_async` (the class is ComfyUI's,
    one per process, and packs assign its attributes): the server's prompts then run through
    them (compat/execution_routes.py)."""
    return any(PromptExecutor.__dict__.get(name) is not method for name, method in _BUILT_IN_PROMPT_METHODS.items())


# -- one node's calls and one node step, ComfyUI's way (and the executor's routes) ---------------
async def resolve_map_node_over_list_results(results: list) -> list:
    """ComfyUI's: the per-call results with every task awaited (the first failed task raises)."""
    remaining = [r for r in results if isinstance(r, asyncio.Task) and not r.done()]
    if remaining:
        done, _pending = await asyncio.wait(remaining)
        for task in done:
            if task.exception() is not None:
                raise task.exception()
    return [r.result() if isinstance(r, asyncio.Task) else r for r in results]


async def _async_map_node_over_list(prompt_id: str, unique_id: str, obj: Any, input_data_all: Mapping[str, Any],
                                    func: str, allow_interrupt: bool = False, execution_block_cb: Any = None,
                                    pre_execute_cb: Any = None, v3_data: Any = None) -> list:
    """ComfyUI's `execution._async_map_node_over_list`: the result of `getattr(obj, func)` for each
    input slice (see the module docstring), a still-running async call as its task.

    Called (through a pack's wrapper) for the node the executor is routing, with that node's
    `obj` and `func`, it makes the executor's own calls over `input_data_all` (node context,
    hooks, GraphBuilder prefix, blocked calls, out-of-memory retry, as unrouted)."""
    from compat.execution_routes import routed_calls

    routed = routed_calls.get()
    if routed is not None and routed.unique_id == unique_id and routed.obj is obj and routed.func == func:
        return list(await routed.run({k: list(v) for k, v in input_data_all.items()}))
    from compat.execution_context import CurrentNodeContext
    from compat.node_facades import before_node_execution
    from graph.inputs import blocker_in, call_slices
    from graph.invoke import start_async

    input_is_list = bool(getattr(obj, "INPUT_IS_LIST", False))
    values = {k: list(v) for k, v in input_data_all.items()}
    # ComfyUI gives the call no index (and calls no pre_execute_cb) when no input has a value.
    indexed = input_is_list or any(len(v) for v in values.values())
    results: list = []
    for index, kwargs in enumerate(call_slices(values, input_is_list)):
        if allow_interrupt:
            before_node_execution()
        block = blocker_in(kwargs, input_is_list)
        if block is not None:
            results.append(execution_block_cb(block) if execution_block_cb is not None else block)
            continue
        call_index = index if indexed else None
        if pre_execute_cb is not None and call_index is not None:
            pre_execute_cb(call_index)
        fn = getattr(obj, func)
        with CurrentNodeContext(prompt_id, unique_id, call_index):
            if inspect.iscoroutinefunction(fn):
                task = start_async(fn, kwargs)  # a copy of this context: it sees the node context
                await asyncio.sleep(0)  # let it finish at once if it can, as ComfyUI does
                results.append(task.result() if task.done() else task)
            else:
                results.append(fn(**kwargs))
    return results


async def execute(server: Any, dynprompt: Any, caches: Any, current_item: str, extra_data: Mapping[str, Any],
                  executed: Any, prompt_id: str, execution_list: Any, pending_subgraph_results: Any = None,
                  pending_async_nodes: Any = None, ui_outputs: Any = None, asset_manager: Any = None
                  ) -> tuple[ExecutionResult, dict | None, BaseException | None]:
    """ComfyUI's `execution.execute`: one step of node `current_item` of the running prompt,
    answered as `(ExecutionResult, error_details, exception)`; on success the node joins
    `executed`. The step is the executor's (graph/node_step.py): this runs the node the
    executor handed to the session's `execute` (a pack's wrapper calling its original)."""
    from compat.execution_routes import routed_step

    routed = routed_step.get()
    if routed is None or routed.node_id != current_item:
        raise RuntimeError(f"execution.execute: node {current_item!r} is not the node the executor is running "
                           f"through execution.execute; this engine's executor runs prompts "
                           f"(execution.PromptExecutor, or the server's queue)")
    result = await routed.run()
    routed.results.append(result)
    if result.status == "failure":
        return ExecutionResult.FAILURE, result.error, result.exception
    if result.status == "pending":
        return ExecutionResult.PENDING, None, None
    if result.entry is not None and hasattr(executed, "add"):
        executed.add(current_item)
    return ExecutionResult.SUCCESS, None, None


# -- the session's routes ---------------------------------------------------------------------
class SessionRoutes:
    """An executor's `routes` provider for a compat session (graph/settings.py; the hosts pass
    `Executor(..., routes=SessionRoutes(session))`), asked as each prompt starts: routes through
    what packs replaced of ComfyUI's `PromptExecutor.execute` / `execute_async`,
    `execution.execute`, `execution._async_map_node_over_list` and `execution.get_input_data`
    (compat/execution_routes.py `node_routes`), or None when nothing is, and the executor runs unrouted.

    `prompts`: whether to route whole prompts; a `PromptExecutor`'s own executor does not (the
    pack's `execute` is already running around it). The host's `PromptExecutor` object, ComfyUI's
    prompt worker's one instance that the pack's `execute` receives as `self`, lives here."""

    def __init__(self, session: Any, *, prompts: bool = True) -> None:
        self.session = session
        self.prompts = prompts
        self._prompt_executor: Any = None

    def prompt_executor(self) -> Any:
        from compat.execution_routes import prompt_server_of

        if self._prompt_executor is None:
            with self.session.activate():  # it builds its own executor over the session's registry
                self._prompt_executor = PromptExecutor(prompt_server_of(self.session))
        return self._prompt_executor

    def __call__(self) -> Any:
        from compat.execution_routes import node_routes

        points = self.session.extension_points
        # a "replacement" that is the built-in itself changes nothing
        node_execute = _replaced(points.node_execute, execute)
        map_calls = _replaced(points.map_node_over_list, _async_map_node_over_list)
        input_data = _replaced(points.node_input_data, get_input_data)
        prompts = self.prompts and prompt_executor_replaced()
        if node_execute is None and map_calls is None and input_data is None and not prompts:
            return None
        return node_routes(self.session, node_execute, map_calls, input_data,
                           self.prompt_executor if prompts else None)


def _replaced(value: Any, built_in: Any) -> Any:
    return None if value is None or value is built_in else value


# -- comfy_execution.validation -------------------------------------------------------------------
def validate_node_input(received_type: Any, input_type: Any, strict: bool = False) -> bool:
    """ComfyUI's `comfy_execution.validation.validate_node_input`: whether an output of
    `received_type` may feed an input of `input_type`: equal (by `!=`, so a pack's `str` subclass
    overriding `__ne__` decides), or, for strings, comma-separated unions that overlap (`strict`:
    every received member among the input's). The server's own check is graph/types.py's
    `types_match` (which also lets `*` and V3 match-types through, as ComfyUI's editor does)."""
    if not received_type != input_type:  # noqa: SIM202 -- keeps a pack's overridden __ne__ in charge
        return True
    if not isinstance(received_type, str) or not isinstance(input_type, str):
        return False
    received = {part.strip() for part in received_type.split(",")}
    accepted = {part.strip() for part in input_type.split(",")}
    return received <= accepted if strict else bool(received & accepted)

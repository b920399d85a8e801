"""The executor: runs a validated prompt, reusing cached outputs, emitting ComfyUI's events.

`Executor` holds what survives between prompts (its `RunSettings`, the output cache, V1 node
instances); each `execute()` builds a `Run` (graph/run.py) from those that holds one prompt's
state. Imports point one way: executor -> run -> node_step. Semantics follow
ComfyUI's `execution.py: PromptExecutor` (reference/comfyui-contract.md §5), see graph/run.py.

Threads: like ComfyUI's prompt worker, each prompt runs on the executor's worker thread and its
event loop (graph/worker.py; kept between prompts), in a copy of the caller's context variables. Sync node code therefore
never blocks the caller's (server's) loop; async nodes run concurrently on the prompt's loop.
Events reach `sink` on the caller's loop, in order (graph/relay.py), all of them before
`execute()` returns. Cancelling `execute()` stops the prompt before its next node.
"""
from __future__ import annotations

import asyncio
import contextvars
import weakref
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

from graph.cache import CacheConfig, make_cache
from graph.errors import GraphError
from graph.events import Event
from graph.invoke import BeforeNodeCall, Recover
from graph.objects import ObjectCache
from graph.outcome import ExecutionOutcome
from graph.registry import Registry
from graph.relay import EventRelay
from graph.run import Run
from graph.settings import RoutesProvider, RunSettings
from graph.worker import PromptWorker

Sink = Callable[[Event], Any]


class _Stop:
    """The interrupt the run sees: the caller's flag, or the caller having cancelled execute()."""

    def __init__(self, interrupt: Any) -> None:
        self._interrupt = interrupt
        self.cancelled = False

    def is_set(self) -> bool:
        return self.cancelled or (self._interrupt is not None and bool(self._interrupt.is_set()))


class Executor:
    """Runs prompts against a registry; one prompt at a time per executor."""

    def __init__(self, registry: Registry, *, cache: CacheConfig = CacheConfig(), env: Any = None,
                 before_node_call: Sequence[BeforeNodeCall] = (), progress_state: str = "all",
                 recover: Recover | None = None, value_keys: bool = True,
                 routes: RoutesProvider | None = None) -> None:
        """`progress_state`: "all" (ComfyUI's messages) or "active" (linear; see graph/progress.py).

        `value_keys`: reuse results of equal input values below model handles
        (graph/value_keys.py); False keys on structure alone, exactly as ComfyUI does.

        `recover(exc) -> bool`: asked when a node's main call raises (never for `Interrupted`);
        True means "I freed what I could, retry": the call runs once more and a second failure
        is reported as usual (graph/invoke.py). The server passes its memory manager's
        `recover`, which unloads models on out-of-memory errors.

        `routes() -> NodeRoutes | None`: asked as each prompt starts; routes that lead each node
        step and each node's calls through the host (graph/settings.py; compat's, when a pack
        replaced ComfyUI's `execution.execute` / `_async_map_node_over_list`).
        """
        self.settings = RunSettings(registry, env, tuple(before_node_call), recover, progress_state, value_keys,
                                    routes)
        self.cache_config = cache
        self.outputs = make_cache(cache)
        self.objects = ObjectCache()
        self._running = False
        self._worker = PromptWorker(f"graph-prompt-{id(self):x}")
        # An executor dropped without close() still lets its idle thread go at once.
        weakref.finalize(self, self._worker.close)

    @property
    def registry(self) -> Registry:
        return self.settings.registry

    @property
    def env(self) -> Any:
        """The host's environment object, handed to node code (`graph.context.current().env`)."""
        return self.settings.env

    @property
    def busy(self) -> bool:
        """True while a prompt runs (also after a cancelled `execute()`, until the run stops)."""
        return self._running

    def reset(self) -> None:
        """Drop every cached output and node instance (ComfyUI's /free free_memory)."""
        self.outputs.clear()
        self.objects.clear()

    async def execute(self, prompt: Mapping[str, dict], prompt_id: str, *, outputs: Iterable[str],
                      extra_data: Mapping[str, Any] | None = None, sink: Sink | None = None,
                      interrupt: Any = None, observe: Callable[[Event], Event] | None = None) -> ExecutionOutcome:
        """Run the nodes that `outputs` need; see graph/run.py for the semantics. `observe(event)`:
        called on the run's thread as each event is emitted, before it is queued for `sink` (which
        gets what it returns): a host that must hand events to code in step with the nodes."""
        if self._running:
            raise GraphError("this Executor is already running a prompt; use one executor per worker")
        outputs = list(outputs)
        missing = [o for o in outputs if o not in prompt]
        if missing:
            raise GraphError(f"outputs {missing} are not nodes of prompt {prompt_id}")
        stop = _Stop(interrupt)
        relay = EventRelay(asyncio.get_running_loop(), sink) if sink is not None else None
        emit = relay.put if relay is not None else None
        if emit is not None and observe is not None:
            queue = emit

            def emit(event: Event) -> None:
                queue(observe(event))

        run = Run(self.settings, self.outputs, self.objects, dict(prompt), prompt_id,
                  extra_data=dict(extra_data or {}), emit=emit, interrupt=stop)
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            self._running = False

            def resolve() -> None:
                if not future.done():
                    future.set_exception(error) if error is not None else future.set_result(result)

            if relay is not None:
                # every event the run queued reaches the sink before we return (in batches: a big
                # prompt's backlog in one callback held the loop; graph/relay.py)
                relay.flush_then(resolve)
            else:
                resolve()

        def done(result: Any, error: BaseException | None) -> None:
            try:
                loop.call_soon_threadsafe(settle, result, error)
            except RuntimeError:  # the caller's loop is closed: nobody waits for the result
                self._running = False

        self._running = True
        self._worker.submit(run.run(outputs), contextvars.copy_context(), done)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            stop.cancelled = True
            raise

    def close(self) -> None:
        """Let the prompt thread go (after the running prompt, if any); a later prompt restarts it."""
        self._worker.close()

    def cache_keys(self) -> set[Hashable]:
        """The signatures currently cached (for tests and diagnostics)."""
        return self.outputs.keys()

"""The queue worker (`QueueWorker`): one asyncio task that runs queued prompts one at a time.

For each prompt: executor events go to the owning client (web/prompt_routing.py), then the
history entry is written, `status` is broadcast, and only then `executing {node: null}` is sent
(web/prompt_run.py, shared with the Ray dispatcher in web/ray_backend/).

Sync node code runs in the executor's worker threads, so the event loop keeps serving routes
and sockets while a prompt runs. An exception escaping the executor (a bug, not a node error)
is recorded as an `execution_error` and the worker carries on.

The worker is given the parts of the server it drives (queue, hub, executor, store, memory
manager, preview size), not the whole `web.state.AppState`, which holds the worker in turn.

While it runs, the cyclic collector's full passes happen after a prompt has been stored (or
while idle), not in the middle of a big prompt (web/collector.py, issue 34).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from graph.progress import ProgressPacing
from web.collector import CollectorPacing, release_in_pieces
from web.prompt_routing import PromptRouting
from web.prompt_run import PromptRun
from web.queue_item import QueueItem, now_ms

if TYPE_CHECKING:  # annotations only
    from comfy_core.memory import MemoryManager
    from graph.executor import Executor
    from web.asset_outputs import OutputAssets
    from web.hub import WebSocketHub
    from web.prompt_queue import PromptQueue
    from web.store import PromptStore

log = logging.getLogger(__name__)


@dataclass
class FreeRequest:
    """What POST /free asked for; acted on between prompts."""

    unload_models: bool = False
    free_memory: bool = False


def apply_free(executor: "Executor", memory: "MemoryManager | None", request: FreeRequest) -> None:
    """Unload models and/or drop every executor cache (ComfyUI's /free flags): `free_all`
    offloads every model the memory manager tracks."""
    if request.unload_models and memory is not None:
        memory.free_all()
    if request.free_memory:
        executor.reset()
        if memory is not None:
            memory.free_all()


class QueueWorker(PromptRouting):
    """Runs `queue` until stopped (not graph.worker.PromptWorker, the thread node code runs on)."""

    def __init__(self, queue: "PromptQueue", hub: "WebSocketHub", executor: "Executor", store: "PromptStore", *,
                 memory: "MemoryManager | None" = None, preview_size: int = 512,
                 progress_pacing: ProgressPacing = ProgressPacing(), assets: "OutputAssets | None" = None) -> None:
        self.queue = queue
        self.hub = hub
        self.executor = executor
        self.store = store
        self.memory = memory
        self.preview_size = preview_size  # a preview frame's longest side when the node gave none
        self.progress_pacing = progress_pacing
        self.assets = assets  # --enable-assets: outputs become assets (web/asset_outputs.py)
        self.free_request: FreeRequest | None = None
        self._task: asyncio.Task | None = None
        self._current: asyncio.Future | None = None
        self.releasing: asyncio.Future | None = None  # the last prompt's data being freed (tests wait for it)
        # busy while a prompt runs or its data is still being taken apart (a pass would walk it)
        self.collector = CollectorPacing(
            lambda: queue.running is not None or (self.releasing is not None and not self.releasing.done()))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="queue-worker")
        self.collector.start()

    @property
    def started(self) -> bool:
        """True from `start()` until `stop()`: only then does the worker take queued prompts."""
        return self._task is not None

    async def stop(self, timeout: float = 10.0) -> None:
        """Take no more prompts; interrupt the running one and let it record itself (as
        interrupted) in the history, waiting at most `timeout` seconds."""
        self.collector.stop()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        current, running = self._current, self.queue.running
        if current is not None and not current.done():
            if running is not None:
                running.interrupt.set()
            done, _ = await asyncio.wait({current}, timeout=timeout)
            if not done:
                current.cancel()
                log.warning("prompt %s did not stop within %.0f s of shutdown", running and running.prompt_id,
                            timeout)

    def request_free_flags(self, *, unload_models: bool = False, free_memory: bool = False) -> None:
        """`request_free` from ComfyUI's queue flags (packs' `prompt_queue.set_flag`)."""
        self.request_free(FreeRequest(unload_models=unload_models, free_memory=free_memory))

    def request_free(self, request: FreeRequest) -> None:
        """Free now when idle, else after the running prompt."""
        if self.queue.running is None:
            apply_free(self.executor, self.memory, request)
        else:
            self.free_request = request

    async def _run(self) -> None:
        while True:
            item = await self.queue.get()
            # Shielded: stopping the worker must not tear a prompt in half (see `stop`).
            self._current = asyncio.ensure_future(self.run_item(item))
            try:
                await asyncio.shield(self._current)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 -- the worker must outlive any one prompt
                log.exception("prompt %s: the worker failed while finishing it", item.prompt_id)
                self.queue.task_done()
                self.hub.end_prompt(item.prompt_id)
            if self.free_request is not None:
                request, self.free_request = self.free_request, None
                apply_free(self.executor, self.memory, request)
            # The prompt is stored: its data goes, in a worker thread and in pieces (freeing a big
            # prompt or body at once held the event loop), and then a full pass if one is due.
            leftovers = [item.prompt, item.extra_data]
            item = self._current = None
            self._release(leftovers)

    def _release(self, leftovers: list) -> None:
        released = asyncio.get_running_loop().run_in_executor(None, release_in_pieces, leftovers)
        self.releasing = released

        def then(future: asyncio.Future) -> None:
            if not future.cancelled() and future.exception() is not None:
                log.error("freeing a prompt's data failed", exc_info=future.exception())
            self.collector.quiet_point()

        released.add_done_callback(then)

    async def run_item(self, item: QueueItem) -> None:
        hub = self.hub
        hub.begin_prompt(item.client_id, item.prompt_id)
        run = PromptRun(self, item, start=self.queue.running_since or now_ms(), pacing=self.progress_pacing,
                        assets=self.assets)
        try:
            outcome = await self.executor.execute(
                item.prompt, item.prompt_id, outputs=list(item.outputs), extra_data=item.extra_data,
                sink=run.sink, interrupt=item.interrupt, observe=run.observe)
            result = run.result_of(outcome)
        except Exception as exc:  # noqa: BLE001 -- an executor bug must not stop the server
            log.exception("prompt %s: executor failed", item.prompt_id)
            result = run.failed(exc)
        await run.finish_async(result, self.store, self.queue)
        hub.end_prompt(item.prompt_id)

"""The queue worker (`QueueWorker`): one asyncio task that runs queued prompts one at a time.

For each prompt: executor events go to the owning client (previews as binary frames;
`progress_state` paced by `graph.progress.ProgressCoalescer`, the latest map always sent before
the prompt's final events), then the history entry is written (durably, together with the prompt leaving the queue), `status` is
broadcast, and only then `executing {node: null}` is sent, so a client that reads /history on
that message always finds the entry (ComfyUI's order).

Sync node code runs in the executor's worker threads, so the event loop keeps serving routes
and sockets while a prompt runs. An exception escaping the executor (a bug, not a node error)
is recorded as an `execution_error` and the worker carries on.

The worker is given the parts of the server it drives (queue, hub, executor, store, memory
manager, preview size), not the whole `web.state.AppState`, which holds the worker in turn.
"""
from __future__ import annotations

import asyncio
import logging
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graph.events import (EXECUTING, EXECUTION_INTERRUPTED, PREVIEW, PROGRESS_STATE, STATUS_MESSAGE_TYPES,
                          Event, execution_error)
from graph.progress import FLUSH_BEFORE, ProgressCoalescer, ProgressPacing
from web.protocol import encode_image, preview_frame, preview_frame_with_metadata
from web.queue_item import QueueItem, now_ms

if TYPE_CHECKING:  # annotations only
    from comfy_core.memory import MemoryManager
    from graph.executor import Executor
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


class QueueWorker:
    """Runs `queue` until stopped (not graph.worker.PromptWorker, the thread node code runs on)."""

    def __init__(self, queue: "PromptQueue", hub: "WebSocketHub", executor: "Executor", store: "PromptStore", *,
                 memory: "MemoryManager | None" = None, preview_size: int = 512,
                 progress_pacing: ProgressPacing = ProgressPacing()) -> None:
        self.queue = queue
        self.hub = hub
        self.executor = executor
        self.store = store
        self.memory = memory
        self.preview_size = preview_size  # a preview frame's longest side when the node gave none
        self.progress_pacing = progress_pacing
        self.free_request: FreeRequest | None = None
        self._task: asyncio.Task | None = None
        self._current: asyncio.Future | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="queue-worker")

    @property
    def started(self) -> bool:
        """True from `start()` until `stop()`: only then does the worker take queued prompts."""
        return self._task is not None

    async def stop(self, timeout: float = 10.0) -> None:
        """Take no more prompts; interrupt the running one and let it record itself (as
        interrupted) in the history, waiting at most `timeout` seconds."""
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
                self.hub.end_prompt()
            if self.free_request is not None:
                request, self.free_request = self.free_request, None
                apply_free(self.executor, self.memory, request)

    async def run_item(self, item: QueueItem) -> None:
        hub = self.hub
        client_id = item.client_id
        hub.begin_prompt(client_id, item.prompt_id)
        start = self.queue.running_since or now_ms()
        recorded: list[tuple[str, Any]] = []
        progress = None
        if client_id is not None:
            progress = ProgressCoalescer(lambda e: hub.send(e.type, e.data, client_id),
                                         asyncio.get_running_loop().call_later, pacing=self.progress_pacing)

        def sink(event: Event) -> None:
            # Runs on the server's loop (graph/relay.py delivers the executor's events there).
            if event.type in STATUS_MESSAGE_TYPES:
                recorded.append((event.type, event.data))  # kept in case the executor itself fails
            if progress is not None:
                if event.type == PROGRESS_STATE:
                    progress.push(event)
                    return
                if event.type in FLUSH_BEFORE:
                    progress.flush()
            self._route(event, item, client_id)

        try:
            outcome = await self.executor.execute(
                item.prompt, item.prompt_id, outputs=list(item.outputs), extra_data=item.extra_data,
                sink=sink, interrupt=item.interrupt)
            status, ui_outputs, meta = outcome.status, outcome.ui_outputs, outcome.meta
            messages = [list(m) for m in outcome.messages]
        except Exception as exc:  # noqa: BLE001 -- an executor bug must not stop the server
            log.exception("prompt %s: executor failed", item.prompt_id)
            event = execution_error(item.prompt_id, None, None, [], exception_message=str(exc),
                                    exception_type=f"{type(exc).__module__}.{type(exc).__qualname__}",
                                    traceback=traceback.format_exception(exc), current_inputs={},
                                    current_outputs=[])
            if progress is not None:
                progress.flush()
            self._route(event, item, client_id)
            status, ui_outputs, meta = "error", {}, {}
            messages = [[e, d] for e, d in recorded] + [[event.type, event.data]]

        # ComfyUI's terminal line per prompt (people watch for it; some scripts grep it), logged
        # before the history entry exists so that whoever sees the entry can see the line.
        log.info("Prompt executed in %.2f seconds", (now_ms() - start) / 1000)
        entry = {
            "prompt": item.wire(),
            "outputs": ui_outputs,
            "status": {"status_str": "success" if status == "success" else "error",
                       "completed": status == "success", "messages": messages},
            "meta": meta,
        }
        if progress is not None:
            progress.close()  # anything still held goes out before `executing null`
        self.store.finish(item, entry, status, start, now_ms())
        self.queue.task_done()  # broadcasts `status`
        if client_id is not None:
            hub.send(EXECUTING, {"node": None, "prompt_id": item.prompt_id}, client_id)
        hub.end_prompt()

    # -- events ------------------------------------------------------------------------------
    def _route(self, event: Event, item: QueueItem, client_id: str | None) -> None:
        """Deliver one executor event; may run on a node thread."""
        hub = self.hub
        if event.type == PREVIEW:
            if client_id is not None:
                self._send_preview(event.data, client_id)
            return
        if event.type == EXECUTING:
            self._on_loop(hub.note_executing, (event.data or {}).get("node"))
        if client_id is None:
            # ComfyUI: without a client, only `execution_interrupted` is sent (to everyone).
            if event.type == EXECUTION_INTERRUPTED:
                hub.send_threadsafe(event.type, event.data, None)
            return
        hub.send_threadsafe(event.type, event.data, client_id)

    def _send_preview(self, data: dict, client_id: str | None) -> None:
        self._on_loop(self._queue_preview, data, client_id)

    def send_preview(self, data: dict, client_id: str | None) -> None:
        """A preview image (`data` as the executor's `preview` event: image, format, max_size,
        node ids) to `client_id` (None: every client), encoded off the loop. Thread-safe."""
        self._send_preview(data, client_id)

    def _queue_preview(self, data: dict, client_id: str | None) -> None:
        """Encode off the event loop (a full-size PNG takes a while) but keep the frame's place
        in the client's message order: the outbox holds the future until it is done."""
        hub = self.hub
        conn = hub.client(client_id)
        with_meta = conn is not None and conn.supports_preview_metadata
        future = asyncio.get_running_loop().run_in_executor(None, self._encode_frame, data, with_meta)
        hub.send_raw(future, client_id)

    def _encode_frame(self, data: dict, with_meta: bool) -> bytes | None:
        fmt = str(data.get("format", "JPEG")).upper()
        max_size = data.get("max_size", self.preview_size)
        try:
            encoded = encode_image(data.get("image"), fmt, max_size)
        except Exception:  # noqa: BLE001 -- a broken preview must not fail the prompt
            log.exception("prompt %s: preview could not be encoded", data.get("prompt_id"))
            return None
        return preview_frame_with_metadata(encoded, fmt, data) if with_meta else preview_frame(encoded, fmt)

    def _on_loop(self, fn: Any, *args: Any) -> None:
        # Node threads must not touch the hub directly; FIFO scheduling keeps message order.
        self.hub.call_on_loop(fn, *args)

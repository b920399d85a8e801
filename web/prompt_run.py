"""One prompt's run as the server sees it, whoever executes it: the event sink (progress_state
paced by `graph.progress.ProgressCoalescer`, the latest map always sent before the prompt's
final events), the `execution_error` for an executor that failed outright, and the ending in
ComfyUI's order: history entry stored (durably, with the prompt leaving the queue), `status`
broadcast, and only then `executing {node: null}`, so a client that reads /history on that
message always finds the entry. With --enable-assets the files in each `executed` output are
registered as assets in a worker thread (web/asset_outputs.py); the message waits in its place
in the client's queue for the ids, and the history entry gets the same enriched outputs.

Used by the embedded queue worker (web/worker.py) and the Ray dispatcher (web/ray_backend/).
"""
from __future__ import annotations

import asyncio
import logging
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graph.events import EXECUTED, EXECUTING, PREVIEW, PROGRESS_STATE, STATUS_MESSAGE_TYPES, Event, execution_error
from graph.progress import FLUSH_BEFORE, ProgressCoalescer, ProgressPacing
from web.protocol import json_message
from web.queue_item import QueueItem, now_ms

if TYPE_CHECKING:  # annotations only
    from graph.outcome import ExecutionOutcome
    from web.asset_outputs import OutputAssets
    from web.prompt_queue import PromptQueue
    from web.prompt_routing import PromptRouting
    from web.store import PromptStore

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What goes into the history entry."""

    status: str  # "success" | "error" | "interrupted"
    ui_outputs: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    messages: list = field(default_factory=list)


class PromptRun:
    def __init__(self, router: "PromptRouting", item: QueueItem, *, start: int,
                 pacing: ProgressPacing = ProgressPacing(), assets: "OutputAssets | None" = None) -> None:
        self.router = router
        self.assets = assets  # None: assets off, outputs go out as the nodes gave them
        self.asset_outputs: dict[str, asyncio.Future] = {}  # node -> its output with asset ids
        self.item = item
        self.client_id = item.client_id
        self.start = start
        self.recorded: list[tuple[str, Any]] = []  # kept in case the executor itself fails
        self.progress: ProgressCoalescer | None = None
        if self.client_id is not None:
            hub, client_id = router.hub, self.client_id
            # send_event: the map is built and encoded only for a client with a socket (web/hub.py)
            self.progress = ProgressCoalescer(lambda e: hub.send_event(e, client_id),
                                              asyncio.get_running_loop().call_later, pacing=pacing)

    def observe(self, event: Event) -> Event:
        """On the prompt's own thread, as the executor emits `event`: a pack's replacement of
        `PromptServer.send_sync` gets each JSON event for the client now, in step with the nodes,
        as ComfyUI's executor sends them (a timing pack reads the clock when `executing` arrives);
        its call of the original sends it, so the event comes back marked `delivered`. A
        replacement that raises is logged and the event goes out as usual."""
        if self.client_id is None or event.type in (PREVIEW, PROGRESS_STATE):
            return event
        if self.router.relay_event(event.type, event.data, self.client_id):
            return Event(event.type, event.data, delivered=True)
        return event

    def sink(self, event: Event) -> None:
        """Runs on the server's loop (graph/relay.py, or the Ray stream, delivers events there)."""
        if event.type == EXECUTED and self.router.hub.on_outputs is not None:
            self.router.hub.on_outputs(self.item.owner, event.data)  # --users: who may /view the files
        if event.type in STATUS_MESSAGE_TYPES:
            self.recorded.append((event.type, event.data))
        if self.progress is not None:
            if event.type == PROGRESS_STATE:
                self.progress.push(event)
                return
            if event.type in FLUSH_BEFORE:
                self.progress.flush()
        if event.type == EXECUTED and self.assets is not None and isinstance((event.data or {}).get("output"), dict):
            self._register_outputs(event.data)
            return
        self.router._route(event, self.item, self.client_id)

    def _register_outputs(self, data: dict) -> None:
        """Register the node's output files off the loop; the `executed` message is queued now,
        in its place, and sent once it carries the asset ids."""
        loop = asyncio.get_running_loop()
        output, prompt_id = data["output"], self.item.prompt_id
        enriched = loop.run_in_executor(None, self.assets.enrich, output, prompt_id)
        self.asset_outputs[str(data.get("node"))] = enriched
        if self.client_id is None:
            return  # registered all the same (the history entry carries the ids), as ComfyUI

        async def message() -> str:
            try:
                sent = await enriched
            except Exception:  # noqa: BLE001 -- the message goes out without ids rather than not at all
                log.exception("prompt %s: registering outputs as assets failed", prompt_id)
                sent = output
            return json_message(EXECUTED, {**data, "output": sent})

        self.router.hub.send_raw(loop.create_task(message()), self.client_id)

    async def _with_asset_ids(self, result: RunResult) -> RunResult:
        """`result` with each registered node's output replaced by its copy with asset ids."""
        if not self.asset_outputs or not result.ui_outputs:
            return result
        outputs = dict(result.ui_outputs)
        for node_id, future in self.asset_outputs.items():
            try:
                enriched = await future
            except Exception:  # noqa: BLE001 -- logged by the message; the entry keeps the plain output
                continue
            if node_id in outputs:
                outputs[node_id] = enriched
        return RunResult(result.status, outputs, result.meta, result.messages)

    @staticmethod
    def result_of(outcome: "ExecutionOutcome") -> RunResult:
        return RunResult(outcome.status, outcome.ui_outputs, outcome.meta, [list(m) for m in outcome.messages])

    def failed(self, exc: BaseException, *, node_id: str | None = None, node_type: str | None = None) -> RunResult:
        """The prompt ended without an outcome (an executor bug, a lost worker): an
        `execution_error` naming `exc` goes to the client and into the history."""
        item = self.item
        # An error that stands for one raised elsewhere (a Ray worker's) carries that one's type and traceback.
        exception_type = getattr(exc, "exception_type", None) or f"{type(exc).__module__}.{type(exc).__qualname__}"
        trace = getattr(exc, "worker_traceback", None) or traceback.format_exception(exc)
        event = execution_error(item.prompt_id, node_id, node_type, [], exception_message=str(exc),
                                exception_type=exception_type, traceback=trace, current_inputs={},
                                current_outputs=[])
        if self.progress is not None:
            self.progress.flush()
        self.router._route(event, item, self.client_id)
        return RunResult("error", {}, {}, [[e, d] for e, d in self.recorded] + [[event.type, event.data]])

    def _before_store(self, result: RunResult) -> dict:
        item = self.item
        # ComfyUI's terminal line per prompt (people watch for it; some scripts grep it), logged
        # before the history entry exists so that whoever sees the entry can see the line.
        log.info("Prompt executed in %.2f seconds", (now_ms() - self.start) / 1000)
        entry = {
            "prompt": item.wire(),
            "outputs": result.ui_outputs,
            "status": {"status_str": "success" if result.status == "success" else "error",
                       "completed": result.status == "success", "messages": result.messages},
            "meta": result.meta,
        }
        if self.progress is not None:
            self.progress.close()  # anything still held goes out before `executing null`
        return entry

    def _after_store(self, queue: "PromptQueue") -> None:
        item = self.item
        queue.task_done(item.prompt_id)  # broadcasts `status`
        if self.client_id is not None:
            self.router.send_event(EXECUTING, {"node": None, "prompt_id": item.prompt_id}, self.client_id)

    def finish(self, result: RunResult, store: "PromptStore", queue: "PromptQueue") -> None:
        entry = self._before_store(result)
        store.finish(self.item, entry, result.status, self.start, now_ms())
        self._after_store(queue)

    async def finish_async(self, result: RunResult, store: "PromptStore", queue: "PromptQueue") -> None:
        """`finish`, with the history entry (the whole prompt: megabytes for a big one) encoded
        and written in a worker thread, so the event loop keeps serving meanwhile (issue 34)."""
        result = await self._with_asset_ids(result)
        entry = self._before_store(result)
        await asyncio.to_thread(store.finish, self.item, entry, result.status, self.start, now_ms())
        self._after_store(queue)

    def abandon(self) -> None:
        """The run ends without a history entry (its prompt was queued again): stop pacing."""
        if self.progress is not None:
            self.progress.close()

"""A job as `/api/v2` shows it, read from the queue, the history and the v2 rows.

Status (v2's lifecycle queued -> running -> succeeded | failed, canceling -> canceled):
  pending in the queue            queued, with `queue_position` (1 = next)
  running                         running, or canceling once a v2 cancel interrupted it
  history success / error / interrupted   succeeded / failed / canceled
  removed while pending by a v2 cancel    canceled (the v2 row remembers it; no history entry)
Every prompt is a job, whoever submitted it (`POST /prompt`, the editor, v2).

`locate` reads the queue (the event loop owns it) and the history (SQLite: call it from the loop
and let it read off the loop); `render` builds the `Job` body and is blocking (outputs become
assets): call it in a worker thread.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from web.queue_item import public_extra_data
from web.v2.shapes import FINISHED_STATUS, NO_EXPIRY, iso_ms, job_urls
from web.v2.store import V2Job

if TYPE_CHECKING:
    from web.state import AppState
    from web.store import HistoryRecord
    from web.v2.assets import V2Assets
    from web.v2.bridge import JobBridge
    from web.v2.store import V2Store


@dataclass
class JobView:
    id: str
    status: str
    created_ms: int
    started_ms: int | None = None
    completed_ms: int | None = None
    queue_position: int | None = None
    prompt: dict = field(default_factory=dict)
    extra_data: dict = field(default_factory=dict)
    ui_outputs: dict = field(default_factory=dict)
    error: dict | None = None
    v2: V2Job | None = None

    @property
    def update_ms(self) -> int:
        return self.completed_ms or self.started_ms or self.created_ms


def _error_of(messages: Any) -> dict | None:
    """v2's JobError from a history entry's `execution_error` message."""
    for message in messages or []:
        if isinstance(message, (list, tuple)) and len(message) == 2 and message[0] == "execution_error" \
                and isinstance(message[1], dict):
            data = message[1]
            trace = data.get("traceback")
            return {"code": "node_execution_error", "message": str(data.get("exception_message", "")),
                    "node_id": str(data["node_id"]) if data.get("node_id") is not None else None,
                    "class_type": data.get("node_type"),
                    "traceback": "".join(trace) if isinstance(trace, list) else trace}
    return None


def from_record(record: "HistoryRecord", v2: V2Job | None) -> JobView:
    prompt = record.entry.get("prompt") or []
    graph = prompt[2] if len(prompt) > 2 and isinstance(prompt[2], dict) else {}
    extra = prompt[3] if len(prompt) > 3 and isinstance(prompt[3], dict) else {}
    status = FINISHED_STATUS.get(record.status, "failed")
    error = _error_of((record.entry.get("status") or {}).get("messages")) if status == "failed" else None
    if status == "failed" and error is None:
        error = {"code": "node_execution_error", "message": "execution failed", "node_id": None, "class_type": None,
                 "traceback": None}
    outputs = record.entry.get("outputs")
    return JobView(record.prompt_id, status, record.create_ms, record.start_ms, record.end_ms, None, graph, extra,
                   outputs if isinstance(outputs, dict) else {}, error, v2)


def queued_view(state: "AppState", bridge: "JobBridge", job_id: str) -> JobView | None:
    """The job while it is in the queue (loop thread), else None."""
    queue = state.queue
    for item in queue.running_items():
        if item.prompt_id == job_id:
            status = "canceling" if job_id in bridge.canceling else "running"
            return JobView(job_id, status, item.create_time, queue.running_start(job_id), None, None, item.prompt,
                           public_extra_data(item.extra_data))
    for position, item in enumerate(queue.pending(), start=1):
        if item.prompt_id == job_id:
            return JobView(job_id, "queued", item.create_time, None, None, position, item.prompt,
                           public_extra_data(item.extra_data))
    return None


async def locate(state: "AppState", bridge: "JobBridge", store: "V2Store", job_id: str) -> JobView | None:
    view = queued_view(state, bridge, job_id)
    v2 = await asyncio.to_thread(store.job, job_id)
    if view is not None:
        view.v2 = v2
        return view
    record = await asyncio.to_thread(state.store.history_record, job_id)
    if record is not None:
        return from_record(record, v2)
    if v2 is not None and v2.canceled_ms is not None:
        return JobView(job_id, "canceled", v2.created_ms, None, v2.canceled_ms, v2=v2)
    return None


def render(view: JobView, assets: "V2Assets", bridge_progress: dict | None, base: str) -> dict:
    """The v2 `Job` body (blocking: registers outputs as assets)."""
    queue_ms = (view.started_ms - view.created_ms) if view.started_ms and view.created_ms else None
    execution_ms = (view.completed_ms - view.started_ms) if view.completed_ms and view.started_ms else None
    progress = None
    if view.status in ("running", "canceling"):
        progress = bridge_progress or {"value": 0.0, "nodes_done": 0, "nodes_total": len(view.prompt)}
    return {
        "id": view.id, "status": view.status, "created_at": iso_ms(view.created_ms),
        "started_at": iso_ms(view.started_ms), "completed_at": iso_ms(view.completed_ms), "expires_at": NO_EXPIRY,
        "queue_position": view.queue_position, "progress": progress,
        "outputs": assets.outputs(view.id, view.ui_outputs, base) if view.ui_outputs else [],
        "error": view.error, "metrics": {"queue_ms": queue_ms, "execution_ms": execution_ms},
        "urls": job_urls(view.id), "metadata": dict(view.v2.labels) if view.v2 is not None else {},
    }


def summary(view: JobView) -> dict:
    """A list item: lighter than a job (no outputs); `client.jobs.get(id)` has the rest."""
    return {"id": view.id, "status": view.status, "create_time": iso_ms(view.created_ms),
            "update_time": iso_ms(view.update_ms), "queue_position": view.queue_position,
            "metadata": dict(view.v2.labels) if view.v2 is not None else {}, "urls": job_urls(view.id)}


def all_views(state: "AppState", bridge: "JobBridge", records: list, canceled: list[V2Job]) -> list[JobView]:
    """Every job (loop thread for the queue part): running, pending, finished, cancelled while
    pending; a prompt id queued again after it finished shows its queued state."""
    views: dict[str, JobView] = {}
    for v2 in canceled:
        views[v2.id] = JobView(v2.id, "canceled", v2.created_ms, None, v2.canceled_ms, v2=v2)
    for record in records:
        views[record.prompt_id] = from_record(record, None)
    queue = state.queue
    for item in queue.running_items():
        views[item.prompt_id] = JobView(item.prompt_id, "canceling" if item.prompt_id in bridge.canceling
                                        else "running", item.create_time, queue.running_start(item.prompt_id))
    for position, item in enumerate(queue.pending(), start=1):
        views[item.prompt_id] = JobView(item.prompt_id, "queued", item.create_time, None, None, position)
    return list(views.values())


def encode_cursor(view: JobView) -> str:
    raw = json.dumps([view.created_ms, view.id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str) -> tuple[int, str] | None:
    """The (created ms, id) a cursor continues after, or None for one this server did not issue."""
    try:
        value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], int) and isinstance(value[1], str):
        return value[0], value[1]
    return None

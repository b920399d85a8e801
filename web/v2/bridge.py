"""Live job state for `/api/v2`: a client of the WebSocket hub that reads the messages of every
job submitted through v2, keeps each running job's progress snapshot (what `GET /jobs/{id}`
shows) and fans the job's events out to its server-sent-event streams.

Jobs submitted through v2 belong to the hub client `V2_CLIENT_ID`, so the hub routes their
messages here exactly as it routes a browser's to its socket (web/hub.py, with the same order and
preview encoding; this client asks for previews with metadata, which name their prompt). The
hub is given a socket-like object (`_HubSocket`) whose sends are handed to the bridge; nothing
in the hub changes. A job submitted another way (`POST /prompt`) has no live events here: its
v2 stream follows it by polling the queue and history.

What subscribers receive, per job, as `(kind, data)`:
  ("status", {"status", "queue_position"?})    running (execution_start), canceling (a cancel)
  ("progress", Progress)                        complete snapshot, at most every PROGRESS_INTERVAL
  ("preview", {"node_id", "content_type", "data_base64"})  at most every PREVIEW_INTERVAL
  ("executed", {"node": id, "output": ui})      a node's outputs (the stream renders them as assets)
  ("log", {"level", "message"})                 a node error, an interruption, cached nodes
  ("final", None)                               the job's history entry is stored: the stream
                                                reads the authoritative state and ends
Progress value = (finished or cached nodes + the running node's step fraction) / nodes in the
prompt, as comfy-api-proxy computes it from `progress_state`.
"""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from web.protocol import PREVIEW_IMAGE, PREVIEW_IMAGE_WITH_METADATA, parse_binary_frame

if TYPE_CHECKING:
    from web.state import AppState

log = logging.getLogger(__name__)

V2_CLIENT_ID = "comfy-api-v2"
PROGRESS_INTERVAL = 0.1
PREVIEW_INTERVAL = 0.5
SUBSCRIBER_QUEUE = 1000  # events waiting for one slow stream before its oldest are dropped
_FORMAT_MIME = {1: "image/jpeg", 2: "image/png"}


@dataclass
class LiveJob:
    """One running job's progress as the messages tell it."""

    job_id: str
    nodes_total: int = 0
    classes: dict[str, str] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    current: str | None = None
    step: float | None = None
    steps: float | None = None
    last_progress: float = 0.0
    last_preview: float = 0.0

    def progress(self) -> dict:
        total = max(self.nodes_total, len(self.done), 1)
        fraction = 0.0
        if self.current is not None and self.current not in self.done and self.steps:
            fraction = min(1.0, max(0.0, float(self.step or 0) / float(self.steps)))
        value = min(1.0, (len(self.done) + fraction) / total)
        node_class = self.classes.get(self.current or "")
        step = int(self.step) if self.step is not None else None
        steps = int(self.steps) if self.steps is not None else None
        message = None
        if node_class is not None:
            message = f"{node_class} {step}/{steps}" if step is not None and steps else node_class
        return {"value": value, "nodes_done": len(self.done), "nodes_total": max(self.nodes_total, len(self.done)),
                "current_node": self.current, "current_node_class": node_class, "step": step, "steps": steps,
                "message": message}


class _HubSocket:
    """What the hub needs of a socket (`closed`, `send_str`, `send_bytes`, `close`)."""

    def __init__(self, bridge: "JobBridge") -> None:
        self.bridge = bridge
        self.closed = False

    async def send_str(self, text: str) -> None:
        self.bridge.on_text(text)

    async def send_bytes(self, data: bytes) -> None:
        self.bridge.on_binary(data)

    async def close(self, code: int = 1000, message: bytes = b"") -> bool:
        self.closed = True
        return True


class JobBridge:
    """Loop thread only."""

    def __init__(self, state: "AppState") -> None:
        self.state = state
        self.live: dict[str, LiveJob] = {}
        self.canceling: set[str] = set()
        self._subscribers: dict[str, list[asyncio.Queue]] = {}
        self._conn: Any = None

    # -- the hub connection -------------------------------------------------------------------
    def connect(self) -> None:
        """Join the hub as `V2_CLIENT_ID` (again, if a shutdown closed the last connection)."""
        hub = self.state.hub
        if self._conn is not None and hub.clients.get(V2_CLIENT_ID) is self._conn and not self._conn.ws.closed:
            return
        self._conn = hub.connect(V2_CLIENT_ID, _HubSocket(self))
        self._conn.feature_flags = {"supports_preview_metadata": True}

    # -- subscribers --------------------------------------------------------------------------
    def subscribe(self, job_id: str) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue(maxsize=SUBSCRIBER_QUEUE)
        self._subscribers.setdefault(job_id, []).append(queue)
        return queue

    def unsubscribe(self, job_id: str, queue: asyncio.Queue) -> None:
        queues = self._subscribers.get(job_id)
        if queues and queue in queues:
            queues.remove(queue)
            if not queues:
                del self._subscribers[job_id]

    def publish(self, job_id: str, kind: str, data: Any) -> None:
        for queue in self._subscribers.get(job_id, ()):
            if queue.full():  # a stream that stopped reading loses its oldest events, never the end
                queue.get_nowait()
            queue.put_nowait((kind, data))

    def snapshot(self, job_id: str) -> dict | None:
        live = self.live.get(job_id)
        return live.progress() if live is not None else None

    def request_cancel(self, job_id: str) -> None:
        self.canceling.add(job_id)
        self.publish(job_id, "status", {"status": "canceling"})

    def finished(self, job_id: str) -> None:
        """The job ended (its history entry is stored) or left the queue without running."""
        self.live.pop(job_id, None)
        self.canceling.discard(job_id)
        self.publish(job_id, "final", None)

    # -- messages from the hub ----------------------------------------------------------------
    def on_text(self, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            return
        if not isinstance(message, dict) or not isinstance(message.get("data"), dict):
            return
        try:
            self._on_message(message.get("type"), message["data"])
        except Exception:  # noqa: BLE001 -- a malformed message must not stop the hub's writer
            log.exception("api v2: could not follow message %r", message.get("type"))

    def _start(self, job_id: str) -> LiveJob:
        live = self.live.get(job_id)
        if live is None:
            live = self.live[job_id] = LiveJob(job_id)
            for item in self.state.queue.running_items():
                if item.prompt_id == job_id and isinstance(item.prompt, dict):
                    live.nodes_total = len(item.prompt)
                    live.classes = {str(k): str(v.get("class_type")) for k, v in item.prompt.items()
                                    if isinstance(v, dict)}
        return live

    def _on_message(self, kind: Any, data: dict) -> None:
        job_id = data.get("prompt_id")
        if not isinstance(job_id, str):
            return
        if kind == "execution_start":
            self._start(job_id)
            self.publish(job_id, "status", {"status": "canceling" if job_id in self.canceling else "running"})
            return
        if kind == "executing" and data.get("node") is None:
            self.finished(job_id)  # sent after the history entry is stored (web/prompt_run.py)
            return
        live = self.live.get(job_id)
        if live is None and any(item.prompt_id == job_id for item in self.state.queue.running_items()):
            live = self._start(job_id)  # the stream joined mid-run (a restart, a reconnect)
        if live is None:  # not running (a broadcast `execution_interrupted` of another client's prompt)
            return
        changed = False
        if kind == "execution_cached":
            nodes = [str(n) for n in data.get("nodes") or []]
            live.done.update(nodes)
            changed = bool(nodes)
            if nodes:
                self.publish(job_id, "log", {"level": "info", "message": f"{len(nodes)} node(s) served from the cache"})
        elif kind == "executing":
            live.current, live.step, live.steps = str(data["node"]), None, None
            changed = True
        elif kind == "progress":
            live.current = str(data.get("node")) if data.get("node") is not None else live.current
            live.step, live.steps = data.get("value"), data.get("max")
            changed = True
        elif kind == "progress_state":
            nodes = data.get("nodes") if isinstance(data.get("nodes"), dict) else {}
            for node_id, entry in nodes.items():
                if not isinstance(entry, dict):
                    continue
                if entry.get("state") == "finished":
                    live.done.add(str(node_id))
                elif entry.get("state") == "running":
                    live.current, live.step, live.steps = str(node_id), entry.get("value"), entry.get("max")
            changed = True
        elif kind == "executed":
            node = str(data.get("node"))
            live.done.add(node)
            changed = True
            self.publish(job_id, "executed", {"node": node, "output": data.get("output")})
        elif kind == "execution_error":
            where = f"{data.get('node_type')} (node {data.get('node_id')})" if data.get("node_id") else "the prompt"
            self.publish(job_id, "log", {"level": "error",
                                         "message": f"{where} failed: {data.get('exception_message', '')}"})
        elif kind == "execution_interrupted":
            self.publish(job_id, "log", {"level": "warning", "message": "execution interrupted"})
        if changed:
            now = time.monotonic()
            if now - live.last_progress >= PROGRESS_INTERVAL:
                live.last_progress = now
                self.publish(job_id, "progress", live.progress())

    def on_binary(self, frame: bytes) -> None:
        try:
            kind, payload = parse_binary_frame(frame)
        except Exception:  # noqa: BLE001 -- a short or odd frame is not a preview
            return
        if kind == PREVIEW_IMAGE_WITH_METADATA:
            meta, image = payload
            job_id, node_id, mime = meta.get("prompt_id"), meta.get("node_id"), meta.get("image_type") or "image/jpeg"
        elif kind == PREVIEW_IMAGE:
            running = self.state.queue.running
            fmt, image = payload
            job_id, node_id, mime = running.prompt_id if running else None, None, _FORMAT_MIME.get(fmt, "image/jpeg")
        else:
            return
        if not isinstance(job_id, str) or job_id not in self._subscribers:
            return
        live = self._start(job_id)
        now = time.monotonic()
        if now - live.last_preview < PREVIEW_INTERVAL:
            return
        live.last_preview = now
        node = node_id if node_id is not None else live.current
        self.publish(job_id, "preview", {"node_id": str(node) if node is not None else "", "content_type": mime,
                                         "data_base64": base64.b64encode(image).decode("ascii")})

"""Comfy's API v2 served natively (issue 35): the routes `comfy-sdk` and `@comfyorg/sdk` call,
on this server's own queue, history, hub and asset catalogue (web/v2/ holds the parts).
Registered once, under `/api/v2` (v2 has no bare form); docs/api-v2.md describes them.

  GET    /api/v2/health                      {"status": "healthy", "queue_pending", "queue_running", "worker"}
  POST   /api/v2/jobs                        {workflow, extra_data?: {api_key_comfy_org}, metadata?: labels}
                                             (+ Idempotency-Key) -> 201 Job; an editor workflow is converted
  GET    /api/v2/jobs                        ?limit=1..100 (50) &cursor= &status=a,b &metadata[k]=v (<= 3)
                                             -> {"jobs": [summary...], "next_cursor"?}, newest first
  GET    /api/v2/jobs/{id}                   Job (poll-first: the authoritative state)
  POST   /api/v2/jobs/{id}/cancel            pending: removed (canceled); running: interrupted (canceling)
  GET    /api/v2/jobs/{id}/events            text/event-stream: status, progress, preview, output, log
  GET    /api/v2/jobs/{id}/workflow          ?format=api|save -> {"workflow", "format"}
  POST   /api/v2/jobs/{id}/move              {"position": n | "front" | "back"} -> Job (queued only)
  POST   /api/v2/jobs/{id}/retry             {"front"?: bool} -> 201 the new Job + "retry_of" (failed / canceled)
  GET    /api/v2/queue                       {paused, held, running: [id], pending: [id], queue_remaining}
  POST   /api/v2/queue/pause, .../resume     the same listing (admins only with --users)
  POST   /api/v2/assets                      multipart (file, file_path, content_type?, expected_hash?, tags*)
  POST   /api/v2/assets/from-hash            {hash, file_path?, tags?} -> a record over stored bytes
  HEAD   /api/v2/assets/by-hash/{hash}       200 stored / 404 not
  GET    /api/v2/assets/{id}, DELETE ...     Asset / 204
  GET    /api/v2/assets/{id}/content         the bytes (Range -> 206)

Errors are v2's envelope `{"error": {"code", "message", "details"}}` (web/v2/shapes.py).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from graph.editor_workflow import EditorWorkflowError, editor_to_prompt, is_editor_workflow, unknown_types
from web.auth.access import admin_only, may_read_path, may_see, owner_of, record_owner, sees_all
from web.asset_files import AssetError, check_name, check_tags, parse_hash
from web.bodies import BadRequestBody, read_json
from web.prompt_queue import PromptStateError, QueueControlError, UnknownPromptError
from web.queue_item import now_ms
from web.routes_files import is_active_type
from web.pack_start import node_definitions
from web.routes_jobs import job_owner
from web.state import AppState
from web.store import DB_NAME
from web.submission import is_canonical_uuid, submit_prompt
from web.v2 import jobs
from web.v2.assets import V2Assets
from web.v2.bridge import V2_CLIENT_ID, JobBridge
from web.v2.shapes import (MAX_LABEL_FILTERS, STATUSES, TERMINAL, error, external_base, label_key_problem,
                           label_value_problem, check_labels)
from web.v2.store import V2Store

MAX_IDEMPOTENCY_KEY = 255
DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT = 50, 100
POLL_SECONDS = 1.0  # how often a stream re-reads a job that gives no live events
KEEPALIVE_SECONDS = 15.0
_UPLOAD_CHUNK = 1 << 20
_MAX_FIELD = 64 * 1024


@dataclass
class V2Service:
    state: AppState
    store: V2Store
    assets: V2Assets
    bridge: JobBridge
    claiming: set  # idempotency keys of submissions under way


V2_KEY: web.AppKey[V2Service] = web.AppKey("comfy_engine_api_v2", V2Service)


def _service(request: web.Request) -> V2Service:
    return request.app[V2_KEY]


async def _view_or_404(service: V2Service, job_id: str, request: web.Request | None = None
                       ) -> jobs.JobView | web.Response:
    view = await jobs.locate(service.state, service.bridge, service.store, job_id) \
        if is_canonical_uuid(job_id) else None
    if view is not None and request is not None and not may_see(request, job_owner(service.state, job_id) or ""):
        view = None  # --users (web/auth/): another user's job reads as unknown
    return view if view is not None else error(404, "not_found", f"No job {job_id[:80]}.")


async def _job_body(service: V2Service, view: jobs.JobView, request: web.Request) -> dict:
    progress = service.bridge.snapshot(view.id)
    return await asyncio.to_thread(jobs.render, view, service.assets, progress, external_base(request))


# -- jobs ----------------------------------------------------------------------------------------
def _body_digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


async def _api_prompt(service: V2Service, workflow: dict) -> tuple[dict, str] | web.Response:
    """(API prompt, submitted format) for an API graph or an editor workflow (converted)."""
    if not is_editor_workflow(workflow):
        return workflow, "api"
    state = service.state
    node_defs = await node_definitions(state)
    try:
        missing = unknown_types(workflow, node_defs)
        if missing:
            return error(422, "invalid_workflow", f"the workflow uses node types this server does not have: "
                                                  f"{', '.join(missing)}", node_types=missing)
        return editor_to_prompt(workflow, node_defs), "save"
    except EditorWorkflowError as exc:
        return error(422, "invalid_workflow", f"the editor workflow cannot be converted: {exc}")


async def submit_job(request: web.Request) -> web.Response:
    service = _service(request)
    try:
        body = await read_json(request, expect=dict)
    except BadRequestBody as exc:
        return error(400, "invalid_request", f"Body must be a JSON object: {exc.message}")
    if body.get("webhook_url") is not None or body.get("inputs") is not None:
        return error(422, "invalid_workflow", "'webhook_url' and 'inputs' are reserved and not accepted.")
    workflow = body.get("workflow")
    if not isinstance(workflow, dict) or not workflow:
        return error(422, "invalid_workflow", "Missing 'workflow' (an API-format graph or an editor workflow).")
    labels, problem = check_labels(body.get("metadata"))
    if problem:
        return error(422, "metadata_invalid", problem)
    extra = body.get("extra_data")
    if extra is not None and (not isinstance(extra, dict) or set(extra) - {"api_key_comfy_org"}
                              or not isinstance(extra.get("api_key_comfy_org", ""), str)):
        return error(400, "invalid_request", "'extra_data' accepts only 'api_key_comfy_org' (a string).")
    key = request.headers.get("Idempotency-Key")
    if key is not None and not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        return error(400, "invalid_request", f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY} characters.")
    digest = _body_digest(body)
    if key is not None:
        claimed = await asyncio.to_thread(service.store.job_by_key, key)
        if claimed is not None or key in service.claiming:
            # Keys are single-use in v2 (no replay); the details say which job holds it.
            details = {"job_id": claimed.id, "same_body": claimed.body_digest == digest} if claimed else {}
            return error(422, "idempotency_key_reuse", "This Idempotency-Key has already been used. Keys are "
                         "single-use; poll or list your jobs instead of resubmitting with the same key.", **details)
        service.claiming.add(key)
    try:
        return await _submit(request, service, body, workflow, labels, extra, key, digest)
    finally:
        if key is not None:
            service.claiming.discard(key)


async def _submit(request: web.Request, service: V2Service, body: dict, workflow: dict, labels: dict,
                  extra: dict | None, key: str | None, digest: str) -> web.Response:
    converted = await _api_prompt(service, workflow)
    if isinstance(converted, web.Response):
        return converted
    prompt, fmt = converted
    missing: list[str] = []
    prompt = await asyncio.to_thread(service.assets.rewrite, prompt, missing)
    if missing:
        return error(422, "missing_asset", f"Unresolvable core/ASSET reference(s): {', '.join(missing)}",
                     missing_ids=missing)
    extra_data = dict(extra or {})
    if fmt == "save":
        extra_data["extra_pnginfo"] = {"workflow": workflow}  # as the editor sends it: saved images carry it
    job_id = str(uuid.uuid4())
    service.bridge.connect()
    status, payload = await submit_prompt(service.state, {"prompt": prompt, "prompt_id": job_id,
                                                          "extra_data": extra_data},
                                          client_id=V2_CLIENT_ID, owner=owner_of(request))
    if status in (403, 429):  # --users: a per-user limit (web/submission.py), not a workflow problem
        err = payload.get("error") or {}
        return error(status, str(err.get("type") or "rate_limited"), str(err.get("details") or err.get("message")))
    if status != 200:
        err = payload.get("error") or {}
        message = err.get("message") if isinstance(err, dict) else str(err)
        return error(422, "invalid_workflow", str(message or "Workflow rejected."),
                     node_errors=payload.get("node_errors") or {}, error=err)
    created = jobs.queued_view(service.state, service.bridge, job_id)
    created_ms = created.created_ms if created is not None else now_ms()
    await asyncio.to_thread(service.store.add_job, job_id, created_ms, idempotency_key=key, body_digest=digest,
                            fmt=fmt, save_workflow=workflow if fmt == "save" else None, labels=labels)
    view = await jobs.locate(service.state, service.bridge, service.store, job_id)
    if view is None:  # it ran and its entry is stored already? locate reads both; never None in practice
        return error(500, "internal_error", "The job was queued but cannot be read back.")
    return web.json_response(await _job_body(service, view, request), status=201)


def _list_filters(query: Any) -> tuple[int, tuple[int, str] | None, set[str], list[tuple[str, str]]] | web.Response:
    raw_limit = query.get("limit", str(DEFAULT_LIST_LIMIT))
    try:
        limit = int(raw_limit)
    except ValueError:
        return error(400, "invalid_request", f"'limit' must be an integer, got {raw_limit[:40]!r}.")
    if not 1 <= limit <= MAX_LIST_LIMIT:
        return error(400, "invalid_request", f"'limit' must be between 1 and {MAX_LIST_LIMIT}.")
    after = None
    if "cursor" in query:
        after = jobs.decode_cursor(query["cursor"])
        if after is None:
            return error(400, "invalid_cursor", "This cursor was not issued by this server.")
    wanted = {s.strip() for s in query.get("status", "").split(",") if s.strip()}
    unknown = sorted(wanted - set(STATUSES))
    if unknown:
        return error(400, "invalid_request", f"Unknown status filter value(s): {', '.join(unknown)}.")
    filters = []
    for name, value in query.items():
        if name.startswith("metadata[") and name.endswith("]"):
            label = name[len("metadata["):-1]
            problem = label_key_problem(label) or label_value_problem(label, value)
            if problem:
                return error(400, "invalid_metadata_filter", problem)
            filters.append((label, value))
        elif name == "metadata":
            return error(400, "invalid_metadata_filter", "filter labels as metadata[<key>]=<value>.")
    if len(filters) > MAX_LABEL_FILTERS:
        return error(400, "invalid_metadata_filter", f"at most {MAX_LABEL_FILTERS} metadata filters are allowed.")
    return limit, after, wanted, filters


async def list_jobs(request: web.Request) -> web.Response:
    service = _service(request)
    parsed = _list_filters(request.query)
    if isinstance(parsed, web.Response):
        return parsed
    limit, after, wanted, filters = parsed
    records = await asyncio.to_thread(service.state.store.history_records)
    canceled = await asyncio.to_thread(service.store.canceled_jobs)
    views = jobs.all_views(service.state, service.bridge, records, canceled)
    if not sees_all(request):  # --users: the caller's own jobs
        queue = service.state.queue
        owners = {r.prompt_id: r.owner for r in records}
        owners.update((i.prompt_id, i.owner) for i in (*queue.running_items(), *queue.pending()))
        views = [v for v in views if may_see(request, owners.get(v.id, ""))]
    rows = await asyncio.to_thread(service.store.jobs, [v.id for v in views])
    for view in views:
        view.v2 = rows.get(view.id, view.v2)
    views.sort(key=lambda v: (v.created_ms, v.id), reverse=True)
    chosen: list[jobs.JobView] = []
    more = False
    for view in views:
        if after is not None and (view.created_ms, view.id) >= after:
            continue
        if wanted and view.status not in wanted:
            continue
        labels = view.v2.labels if view.v2 is not None else {}
        if any(labels.get(k) != v for k, v in filters):
            continue
        if len(chosen) == limit:
            more = True
            break
        chosen.append(view)
    page: dict[str, Any] = {"jobs": [jobs.summary(v) for v in chosen]}
    if more:
        page["next_cursor"] = jobs.encode_cursor(chosen[-1])
    return web.json_response(page)


async def get_job(request: web.Request) -> web.Response:
    service = _service(request)
    view = await _view_or_404(service, request.match_info["id"], request)
    if isinstance(view, web.Response):
        return view
    return web.json_response(await _job_body(service, view, request))


async def cancel_job(request: web.Request) -> web.Response:
    """Idempotent: a pending job leaves the queue (canceled), a running one is interrupted
    (canceling until it stops at the next node boundary), a finished one stays as it is."""
    service = _service(request)
    view = await _view_or_404(service, request.match_info["id"], request)
    if isinstance(view, web.Response):
        return view
    queue = service.state.queue
    if view.status == "queued" and queue.delete([view.id]):
        await asyncio.to_thread(service.store.mark_canceled, view.id, view.created_ms, now_ms())
        service.bridge.finished(view.id)
    elif view.status in ("running", "canceling"):
        queue.interrupt(view.id)
        service.bridge.request_cancel(view.id)
    view = await _view_or_404(service, view.id)
    if isinstance(view, web.Response):
        return view
    return web.json_response(await _job_body(service, view, request))


async def job_workflow(request: web.Request) -> web.Response:
    service = _service(request)
    view = await _view_or_404(service, request.match_info["id"], request)
    if isinstance(view, web.Response):
        return view
    wanted = request.query.get("format")
    if wanted is not None and wanted not in ("api", "save"):
        return error(400, "invalid_request", f"'format' must be 'api' or 'save', got {wanted[:40]!r}.")
    submitted = view.v2.format if view.v2 is not None else "api"
    fmt = wanted or submitted
    if fmt == "api":
        if not view.prompt:
            return error(404, "not_found", f"Job {view.id} has no stored graph (it was cancelled before it ran?).")
        return web.json_response({"workflow": view.prompt, "format": "api"})
    saved = view.v2.save_workflow if view.v2 is not None else None
    if saved is None:  # the editor sends its workflow along with a /prompt submission
        pnginfo = view.extra_data.get("extra_pnginfo")
        saved = pnginfo.get("workflow") if isinstance(pnginfo, dict) else None
    if not isinstance(saved, dict):
        return error(404, "not_found", f"Job {view.id} was submitted as an API graph; it has no editor workflow.")
    return web.json_response({"workflow": saved, "format": "save"})


# -- queue control (docs/queue.md) ----------------------------------------------------------------
def _control_error(exc: QueueControlError, job_id: str) -> web.Response:
    if isinstance(exc, UnknownPromptError):
        return error(404, "not_found", f"No job {job_id[:80]}: {exc}")
    if isinstance(exc, PromptStateError):
        return error(409, "invalid_state", str(exc))
    return error(400, "invalid_request", str(exc))


def _queue_body(request: web.Request) -> dict:
    queue = _service(request).state.queue
    listing = queue.state()
    if not sees_all(request):  # --users: the ids listed are the caller's own (as GET /api/queue/state)
        owners = {i.prompt_id: i.owner for i in (*queue.running_items(), *queue.pending())}
        for key in ("running", "pending"):
            listing[key] = [pid for pid in listing[key] if may_see(request, owners.get(pid, ""))]
    return listing


async def get_queue(request: web.Request) -> web.Response:
    return web.json_response(_queue_body(request))


@admin_only  # --users (web/auth/): the queue as a whole is the admins'
async def pause_queue(request: web.Request) -> web.Response:
    _service(request).state.queue.pause()
    return web.json_response(_queue_body(request))


@admin_only
async def resume_queue(request: web.Request) -> web.Response:
    _service(request).state.queue.resume()
    return web.json_response(_queue_body(request))


async def move_job(request: web.Request) -> web.Response:
    """{"position": n (0 = next) | "front" | "back"} among the pending jobs -> the Job."""
    service = _service(request)
    try:
        body = await read_json(request, expect=dict)
    except BadRequestBody as exc:
        return error(400, "invalid_request", f"Body must be a JSON object: {exc.message}")
    view = await _view_or_404(service, request.match_info["id"], request)
    if isinstance(view, web.Response):
        return view
    queue = service.state.queue
    position = body.get("position")
    if position == "front":
        position = 0
    elif position == "back":
        position = len(queue.pending()) - 1
    elif isinstance(position, bool) or not isinstance(position, int):
        return error(400, "invalid_request", "'position' must be an integer index into the pending jobs, "
                     f"\"front\" or \"back\", got {str(position)[:40]!r}.")
    try:
        queue.move(view.id, position)
    except QueueControlError as exc:
        if isinstance(exc, UnknownPromptError):  # known, so no longer pending: finished
            return error(409, "invalid_state", f"Job {view.id} is {view.status}; only queued jobs can be moved.")
        return _control_error(exc, view.id)
    return await _answer_job(service, view.id, request)


async def retry_job(request: web.Request) -> web.Response:
    """A failed or canceled job queued again under a new id -> 201 the new Job, with `retry_of`.
    Optional body {"front": bool}: enter at the front of its owner's priority band."""
    service = _service(request)
    try:
        body = await read_json(request, empty={}, expect=dict)
    except BadRequestBody as exc:
        return error(400, "invalid_request", f"Body must be a JSON object: {exc.message}")
    front = body.get("front", False)
    if not isinstance(front, bool):
        return error(400, "invalid_request", f"'front' must be true or false, got {type(front).__name__}.")
    view = await _view_or_404(service, request.match_info["id"], request)
    if isinstance(view, web.Response):
        return view
    if view.status not in ("failed", "canceled"):
        return error(409, "invalid_state", f"Job {view.id} is {view.status}; only failed or canceled jobs can "
                     "be retried.")
    try:
        new_id = service.state.queue.retry(view.id, front=front)  # the event loop owns the queue
    except QueueControlError as exc:
        if isinstance(exc, UnknownPromptError):  # canceled while queued: it never ran, nothing is stored
            return error(409, "invalid_state", f"Job {view.id} was canceled before it ran; it has no stored "
                         "run to retry.")
        return _control_error(exc, view.id)
    labels = view.v2.labels if view.v2 is not None else {}
    created = jobs.queued_view(service.state, service.bridge, new_id)
    await asyncio.to_thread(service.store.add_job, new_id, created.created_ms if created else now_ms(),
                            idempotency_key=None, body_digest=None, fmt=view.v2.format if view.v2 else "api",
                            save_workflow=view.v2.save_workflow if view.v2 else None, labels=labels)
    return await _answer_job(service, new_id, request, status=201, retry_of=view.id)


async def _answer_job(service: V2Service, job_id: str, request: web.Request, status: int = 200,
                      **extra: Any) -> web.Response:
    view = await jobs.locate(service.state, service.bridge, service.store, job_id)
    if view is None:
        return error(500, "internal_error", f"Job {job_id} cannot be read back.")
    return web.json_response({**await _job_body(service, view, request), **extra}, status=status)


# -- events --------------------------------------------------------------------------------------
def _frame(event: str, data: Any) -> bytes:
    """One SSE frame; no `id:` (the v2 stream is live, with no Last-Event-ID replay)."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _status_data(view: jobs.JobView) -> dict:
    data: dict[str, Any] = {"status": view.status}
    if view.queue_position is not None:
        data["queue_position"] = view.queue_position
    return data


async def job_events(request: web.Request) -> web.StreamResponse:
    service = _service(request)
    view = await _view_or_404(service, request.match_info["id"], request)
    if isinstance(view, web.Response):
        return view
    job_id, bridge = view.id, service.bridge
    inbox = bridge.subscribe(job_id)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    base = external_base(request)
    seen: set[str] = set()

    async def outputs(ui: Any, nodes: set[str] | None = None) -> None:
        for out in await asyncio.to_thread(service.assets.outputs, job_id, ui, base, nodes):
            if out["id"] not in seen:
                seen.add(out["id"])
                await response.write(_frame("output", out))

    async def finish(final: jobs.JobView) -> None:
        await outputs(final.ui_outputs)  # every output before the terminal status ends the stream
        await response.write(_frame("status", _status_data(final)))

    try:
        await response.prepare(request)
        if view.status in TERMINAL:
            await finish(view)
            return response
        await response.write(_frame("status", _status_data(view)))
        last_status, last_write = view.status, time.monotonic()
        progress = bridge.snapshot(job_id)
        if progress is not None:
            await response.write(_frame("progress", progress))
        while True:
            try:
                kind, data = await asyncio.wait_for(inbox.get(), POLL_SECONDS)
            except asyncio.TimeoutError:
                kind, data = "poll", None
            if kind in ("final", "poll"):
                current = await jobs.locate(service.state, bridge, service.store, job_id)
                if current is None:  # deleted from the history meanwhile
                    await response.write(_frame("status", {"status": "expired"}))
                    return response
                if current.status in TERMINAL:
                    await finish(current)
                    return response
                if current.status != last_status:
                    last_status = current.status
                    await response.write(_frame("status", _status_data(current)))
                elif time.monotonic() - last_write > KEEPALIVE_SECONDS:
                    await response.write(b": keepalive\n\n")
                else:
                    continue
            elif kind == "executed":
                await outputs({data["node"]: data["output"]}, {data["node"]})
            elif kind == "status":
                if data["status"] == last_status:
                    continue
                last_status = data["status"]
                await response.write(_frame("status", data))
            else:  # progress, preview, log
                await response.write(_frame(kind, data))
            last_write = time.monotonic()
    except ConnectionResetError:
        return response  # the client went away
    finally:
        bridge.unsubscribe(job_id, inbox)


# -- assets --------------------------------------------------------------------------------------
def _asset_id(request: web.Request) -> str | None:
    raw = request.match_info["id"]
    return raw if is_canonical_uuid(raw) else None


async def _record_or_404(service: V2Service, request: web.Request) -> Any:
    asset_id = _asset_id(request)
    record = await asyncio.to_thread(service.assets.get, asset_id) if asset_id else None
    if record is not None and not may_read_path(request, record.path, record.id):
        record = None  # --users (web/auth/): another user's asset reads as unknown
    return record if record is not None else error(404, "not_found", "Unknown asset id.")


async def upload_asset(request: web.Request) -> web.Response:
    service = _service(request)
    if not (request.content_type or "").lower().startswith("multipart/"):
        return error(422, "invalid_request", "Expected multipart/form-data.")
    work = Path(service.state.env.temp_dir) / "uploads" / uuid.uuid4().hex
    try:
        return await _upload(request, service, work)
    except AssetError as exc:
        return error(422 if exc.status == 400 else exc.status, "invalid_request", exc.message)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _text(part: Any) -> str:
    data = bytearray()
    while chunk := await part.read_chunk(8192):
        data += chunk
        if len(data) > _MAX_FIELD:
            raise AssetError(400, "INVALID_BODY", f"form field {part.name!r} is longer than {_MAX_FIELD} bytes")
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise AssetError(400, "INVALID_BODY", f"form field {part.name!r} is not UTF-8 text") from None


async def _upload(request: web.Request, service: V2Service, work: Path) -> web.Response:
    from blake3 import blake3

    limit = service.state.config.max_upload_bytes
    fields: dict[str, str] = {}
    tags: list[str] = []
    received: tuple[Path, str, int, str | None] | None = None
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if part.name == "file":
                if received is not None:
                    return error(422, "invalid_request", "Send one 'file' part per upload.")
                work.mkdir(parents=True, exist_ok=True)
                temp, digest, size = work / ".upload.part", blake3(), 0
                with open(temp, "wb") as fh:
                    while chunk := await part.read_chunk(_UPLOAD_CHUNK):
                        size += len(chunk)
                        if size > limit:
                            return error(413, "payload_too_large", f"Upload exceeds {limit} bytes.")
                        digest.update(chunk)
                        fh.write(chunk)
                received = (temp, f"blake3:{digest.hexdigest()}", size, part.headers.get("Content-Type"))
            elif part.name == "tags":
                tags.append(await _text(part))
            elif part.name:
                fields[part.name] = await _text(part)
    except (ValueError, HttpProcessingError, AssertionError) as exc:
        return error(422, "invalid_request", f"Malformed multipart body: {exc}")
    if received is None:
        return error(422, "invalid_request", "Missing 'file' part.")
    if not fields.get("file_path"):
        return error(422, "invalid_request", "Missing 'file_path'.")
    file_path = check_name(fields["file_path"], "file_path")
    temp, digest, size, part_type = received
    expected = fields.get("expected_hash")
    if expected and expected.strip().lower() != digest:
        return error(409, "hash_mismatch", "Client-declared hash does not match the received bytes.",
                     expected=expected[:80], received=digest)
    content_type = fields.get("content_type") or part_type or None
    record, created_new = await asyncio.to_thread(service.assets.ingest, temp, digest, size, file_path=file_path,
                                                  content_type=content_type, tags=check_tags(tags))
    record_owner(request, record.path, record.id)  # --users: the uploader may read it back
    body = V2Assets.asset_json(record, external_base(request), created_new=created_new)
    return web.json_response(body, status=201 if created_new else 200)


async def asset_from_hash(request: web.Request) -> web.Response:
    service = _service(request)
    try:
        body = await read_json(request, expect=dict)
    except BadRequestBody as exc:
        return error(400, "invalid_request", f"Body must be a JSON object: {exc.message}")
    try:
        digest = parse_hash(body.get("hash"))
        file_path = check_name(body["file_path"], "file_path") if body.get("file_path") is not None else None
        tags = body.get("tags") or []
        if not isinstance(tags, list):
            return error(422, "invalid_request", "'tags' must be a list of strings.")
        tags = check_tags(tags)
    except AssetError as exc:
        return error(422, "invalid_request", exc.message)
    record = await asyncio.to_thread(service.assets.from_hash, digest, file_path=file_path, tags=tags)
    if record is None:
        return error(404, "blob_not_found", f"No stored bytes have the hash {digest}.")
    record_owner(request, None, record.id)  # --users: knowing the hash, the caller has the bytes
    return web.json_response(V2Assets.asset_json(record, external_base(request), created_new=False))


async def head_asset_by_hash(request: web.Request) -> web.Response:
    try:
        digest = parse_hash(request.match_info["hash"])
    except AssetError:
        return web.Response(status=400)
    catalog = await asyncio.to_thread(_service(request).assets.catalog)
    return web.Response(status=200 if await asyncio.to_thread(catalog.hash_exists, digest) else 404)


async def get_asset(request: web.Request) -> web.Response:
    record = await _record_or_404(_service(request), request)
    if isinstance(record, web.Response):
        return record
    return web.json_response(V2Assets.asset_json(record, external_base(request)))


async def delete_asset(request: web.Request) -> web.Response:
    service = _service(request)
    record = await _record_or_404(service, request)
    if isinstance(record, web.Response):
        return record
    catalog = await asyncio.to_thread(service.assets.catalog)
    await asyncio.to_thread(catalog.delete, record.id)  # the record goes; its bytes stay (catalogue rule)
    return web.Response(status=204)


async def asset_content(request: web.Request) -> web.StreamResponse:
    record = await _record_or_404(_service(request), request)
    if isinstance(record, web.Response):
        return record
    if record.is_missing or not record.path.is_file():
        return error(404, "output_unavailable", "The asset is known but its bytes are no longer on disk.")
    content_type = (record.mime_type or "application/octet-stream").split(";", 1)[0].strip().lower()
    disposition = "inline"
    if is_active_type(content_type):  # never run HTML/SVG/JS from this origin (as /view and /api/assets)
        content_type, disposition = "application/octet-stream", "attachment"
    headers = {"Content-Type": content_type, "X-Content-Type-Options": "nosniff",
               "Content-Disposition": f"{disposition}; filename*=UTF-8''{quote(record.name, safe='')}"}
    return web.FileResponse(record.path, headers=headers)  # Range -> 206 + Content-Range, 416 past the end


async def health(request: web.Request) -> web.Response:
    state = _service(request).state
    worker = state.worker
    return web.json_response({"status": "healthy", "queue_pending": len(state.queue.pending()),
                              "queue_running": len(state.queue.running_items()),
                              "worker": "started" if worker is not None and getattr(worker, "started", True)
                              else "starting"})


# -- wiring --------------------------------------------------------------------------------------
def add_v2_routes(app: web.Application, state: AppState) -> None:
    """Serve `/api/v2` on `app`: the v2 rows open with the app, the hub client joins on start-up."""
    store = V2Store(Path(state.env.user_dir) / DB_NAME).open()
    service = V2Service(state, store, V2Assets(app, state.env, store), JobBridge(state), set())
    app[V2_KEY] = service

    async def join_hub(app: web.Application) -> None:
        service.bridge.connect()  # jobs restored from the durable queue report here again

    async def close(app: web.Application) -> None:
        service.assets.close()
        store.close()

    app.on_startup.append(join_hub)
    app.on_cleanup.append(close)
    prefix = "/api/v2"
    router = app.router
    router.add_get(f"{prefix}/health", health)
    router.add_post(f"{prefix}/jobs", submit_job)
    router.add_get(f"{prefix}/jobs", list_jobs)
    router.add_get(f"{prefix}/jobs/{{id}}", get_job)
    router.add_post(f"{prefix}/jobs/{{id}}/cancel", cancel_job)
    router.add_get(f"{prefix}/jobs/{{id}}/events", job_events)
    router.add_get(f"{prefix}/jobs/{{id}}/workflow", job_workflow)
    router.add_post(f"{prefix}/jobs/{{id}}/move", move_job)
    router.add_post(f"{prefix}/jobs/{{id}}/retry", retry_job)
    router.add_get(f"{prefix}/queue", get_queue)
    router.add_post(f"{prefix}/queue/pause", pause_queue)
    router.add_post(f"{prefix}/queue/resume", resume_queue)
    router.add_post(f"{prefix}/assets", upload_asset)
    router.add_post(f"{prefix}/assets/from-hash", asset_from_hash)
    router.add_route("HEAD", f"{prefix}/assets/by-hash/{{hash}}", head_asset_by_hash)
    router.add_get(f"{prefix}/assets/{{id}}", get_asset, allow_head=False)
    router.add_delete(f"{prefix}/assets/{{id}}", delete_asset)
    router.add_get(f"{prefix}/assets/{{id}}/content", asset_content)

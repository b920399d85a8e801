"""`/jobs`: the unified view of queued, running and finished prompts, as today's ComfyUI serves
it (server.py @002c3fb9 and comfy_execution/jobs.py @172be438, Comfy-Org/ComfyUI).

A job is rendered from a queue item or a history record; fields that are None are left out:
  {id, status: pending|in_progress|completed|failed|cancelled, priority, create_time (ms),
   execution_start_time, execution_end_time, execution_error, outputs_count,
   previewable_outputs_count, preview_output {..item, nodeId, mediaType}, workflow_id}
(an interrupted run is `cancelled`; a running job also carries its execution_start_time).
Beyond ComfyUI: `retry_of` / `retried_as` link a retried job and its retry (POST
/api/jobs/{id}/retry, web/routes_queue.py); left out when there is none.

`GET /jobs?status=a,b&workflow_id=&sort_by=created_at|execution_duration&sort_order=desc|asc
&limit=&offset=` -> {jobs, pagination: {offset, limit, total, has_more}} (no limit: all);
`GET /jobs/{id}` adds `workflow` {prompt, extra_data}, and for a finished job `outputs`
(3-D file names made items) and `execution_status`; 404 {"error": "Job not found"}.
`POST /jobs/{id}/cancel` and `POST /jobs/cancel` {"job_ids": [uuid...]} -> {"cancelled": bool}:
a running job is interrupted, a pending one dequeued, anything else is a no-op (false).
Errors are ComfyUI's: 400 {"error": "<message>"} (and "invalid_ids" for the batch cancel).
Registered bare and under /api like every route here (ComfyUI has only /api/jobs).
"""
from __future__ import annotations

from typing import Any

from aiohttp import web

from web.auth.access import owner_of, sees_all
from web.bodies import BadRequestBody, read_json
from web.queue_item import QueueItem, public_extra_data
from web.state import AppState, state_of
from web.store import HistoryRecord
from web.submission import is_canonical_uuid

JOB_STATUSES = ("pending", "in_progress", "completed", "failed", "cancelled")
_HISTORY_STATUS = {"success": "completed", "error": "failed", "interrupted": "cancelled"}
PREVIEWABLE_MEDIA = frozenset({"images", "video", "audio", "3d", "text"})
THREE_D_EXTENSIONS = (".obj", ".fbx", ".gltf", ".glb", ".usdz")
TEXT_EXTENSIONS = (".txt", ".md", ".json")
TEXT_PREVIEW_MAX = 1024


def _pruned(job: dict) -> dict:
    return {k: v for k, v in job.items() if v is not None}


def _workflow_id(extra_data: dict) -> str | None:
    workflow = (extra_data.get("extra_pnginfo") or {}).get("workflow") if isinstance(
        extra_data.get("extra_pnginfo"), dict) else None
    value = workflow.get("id") if isinstance(workflow, dict) else None
    return value if isinstance(value, str) else None


def _as_item(value: Any) -> dict | None:
    """An output entry as a file item: dicts as they are, a 3-D file name as an output file."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.lower().endswith(THREE_D_EXTENSIONS):
        return {"filename": value, "type": "output", "subfolder": "", "mediaType": "3d"}
    return None


def _previewable(media_type: str, item: dict) -> bool:
    if media_type in PREVIEWABLE_MEDIA:
        return True
    fmt = item.get("format")
    if isinstance(fmt, str) and fmt.startswith(("video/", "audio/")):
        return True
    name = str(item.get("filename", "")).lower()
    return name.endswith(THREE_D_EXTENSIONS) or name.endswith(TEXT_EXTENSIONS)


def _is_text(media_type: str, item: dict) -> bool:
    return media_type == "text" or str(item.get("filename", "")).lower().endswith(TEXT_EXTENSIONS)


def output_summary(outputs: dict) -> tuple[int, int, dict | None]:
    """(outputs_count, previewable_outputs_count, preview_output) of a history entry's outputs.

    Every file item counts (plain values and text do not). The preview is the first saved
    (type "output") visual item, else the first other visual one (temp previews), else a saved
    text file, else the first raw text (its first 1024 characters)."""
    count = previewable = 0
    saved = visual = text_file = text = None
    for node_id, ui in (outputs or {}).items():
        if not isinstance(ui, dict):
            continue
        for media_type, entries in ui.items():
            if media_type == "animated" or not isinstance(entries, list):
                continue
            for entry in entries:
                item = _as_item(entry)
                if item is None:
                    if media_type == "text" and text is None and entry is not None:
                        value = entry[0] if isinstance(entry, (list, tuple)) and entry else str(entry)
                        value = str(value)
                        text = {"content": value[:TEXT_PREVIEW_MAX], "nodeId": node_id, "mediaType": "text"}
                        if len(value) > TEXT_PREVIEW_MAX:
                            text["truncated"] = True
                    continue
                count += 1
                if not _previewable(media_type, item):
                    continue
                previewable += 1
                enriched = {**item, "nodeId": node_id, "mediaType": item.get("mediaType", media_type)}
                if _is_text(media_type, item):
                    text_file = text_file or enriched
                elif item.get("type") == "output":
                    saved = saved or enriched
                else:
                    visual = visual or enriched
    return count, previewable, saved or visual or text_file or text


def normalized_outputs(outputs: dict) -> dict:
    """A finished job's outputs with 3-D file names as items and None entries dropped."""
    result: dict = {}
    for node_id, ui in (outputs or {}).items():
        if not isinstance(ui, dict):
            result[node_id] = ui
            continue
        result[node_id] = {media_type: entries if media_type == "animated" or not isinstance(entries, list)
                           else [_as_item(e) or e for e in entries if e is not None]
                           for media_type, entries in ui.items()}
    return result


def _queued_job(item: QueueItem, running: bool, start_ms: int | None) -> dict:
    return _pruned({"id": item.prompt_id, "status": "in_progress" if running else "pending",
                    "priority": item.number, "create_time": item.create_time,
                    "execution_start_time": start_ms if running else None,
                    "outputs_count": 0, "previewable_outputs_count": 0,
                    "workflow_id": _workflow_id(item.extra_data), "retry_of": item.retry_of})


def _record_extra(record: HistoryRecord) -> tuple[dict, dict]:
    prompt = record.entry.get("prompt") or []
    graph = prompt[2] if len(prompt) > 2 and isinstance(prompt[2], dict) else {}
    extra = prompt[3] if len(prompt) > 3 and isinstance(prompt[3], dict) else {}
    return graph, extra


def _finished_job(record: HistoryRecord) -> dict:
    count, previewable, preview = output_summary(record.entry.get("outputs") or {})
    messages = (record.entry.get("status") or {}).get("messages") or []
    error = next((data for kind, data in messages if kind == "execution_error"), None)
    _, extra = _record_extra(record)
    return _pruned({"id": record.prompt_id, "status": _HISTORY_STATUS.get(record.status, "failed"),
                    "priority": record.number, "create_time": record.create_ms,
                    "execution_start_time": record.start_ms, "execution_end_time": record.end_ms,
                    "execution_error": error, "outputs_count": count, "previewable_outputs_count": previewable,
                    "preview_output": preview, "workflow_id": _workflow_id(extra),
                    "retry_of": record.retry_of, "retried_as": record.retried_as})


def all_jobs(state: AppState, owner: str | None = None) -> list[dict]:
    """Every job; with `owner` (--users, a non-admin) only that owner's."""
    queue = state.queue
    jobs = [_finished_job(r) for r in state.store.history_records() if owner is None or r.owner == owner]
    jobs.extend(_queued_job(item, True, queue.running_start(item.prompt_id)) for item in queue.running_items()
                if owner is None or item.owner == owner)
    jobs.extend(_queued_job(item, False, None) for item in queue.pending() if owner is None or item.owner == owner)
    return jobs


def job_owner(state: AppState, job_id: str) -> str | None:
    """Who submitted `job_id` (queued, running or finished), or None for an unknown id."""
    item = next((i for i in (*state.queue.running_items(), *state.queue.pending()) if i.prompt_id == job_id), None)
    return item.owner if item is not None else state.store.history_owner(job_id)


def job_detail(state: AppState, job_id: str, owner: str | None = None) -> dict | None:
    """The job, or None when unknown (or, with `owner`, another owner's)."""
    if owner is not None and job_owner(state, job_id) != owner:
        return None
    record = state.store.history_record(job_id)
    if record is not None:
        graph, extra = _record_extra(record)
        return {**_finished_job(record), "outputs": normalized_outputs(record.entry.get("outputs") or {}),
                "execution_status": record.entry.get("status"), "workflow": {"prompt": graph, "extra_data": extra}}
    queue = state.queue
    running = {i.prompt_id: i for i in queue.running_items()}
    if job_id in running:
        item = running[job_id]
        job = _queued_job(item, True, queue.running_start(job_id))
    else:
        item = next((i for i in queue.pending() if i.prompt_id == job_id), None)
        if item is None:
            return None
        job = _queued_job(item, False, None)
    return {**job, "workflow": {"prompt": item.prompt, "extra_data": public_extra_data(item.extra_data)}}


def cancel_job(state: AppState, job_id: str, owner: str | None = None) -> bool:
    """Interrupt `job_id` if it runs, dequeue it if it waits; False when it is neither (or, with
    `owner`, another owner's)."""
    if owner is not None and job_owner(state, job_id) != owner:
        return False
    if state.queue.interrupt(job_id):
        return True
    return bool(state.queue.delete([job_id]))


def _bad(message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=400)


def _owner_filter(request: web.Request) -> str | None:
    """--users: the caller's name unless they see everything (an admin, or users off)."""
    return None if sees_all(request) else owner_of(request)


def jobs_routes() -> web.RouteTableDef:
    routes = web.RouteTableDef()

    @routes.get("/jobs")
    async def list_jobs(request: web.Request) -> web.Response:
        query = request.query
        wanted = [s.strip().lower() for s in query.get("status", "").split(",") if s.strip()]
        unknown = [s for s in wanted if s not in JOB_STATUSES]
        if unknown:
            return _bad(f"Invalid status value(s): {', '.join(unknown)}. Valid values: {', '.join(JOB_STATUSES)}")
        sort_by = query.get("sort_by", "created_at").lower()
        if sort_by == "create_time":  # our earlier spelling, still accepted
            sort_by = "created_at"
        if sort_by not in ("created_at", "execution_duration"):
            return _bad("sort_by must be 'created_at' or 'execution_duration'")
        order = query.get("sort_order", "desc").lower()
        if order not in ("asc", "desc"):
            return _bad("sort_order must be 'asc' or 'desc'")
        limit = None
        if "limit" in query:
            try:
                limit = int(query["limit"])
            except ValueError:
                return _bad("limit must be an integer")
            if limit <= 0:
                return _bad("limit must be a positive integer")
        offset = 0
        if "offset" in query:
            try:
                offset = max(0, int(query["offset"]))
            except ValueError:
                return _bad("offset must be an integer")

        jobs = all_jobs(state_of(request), _owner_filter(request))
        if wanted:
            jobs = [j for j in jobs if j["status"] in wanted]
        workflow_id = query.get("workflow_id")
        if workflow_id:
            jobs = [j for j in jobs if j.get("workflow_id") == workflow_id]

        def key(job: dict) -> Any:
            if sort_by == "execution_duration":
                start, end = job.get("execution_start_time"), job.get("execution_end_time")
                return (end - start) if start and end else 0
            return job.get("create_time") or 0

        jobs.sort(key=key, reverse=order == "desc")
        page = jobs[offset:] if limit is None else jobs[offset:offset + limit]
        return web.json_response({"jobs": page, "pagination": {
            "offset": offset, "limit": limit, "total": len(jobs), "has_more": offset + len(page) < len(jobs)}})

    @routes.get("/jobs/{job_id}")
    async def get_job(request: web.Request) -> web.Response:
        job = job_detail(state_of(request), request.match_info["job_id"], _owner_filter(request))
        if job is None:
            return web.json_response({"error": "Job not found"}, status=404)
        return web.json_response(job)

    @routes.post("/jobs/{job_id}/cancel")
    async def cancel_one(request: web.Request) -> web.Response:
        return web.json_response({"cancelled": cancel_job(state_of(request), request.match_info["job_id"],
                                                          _owner_filter(request))})

    @routes.post("/jobs/cancel")
    async def cancel_many(request: web.Request) -> web.Response:
        try:
            body = await read_json(request)
        except BadRequestBody:
            return _bad("Request body must be valid JSON")
        ids = body.get("job_ids") if isinstance(body, dict) else None
        if not isinstance(ids, list):
            return _bad("job_ids must be a list")
        invalid = [i if isinstance(i, str) else repr(i) for i in ids if not is_canonical_uuid(i)]
        if invalid:
            return _bad("job_ids contains invalid id(s)", invalid_ids=invalid)
        state = state_of(request)
        results = [cancel_job(state, i, _owner_filter(request)) for i in ids]  # every one, not only up to the first
        return web.json_response({"cancelled": any(results)})

    return routes

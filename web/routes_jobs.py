"""`/jobs`: the editor's unified view of queued, running and finished prompts (ComfyUI 0.6+).

A job is rendered from a queue item or a history record:
  {id, status: pending|in_progress|completed|failed|cancelled, create_time, execution_start_time,
   execution_end_time (ms), outputs_count, previewable_outputs_count, preview_output, execution_error,
   workflow_id, priority}
`GET /jobs?status=a,b&limit=&offset=&sort_by=create_time|execution_duration&sort_order=desc|asc
&workflow_id=` -> {jobs, pagination: {offset, limit, total, has_more}};
`GET /jobs/{id}` adds outputs, workflow {prompt, extra_data} and execution_status.
"""
from __future__ import annotations

from typing import Any

from aiohttp import web

from web.bodies import BadRequestBody, read_json
from web.queue_item import QueueItem, public_extra_data
from web.state import AppState, state_of
from web.store import HistoryRecord

JOB_STATUSES = ("pending", "in_progress", "completed", "failed", "cancelled")
_HISTORY_STATUS = {"success": "completed", "error": "failed", "interrupted": "cancelled"}
_MEDIA_KEYS = ("images", "video", "audio", "animated", "3d")


def _workflow_id(extra_data: dict) -> str | None:
    workflow = (extra_data.get("extra_pnginfo") or {}).get("workflow") if isinstance(
        extra_data.get("extra_pnginfo"), dict) else None
    value = workflow.get("id") if isinstance(workflow, dict) else None
    return value if isinstance(value, str) else None


def _output_summary(outputs: dict) -> tuple[int, int, dict | None]:
    """(outputs_count, previewable count, first previewable item with nodeId and mediaType)."""
    count, previewable, first = 0, 0, None
    for node_id, ui in (outputs or {}).items():
        if not isinstance(ui, dict):
            continue
        for key, items in ui.items():
            if not isinstance(items, list):
                continue
            count += len(items)
            if key in _MEDIA_KEYS:
                for item in items:
                    if isinstance(item, dict) and "filename" in item:
                        previewable += 1
                        if first is None:
                            first = {**item, "nodeId": node_id, "mediaType": key}
    return count, previewable, first


def _queued_job(item: QueueItem, running: bool, start_ms: int | None) -> dict:
    return {"id": item.prompt_id, "status": "in_progress" if running else "pending",
            "create_time": item.create_time, "execution_start_time": start_ms if running else None,
            "execution_end_time": None, "outputs_count": 0, "previewable_outputs_count": None,
            "preview_output": None, "execution_error": None,
            "workflow_id": _workflow_id(item.extra_data), "priority": item.number}


def _finished_job(record: HistoryRecord) -> dict:
    outputs = record.entry.get("outputs") or {}
    count, previewable, first = _output_summary(outputs)
    messages = (record.entry.get("status") or {}).get("messages") or []
    error = next((data for kind, data in messages if kind == "execution_error"), None)
    prompt = record.entry.get("prompt") or [None, None, None, {}]
    extra = prompt[3] if len(prompt) > 3 and isinstance(prompt[3], dict) else {}
    return {"id": record.prompt_id, "status": _HISTORY_STATUS.get(record.status, "failed"),
            "create_time": record.create_ms, "execution_start_time": record.start_ms,
            "execution_end_time": record.end_ms, "outputs_count": count,
            "previewable_outputs_count": previewable, "preview_output": first, "execution_error": error,
            "workflow_id": _workflow_id(extra), "priority": record.number}


def all_jobs(state: AppState) -> list[dict]:
    queue = state.queue
    jobs = [_finished_job(r) for r in state.store.history_records()]
    jobs.extend(_queued_job(item, True, queue.running_start(item.prompt_id)) for item in queue.running_items())
    jobs.extend(_queued_job(item, False, None) for item in queue.pending())
    return jobs


def job_detail(state: AppState, job_id: str) -> dict | None:
    queue = state.queue
    running = {i.prompt_id: i for i in queue.running_items()}
    if job_id in running:
        item = running[job_id]
        job = _queued_job(item, True, queue.running_start(job_id))
    else:
        item = next((i for i in queue.pending() if i.prompt_id == job_id), None)
        job = _queued_job(item, False, None) if item is not None else None
    if job is not None and item is not None:
        return {**job, "outputs": {}, "execution_status": None,
                "workflow": {"prompt": item.prompt, "extra_data": public_extra_data(item.extra_data)}}
    record = state.store.history_record(job_id)
    if record is None:
        return None
    prompt = record.entry.get("prompt") or [None, None, {}, {}]
    return {**_finished_job(record), "outputs": record.entry.get("outputs") or {},
            "execution_status": record.entry.get("status"),
            "workflow": {"prompt": prompt[2] if len(prompt) > 2 else {},
                         "extra_data": prompt[3] if len(prompt) > 3 else {}}}


def _query_int(request: web.Request, name: str, default: int, minimum: int) -> int:
    raw = request.query.get(name, "")
    try:
        value = int(raw) if raw != "" else default
    except ValueError:
        raise BadRequestBody(f"query parameter '{name}' must be an integer, got {raw!r}", "invalid_query") from None
    if value < minimum:
        raise BadRequestBody(f"query parameter '{name}' must be >= {minimum}, got {value}", "invalid_query")
    return value


def cancel_job(state: AppState, job_id: str) -> bool:
    if state.queue.interrupt(job_id):
        return True
    return bool(state.queue.delete([job_id]))


def jobs_routes() -> web.RouteTableDef:
    routes = web.RouteTableDef()

    @routes.get("/jobs")
    async def list_jobs(request: web.Request) -> web.Response:
        state = state_of(request)
        wanted = [s for s in request.query.get("status", "").split(",") if s]
        unknown = [s for s in wanted if s not in JOB_STATUSES]
        if unknown:
            raise BadRequestBody(f"unknown job status {unknown}; expected some of {list(JOB_STATUSES)}",
                                 "invalid_query")
        limit = _query_int(request, "limit", 100, 0)
        offset = _query_int(request, "offset", 0, 0)
        sort_by = request.query.get("sort_by", "create_time")
        if sort_by not in ("create_time", "created_at", "execution_duration"):
            raise BadRequestBody(f"sort_by must be create_time or execution_duration, got {sort_by!r}",
                                 "invalid_query")
        order = request.query.get("sort_order", "desc")
        if order not in ("asc", "desc"):
            raise BadRequestBody(f"sort_order must be asc or desc, got {order!r}", "invalid_query")
        jobs = all_jobs(state)
        if wanted:
            jobs = [j for j in jobs if j["status"] in wanted]
        workflow_id = request.query.get("workflow_id")
        if workflow_id:
            jobs = [j for j in jobs if j["workflow_id"] == workflow_id]

        def key(job: dict) -> Any:
            if sort_by == "execution_duration":
                start, end = job["execution_start_time"], job["execution_end_time"]
                return (end - start) if start is not None and end is not None else -1
            return job["create_time"] or 0

        jobs.sort(key=key, reverse=order == "desc")
        page = jobs[offset:offset + limit]
        return web.json_response({"jobs": page, "pagination": {
            "offset": offset, "limit": limit, "total": len(jobs), "has_more": offset + len(page) < len(jobs)}})

    @routes.get("/jobs/{job_id}")
    async def get_job(request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        job = job_detail(state_of(request), job_id)
        if job is None:
            return web.json_response({"error": {"type": "not_found", "message": f"job {job_id!r} not found"}},
                                     status=404)
        return web.json_response(job)

    @routes.post("/jobs/{job_id}/cancel")
    async def cancel_one(request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        return web.json_response({"cancelled": [job_id] if cancel_job(state_of(request), job_id) else []})

    @routes.post("/jobs/cancel")
    async def cancel_many(request: web.Request) -> web.Response:
        body = await read_json(request, expect=dict)
        ids = body.get("job_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise BadRequestBody("'job_ids' must be a list of job id strings", "invalid_request")
        state = state_of(request)
        return web.json_response({"cancelled": [i for i in ids if cancel_job(state, i)]})

    return routes

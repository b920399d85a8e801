"""Queue control routes (beyond ComfyUI's server; docs/queue.md): pause, resume, state, move,
per-owner priorities, and retrying a failed or interrupted job.

  GET  /api/queue/state        -> {paused, held, running: [id], pending: [id], queue_remaining}
  POST /api/queue/pause        -> the state, paused (the running prompt finishes)
  POST /api/queue/resume       -> the state, not paused
  POST /api/queue/move         {"prompt_id": id, "position": n | "front" | "back"}
                               -> {prompt_id, number, position, pending: [id]}
  GET  /api/queue/priorities   -> {priorities: {owner: p}, default_owner, max_priority}
  POST /api/queue/priorities   {"owner": str, "priority": 0..MAX_PRIORITY} -> the same listing
  POST /api/jobs/{id}/retry    optional {"front": bool} -> {prompt_id (new), number, retry_of}

Each is a thin shell over the queue's own methods (web/prompt_queue.py), which the /api/v2 routes
call as well. Bad input is a 4xx with `{"error": {"type", "message"}}` (web/bodies.py's shape):
400 a malformed body, 404 an unknown prompt, 409 a prompt in the wrong state. Registered bare and
under /api like every table (web/app.py).
"""
from __future__ import annotations

from typing import Any

from aiohttp import web

from web.auth.access import admin_only, forbidden, may_see, sees_all
from web.bodies import BadRequestBody, read_json
from web.prompt_queue import MAX_PRIORITY, PromptStateError, QueueControlError, UnknownPromptError
from web.queue_item import DEFAULT_OWNER
from web.state import state_of

_ERROR_TYPES = {UnknownPromptError: "unknown_prompt", PromptStateError: "invalid_state"}


def _error(exc: QueueControlError) -> web.Response:
    kind = next((name for cls, name in _ERROR_TYPES.items() if isinstance(exc, cls)), "invalid_request")
    return web.json_response({"error": {"type": kind, "message": str(exc)}}, status=exc.http_status)


def _field(body: dict, name: str, kinds: tuple[type, ...], what: str) -> Any:
    value = body.get(name)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise BadRequestBody(f"'{name}' must be {what}, got {type(value).__name__}", "invalid_request")
    return value


def queue_routes() -> web.RouteTableDef:
    routes = web.RouteTableDef()

    @routes.get("/queue/state")
    async def get_state(request: web.Request) -> web.Response:
        queue = state_of(request).queue
        listing = queue.state()
        if not sees_all(request):  # --users: the ids listed are the caller's own
            owners = {i.prompt_id: i.owner for i in (*queue.running_items(), *queue.pending())}
            for key in ("running", "pending"):
                listing[key] = [pid for pid in listing[key] if may_see(request, owners.get(pid, ""))]
        return web.json_response(listing)

    @routes.post("/queue/pause")
    @admin_only  # --users (web/auth/): the queue as a whole is the admins'
    async def pause(request: web.Request) -> web.Response:
        queue = state_of(request).queue
        queue.pause()
        return web.json_response(queue.state())

    @routes.post("/queue/resume")
    @admin_only
    async def resume(request: web.Request) -> web.Response:
        queue = state_of(request).queue
        queue.resume()
        return web.json_response(queue.state())

    @routes.post("/queue/move")
    async def move(request: web.Request) -> web.Response:
        body = await read_json(request, expect=dict)
        prompt_id = _field(body, "prompt_id", (str,), "a prompt id string")
        position = body.get("position")
        queue = state_of(request).queue
        target = next((i for i in queue.pending() if i.prompt_id == prompt_id), None)
        if target is not None and not may_see(request, target.owner):
            return forbidden("that prompt belongs to another user")
        if position == "front":
            position = 0
        elif position == "back":
            position = len(queue.pending()) - 1
        elif isinstance(position, bool) or not isinstance(position, int):
            raise BadRequestBody("'position' must be an integer index into the pending prompts, \"front\" or "
                                 f"\"back\", got {str(position)[:40]!r}", "invalid_request")
        try:
            item = queue.move(prompt_id, position)
        except QueueControlError as exc:
            return _error(exc)
        pending = [i.prompt_id for i in queue.pending()]
        return web.json_response({"prompt_id": item.prompt_id, "number": item.number,
                                  "position": pending.index(item.prompt_id), "pending": pending})

    def priority_listing(request: web.Request) -> web.Response:
        return web.json_response({"priorities": state_of(request).queue.priorities(),
                                  "default_owner": DEFAULT_OWNER, "max_priority": MAX_PRIORITY})

    @routes.get("/queue/priorities")
    async def get_priorities(request: web.Request) -> web.Response:
        return priority_listing(request)

    @routes.post("/queue/priorities")
    @admin_only
    async def set_priority(request: web.Request) -> web.Response:
        body = await read_json(request, expect=dict)
        owner = _field(body, "owner", (str,), "an owner id string")
        priority = _field(body, "priority", (int,), f"an integer from 0 to {MAX_PRIORITY}")
        try:
            state_of(request).queue.set_priority(owner, priority)
        except QueueControlError as exc:
            return _error(exc)
        return priority_listing(request)

    @routes.post("/jobs/{job_id}/retry")
    async def retry(request: web.Request) -> web.Response:
        body = await read_json(request, empty={}, expect=dict)
        front = body.get("front", False)
        if not isinstance(front, bool):
            raise BadRequestBody(f"'front' must be true or false, got {type(front).__name__}", "invalid_request")
        job_id = request.match_info["job_id"]
        state = state_of(request)
        queue = state.queue
        owner = state.store.history_owner(job_id)
        if owner is not None and not may_see(request, owner):
            return forbidden("that job belongs to another user")
        try:
            new_id = queue.retry(job_id, front=front)
        except QueueControlError as exc:
            return _error(exc)
        number = next(i.number for i in queue.pending() if i.prompt_id == new_id)
        return web.json_response({"prompt_id": new_id, "number": number, "retry_of": job_id})

    return routes

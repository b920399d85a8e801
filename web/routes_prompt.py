"""Routes for prompts, the queue, interrupts, history and /free (ComfyUI's shapes, §1.2–§1.4)."""
from __future__ import annotations

import asyncio
from typing import Any, Callable

from aiohttp import web

from web.auth.access import admin_only, forbidden, may_see, owner_of, sees_all
from web.bodies import BadRequestBody, read_json
from web.state import state_of
from web.store import encode_json
from web.submission import request_error, submit_prompt
from web.worker import FreeRequest


def _id_list(body: dict, key: str) -> list[str]:
    value = body.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequestBody(f"'{key}' must be a list of prompt id strings, got {type(value).__name__}",
                             "invalid_request")
    return value


def _int_query(request: web.Request, name: str, default: int | None) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequestBody(f"query parameter '{name}' must be an integer, got {raw[:40]!r}",
                             "invalid_query") from None
    if not -2 ** 63 <= value < 2 ** 63:  # it reaches SQLite's LIMIT/OFFSET, a 64-bit integer
        raise BadRequestBody(f"query parameter '{name}' must fit a 64-bit integer, got {raw[:40]}...", "invalid_query")
    return value


async def _json_off_loop(read: Callable[..., Any], *args: Any) -> web.Response:
    """`read(*args)` as a JSON response, read and encoded (in pieces) in a worker thread: a
    history entry or a queued prompt can be megabytes, which held the event loop (issue 34)."""
    text = await asyncio.to_thread(lambda: encode_json(read(*args)))
    return web.Response(text=text, content_type="application/json")


def prompt_routes() -> web.RouteTableDef:
    routes = web.RouteTableDef()

    @routes.get("/prompt")
    async def get_prompt(request: web.Request) -> web.Response:
        return web.json_response({"exec_info": {"queue_remaining": state_of(request).queue.remaining}})

    @routes.post("/prompt")
    async def post_prompt(request: web.Request) -> web.Response:
        try:
            body = await read_json(request)
        except BadRequestBody as exc:  # keep /prompt's error shape: {error, node_errors}
            return web.json_response(request_error("invalid_prompt", "Invalid request body", exc.message),
                                     status=400)
        status, payload = await submit_prompt(state_of(request), body, owner=owner_of(request),
                                              usage_source=request.headers.get("Comfy-Usage-Source") or None)
        return web.json_response(payload, status=status)

    @routes.get("/queue")
    async def get_queue(request: web.Request) -> web.Response:
        queue = state_of(request).queue
        # --users: only the caller's own prompts (an admin's: all)
        listing = {"queue_running": [item.wire() for item in queue.running_items() if may_see(request, item.owner)],
                   "queue_pending": [item.wire() for item in queue.pending() if may_see(request, item.owner)]}
        return await _json_off_loop(lambda: listing)  # only the encoding leaves the loop

    @routes.post("/queue")
    async def post_queue(request: web.Request) -> web.Response:
        body = await read_json(request, expect=dict)
        queue = state_of(request).queue
        if "delete" in body:
            ids = _id_list(body, "delete")
            others = [i.prompt_id for i in queue.pending() if i.prompt_id in ids and not may_see(request, i.owner)]
            if others:
                return forbidden(f"prompts of another user: {others[:10]}")
        if body.get("clear"):
            if sees_all(request):
                queue.clear()
            else:  # --users: a user's clear empties their own part of the queue
                queue.delete([i.prompt_id for i in queue.pending() if i.owner == owner_of(request)])
        if "delete" in body:
            queue.delete(ids)
        return web.Response(status=200)

    @routes.post("/interrupt")
    async def post_interrupt(request: web.Request) -> web.Response:
        # ComfyUI: an invalid or empty body counts as {} (a global interrupt).
        try:
            body: Any = await read_json(request, empty={})
        except BadRequestBody:
            body = {}
        prompt_id = body.get("prompt_id") if isinstance(body, dict) else None
        queue = state_of(request).queue
        if not sees_all(request):  # --users: only the caller's own running prompts
            running = [i for i in queue.running_items() if not isinstance(prompt_id, str) or i.prompt_id == prompt_id]
            if any(not may_see(request, i.owner) for i in running) and isinstance(prompt_id, str):
                return forbidden("that prompt belongs to another user")
            for item in running:
                if may_see(request, item.owner):
                    queue.interrupt(item.prompt_id)
            return web.Response(status=200)
        queue.interrupt(prompt_id if isinstance(prompt_id, str) else None)
        return web.Response(status=200)

    @routes.post("/free")
    @admin_only  # --users (web/auth/): unloading models affects every user's prompts
    async def post_free(request: web.Request) -> web.Response:
        body = await read_json(request, empty={}, expect=dict)
        state = state_of(request)
        free = FreeRequest(unload_models=bool(body.get("unload_models")), free_memory=bool(body.get("free_memory")))
        if state.worker is not None:
            state.worker.request_free(free)
        return web.Response(status=200)

    @routes.get("/history")
    async def get_history(request: web.Request) -> web.Response:
        max_items = _int_query(request, "max_items", None)
        offset = _int_query(request, "offset", -1)
        if max_items is not None and max_items < 0:
            raise BadRequestBody(f"query parameter 'max_items' must not be negative, got {max_items}", "invalid_query")
        owner = None if sees_all(request) else owner_of(request)  # --users: the caller's own entries
        return await _json_off_loop(lambda: state_of(request).store.history(max_items, offset, owner=owner))

    @routes.get("/history/{prompt_id}")
    async def get_history_entry(request: web.Request) -> web.Response:
        prompt_id = request.match_info["prompt_id"]
        store = state_of(request).store

        if not sees_all(request) and store.history_owner(prompt_id) not in (None, owner_of(request)):
            return web.json_response({})  # --users: another user's entry reads as absent

        def read() -> dict:
            entry = store.history_entry(prompt_id)
            return {prompt_id: entry} if entry is not None else {}

        return await _json_off_loop(read)

    @routes.post("/history")
    async def post_history(request: web.Request) -> web.Response:
        body = await read_json(request, expect=dict)
        store = state_of(request).store
        if "delete" in body:
            ids = _id_list(body, "delete")
            if not sees_all(request):
                others = [pid for pid in ids if store.history_owner(pid) not in (None, owner_of(request))]
                if others:
                    return forbidden(f"history entries of another user: {others[:10]}")
        if body.get("clear"):
            if sees_all(request):
                store.clear_history()
            else:  # --users: a user's clear removes their own entries
                store.delete_history(store.history_ids(owner_of(request)))
        if "delete" in body:
            store.delete_history(ids)
        return web.Response(status=200)

    return routes

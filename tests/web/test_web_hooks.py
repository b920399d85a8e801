"""Hooks for node packs (the compat layer): extra routes, on_prompt handlers, running prompt info."""
from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from tests.web.web_harness import TestServer, chain
from web.app import start_server
from web.bootstrap import build_state
from web.config import ServerConfig


async def test_extra_routes_are_served_bare_and_under_api(tmp_path):
    from tests.web.web_test_nodes import make_test_registry

    routes = web.RouteTableDef()

    @routes.get("/mypack/hello")
    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"hello": request.app is not None})

    state = build_state(ServerConfig(base_dir=tmp_path, port=0, custom_node_dirs=()), registry=make_test_registry())
    state.extra_routes.append(routes)
    runner, urls = await start_server(state, frontend=False)
    async with aiohttp.ClientSession() as session:
        for path in ("/mypack/hello", "/api/mypack/hello"):
            async with session.get(urls[0] + path) as resp:
                assert resp.status == 200 and await resp.json() == {"hello": True}
    await runner.cleanup()


async def test_on_prompt_handlers_rewrite_bodies_and_failures_are_skipped(server: TestServer):
    seen = []

    def broken(body):
        raise RuntimeError("pack bug")

    def rewrite(body):
        seen.append(dict(body))
        body["prompt"]["1"]["inputs"]["value"] = 42
        return body

    server.state.on_prompt_handlers.extend([broken, rewrite])
    status, body = await server.post_prompt(chain(1))
    assert status == 200 and seen
    entry = await server.wait_history(body["prompt_id"])
    assert entry["outputs"]["3"]["values"] == [44]


async def test_running_prompt_owner_is_visible(server: TestServer):
    assert server.state.running_client_id is None and server.state.running_prompt_id is None
    _, body = await server.post_prompt(chain(1, steps=10000, delay=0.05), client_id="owner-7")
    while server.state.queue.running is None:
        await asyncio.sleep(0.01)
    assert server.state.running_client_id == "owner-7"
    assert server.state.running_prompt_id == body["prompt_id"]
    server.state.queue.interrupt()
    await server.wait_history(body["prompt_id"])

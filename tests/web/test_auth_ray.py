"""--users with --ray (web/ray_backend/): the same middleware stands in front of the dispatcher's
server, and prompts run on the worker actors keep their owner."""
from __future__ import annotations

import asyncio

import aiohttp

from tests.web.auth_harness import CHEAP, PASSWORD, bearer
from tests.web.ray_harness import start_ray_server
from tests.web.ray_test_nodes import gated
from web.auth.settings import AuthSettings


async def test_ray_mode_needs_credentials_and_keeps_owners(ray_cluster, tmp_path):
    server = await start_ray_server(tmp_path, auth=AuthSettings())
    server.state.auth.store.hasher = CHEAP
    for name in ("alice", "bob"):
        server.state.auth.store.add_user(name, PASSWORD, "user")
    url = server.url
    try:
        async with aiohttp.ClientSession() as anonymous:
            for method, path in (("GET", "/system_stats"), ("GET", "/queue"), ("POST", "/prompt"),
                                 ("GET", "/ws"), ("GET", "/history")):
                async with anonymous.request(method, url + path) as resp:
                    assert resp.status == 401, (method, path)
        async with bearer(server, "alice") as alice, bearer(server, "bob") as bob:
            async with alice.get(f"{url}/system_stats") as resp:
                assert resp.status == 200
            async with alice.post(f"{url}/prompt", json={"prompt": gated(3)}) as resp:
                assert resp.status == 200, await resp.text()
                pid = (await resp.json())["prompt_id"]
            for _ in range(3000):
                async with alice.get(f"{url}/history/{pid}") as resp:
                    if await resp.json():
                        break
                await asyncio.sleep(0.02)
            assert server.state.store.history_owner(pid) == "alice"
            async with bob.get(f"{url}/history/{pid}") as resp:
                assert await resp.json() == {}
    finally:
        await server.close()

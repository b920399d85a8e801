"""--users over /api/v2 (web/routes_v2.py): jobs and assets are their owner's (web/auth/)."""
from __future__ import annotations

import asyncio
import io

import aiohttp
from PIL import Image

from tests.web.auth_harness import bearer, start_auth_server
from tests.web.web_harness import chain


async def _get(client, url):
    async with client.get(url) as resp:
        return resp.status, await resp.read()


async def test_v2_jobs_and_assets_are_the_owners(tmp_path):
    server = await start_auth_server(tmp_path)
    url = server.url
    try:
        async with bearer(server, "alice") as alice, bearer(server, "bob") as bob, bearer(server, "admin") as admin:
            async with alice.post(f"{url}/api/v2/jobs", json={"workflow": chain(4)}) as resp:
                assert resp.status == 201, await resp.text()
                job = await resp.json()
            for _ in range(1000):
                async with alice.get(f"{url}/api/v2/jobs/{job['id']}") as resp:
                    done = await resp.json()
                if done["status"] == "succeeded":
                    break
                await asyncio.sleep(0.02)
            assert done["status"] == "succeeded"
            assert server.state.store.history_owner(job["id"]) == "alice"
            out_url = done["outputs"][0]["url"]
            assert (await _get(alice, out_url))[0] == 200
            assert (await _get(admin, out_url))[0] == 200
            assert (await _get(bob, out_url))[0] == 404
            for path in ("", "/workflow", "/events"):
                assert (await _get(bob, f"{url}/api/v2/jobs/{job['id']}{path}"))[0] == 404, path
            async with bob.post(f"{url}/api/v2/jobs/{job['id']}/cancel") as resp:
                assert resp.status == 404
            async with bob.get(f"{url}/api/v2/jobs") as resp:
                assert (await resp.json())["jobs"] == []
            async with alice.get(f"{url}/api/v2/jobs") as resp:
                assert [j["id"] for j in (await resp.json())["jobs"]] == [job["id"]]

            buf = io.BytesIO()
            Image.new("RGB", (3, 3), (1, 2, 3)).save(buf, format="PNG")
            form = aiohttp.FormData()
            form.add_field("file_path", "mine.png")
            form.add_field("file", buf.getvalue(), filename="mine.png", content_type="image/png")
            async with alice.post(f"{url}/api/v2/assets", data=form) as resp:
                assert resp.status == 201, await resp.text()
                asset = await resp.json()
            for path in ("", "/content"):
                assert (await _get(alice, f"{url}/api/v2/assets/{asset['id']}{path}"))[0] == 200
                assert (await _get(bob, f"{url}/api/v2/assets/{asset['id']}{path}"))[0] == 404
            async with bob.delete(f"{url}/api/v2/assets/{asset['id']}") as resp:
                assert resp.status == 404
            async with alice.delete(f"{url}/api/v2/assets/{asset['id']}") as resp:
                assert resp.status == 204
    finally:
        await server.close()


async def test_v2_submissions_count_against_the_users_quota(tmp_path):
    from web.auth.settings import AuthSettings

    server = await start_auth_server(tmp_path, settings=AuthSettings(queue_quota=1))
    url = server.url
    try:
        async with bearer(server, "alice") as alice, bearer(server, "admin") as admin:
            async with admin.post(f"{url}/api/queue/pause") as resp:
                assert resp.status == 200
            async with alice.post(f"{url}/api/v2/jobs", json={"workflow": chain(1)}) as resp:
                assert resp.status == 201
            async with alice.post(f"{url}/api/v2/jobs", json={"workflow": chain(2)}) as resp:
                assert resp.status == 429
                assert (await resp.json())["error"]["code"] == "queue_quota"
    finally:
        await server.close()


async def test_v1_assets_content_and_maintenance(tmp_path):
    from web.auth.settings import AuthSettings
    from tests.web.web_harness import start_test_server
    from tests.web.auth_harness import CHEAP, PASSWORD

    server = await start_test_server(tmp_path / "v1", auth=AuthSettings(), enable_assets=True)
    server.state.auth.store.hasher = CHEAP
    for name, role in (("alice", "user"), ("bob", "user"), ("admin", "admin")):
        server.state.auth.store.add_user(name, PASSWORD, role)
    url = server.url
    try:
        async with bearer(server, "alice") as alice, bearer(server, "bob") as bob, bearer(server, "admin") as admin:
            buf = io.BytesIO()
            Image.new("RGB", (3, 3), (9, 8, 7)).save(buf, format="PNG")
            form = aiohttp.FormData()
            form.add_field("file", buf.getvalue(), filename="v1mine.png", content_type="image/png")
            form.add_field("tags", "input")
            async with alice.post(f"{url}/api/assets", data=form) as resp:
                assert resp.status in (200, 201), await resp.text()
                asset = await resp.json()
            assert (await _get(alice, f"{url}/api/assets/{asset['id']}/content"))[0] == 200
            assert (await _get(bob, f"{url}/api/assets/{asset['id']}/content"))[0] == 404
            async with bob.post(f"{url}/api/assets/prune") as resp:
                assert resp.status == 403
            async with bob.post(f"{url}/api/assets/seed", json={"roots": ["input"]}) as resp:
                assert resp.status == 403
            async with admin.post(f"{url}/api/assets/seed/cancel") as resp:
                assert resp.status != 403
    finally:
        await server.close()

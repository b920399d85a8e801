"""--users: one user cannot read, cancel or download another user's prompts, history, jobs,
outputs, uploads or WebSocket events; per-user rate limit and queue quota (web/auth/)."""
from __future__ import annotations

import asyncio
import io
import json

import aiohttp
from PIL import Image

from tests.web.auth_harness import bearer, start_auth_server
from tests.web.web_harness import chain, collect_until_done
from web.auth.settings import AuthSettings


async def _post(client, url, prompt, **body):
    async with client.post(f"{url}/prompt", json={"prompt": prompt, **body}) as resp:
        return resp.status, await resp.json()


async def _get(client, url):
    async with client.get(url) as resp:
        return resp.status, (await resp.json() if resp.content_type == "application/json" else await resp.read())


async def _finished(client, url, prompt_id):
    for _ in range(1000):
        status, entry = await _get(client, f"{url}/history/{prompt_id}")
        if entry:
            return entry[prompt_id]
        await asyncio.sleep(0.02)
    raise AssertionError(f"{prompt_id} did not finish")


async def test_history_jobs_and_outputs_are_the_owners(tmp_path):
    server = await start_auth_server(tmp_path)
    url = server.url
    try:
        async with bearer(server, "alice") as alice, bearer(server, "bob") as bob, bearer(server, "admin") as admin:
            status, body = await _post(alice, url, chain(7, prefix="alicepic"))
            assert status == 200
            pid = body["prompt_id"]
            entry = await _finished(alice, url, pid)
            image = entry["outputs"]["3"]["images"][0]
            assert image["filename"] == "alicepic_00009.png"
            assert server.state.store.history_owner(pid) == "alice"
            view = f"{url}/view?filename={image['filename']}&subfolder=&type=output"
            assert (await _get(alice, view))[0] == 200
            assert (await _get(admin, view))[0] == 200
            assert (await _get(bob, view))[0] == 404  # guessing the name gets nothing
            assert (await _get(bob, f"{url}/view?filename=alicepic_00009.png"))[0] == 404
            assert await _get(bob, f"{url}/history") == (200, {})
            assert await _get(bob, f"{url}/history/{pid}") == (200, {})
            assert pid in (await _get(alice, f"{url}/history"))[1]
            assert pid in (await _get(admin, f"{url}/history?max_items=5"))[1]
            assert (await _get(bob, f"{url}/api/jobs"))[1]["jobs"] == []
            assert [j["id"] for j in (await _get(alice, f"{url}/api/jobs"))[1]["jobs"]] == [pid]
            assert (await _get(bob, f"{url}/api/jobs/{pid}"))[0] == 404
            async with bob.post(f"{url}/api/jobs/{pid}/retry") as resp:
                assert resp.status == 403
            async with bob.post(f"{url}/history", json={"delete": [pid]}) as resp:
                assert resp.status == 403
            async with bob.post(f"{url}/history", json={"clear": True}) as resp:  # clears only bob's
                assert resp.status == 200
            assert pid in (await _get(alice, f"{url}/history"))[1]
            # bob running the same workflow (a cache hit) may read the same file: he made it too
            status, body = await _post(bob, url, chain(7, prefix="alicepic"))
            await _finished(bob, url, body["prompt_id"])
            assert (await _get(bob, view))[0] == 200
    finally:
        await server.close()


async def test_the_queue_shows_and_changes_only_ones_own_prompts(tmp_path):
    server = await start_auth_server(tmp_path)
    url = server.url
    try:
        async with bearer(server, "alice") as alice, bearer(server, "bob") as bob, bearer(server, "admin") as admin:
            async with admin.post(f"{url}/api/queue/pause") as resp:
                assert resp.status == 200
            a1 = (await _post(alice, url, chain(1)))[1]["prompt_id"]
            a2 = (await _post(alice, url, chain(2)))[1]["prompt_id"]
            b1 = (await _post(bob, url, chain(3)))[1]["prompt_id"]
            assert {i.prompt_id: i.owner for i in server.state.queue.pending()} == {a1: "alice", a2: "alice",
                                                                                   b1: "bob"}
            listing = (await _get(bob, f"{url}/queue"))[1]
            assert [row[1] for row in listing["queue_pending"]] == [b1]
            assert len((await _get(admin, f"{url}/queue"))[1]["queue_pending"]) == 3
            assert (await _get(bob, f"{url}/api/queue/state"))[1]["pending"] == [b1]
            async with bob.post(f"{url}/queue", json={"delete": [a1]}) as resp:
                assert resp.status == 403
            async with bob.post(f"{url}/api/queue/move", json={"prompt_id": a2, "position": "front"}) as resp:
                assert resp.status == 403
            async with bob.post(f"{url}/api/jobs/{a1}/cancel") as resp:
                assert (await resp.json())["cancelled"] is False
            async with bob.post(f"{url}/queue", json={"clear": True}) as resp:
                assert resp.status == 200
            assert sorted(i.prompt_id for i in server.state.queue.pending()) == sorted([a1, a2])
            async with alice.post(f"{url}/queue", json={"delete": [a1]}) as resp:
                assert resp.status == 200
            assert [i.prompt_id for i in server.state.queue.pending()] == [a2]
    finally:
        await server.close()


async def test_interrupt_reaches_only_ones_own_running_prompt(tmp_path):
    server = await start_auth_server(tmp_path)
    url = server.url
    try:
        async with bearer(server, "alice") as alice, bearer(server, "bob") as bob:
            pid = (await _post(alice, url, chain(1, steps=200, delay=0.05)))[1]["prompt_id"]
            for _ in range(500):
                if server.state.queue.running_items():
                    break
                await asyncio.sleep(0.01)
            item = server.state.queue.running_items()[0]
            async with bob.post(f"{url}/interrupt", json={"prompt_id": pid}) as resp:
                assert resp.status == 403
            async with bob.post(f"{url}/interrupt", json={}) as resp:  # a global interrupt: bob's own only
                assert resp.status == 200
            async with bob.post(f"{url}/api/jobs/{pid}/cancel") as resp:
                assert (await resp.json())["cancelled"] is False
            assert not item.interrupt.is_set()
            async with alice.post(f"{url}/interrupt", json={"prompt_id": pid}) as resp:
                assert resp.status == 200
            assert item.interrupt.is_set()
            entry = await _finished(alice, url, pid)
            assert entry["status"]["status_str"] == "error"
    finally:
        await server.close()


async def test_websocket_events_and_client_ids_stay_with_their_user(tmp_path):
    server = await start_auth_server(tmp_path)
    url = server.url
    try:
        async with bearer(server, "alice") as alice, bearer(server, "bob") as bob:
            ws_a = await alice.ws_connect(f"{url}/ws?clientId=alice-tab")
            assert json.loads((await ws_a.receive(timeout=10)).data)["data"]["sid"] == "alice-tab"
            # bob asking for alice's client id gets a fresh one, never her events
            ws_b = await bob.ws_connect(f"{url}/ws?clientId=alice-tab")
            bob_sid = json.loads((await ws_b.receive(timeout=10)).data)["data"]["sid"]
            assert bob_sid != "alice-tab"
            assert server.state.hub.clients["alice-tab"].ws is not None
            status, body = await _post(bob, url, chain(1), client_id="alice-tab")
            assert status == 403 and body["error"]["type"] == "forbidden_client_id"
            status, body = await _post(alice, url, chain(5, preview=1), client_id="alice-tab")
            assert status == 200
            frames = await collect_until_done(ws_a, body["prompt_id"])
            assert any(isinstance(f, dict) and f["type"] == "executed" for f in frames)
            assert any(isinstance(f, bytes) for f in frames)  # previews
            # bob's socket saw nothing of it: only status broadcasts, if anything
            leaked = []
            while True:
                try:
                    msg = await ws_b.receive(timeout=0.3)
                except asyncio.TimeoutError:
                    break
                if msg.type == aiohttp.WSMsgType.BINARY:
                    leaked.append("preview")
                elif msg.type == aiohttp.WSMsgType.TEXT and json.loads(msg.data)["type"] != "status":
                    leaked.append(json.loads(msg.data))
            assert leaked == []
            # a prompt without a client id goes to the owner's `user:<name>` channel, nobody else's
            ws_u = await alice.ws_connect(f"{url}/ws?clientId=user:alice")
            await ws_u.receive(timeout=10)
            ws_x = await bob.ws_connect(f"{url}/ws?clientId=user:alice")
            assert json.loads((await ws_x.receive(timeout=10)).data)["data"]["sid"] != "user:alice"
            status, body = await _post(alice, url, chain(6))
            assert status == 200
            frames = await collect_until_done(ws_u, body["prompt_id"])
            assert any(isinstance(f, dict) and f["type"] == "executed" for f in frames)
            await ws_u.close()
            await ws_x.close()
            # a viewer's socket may not queue prompts
            async with bearer(server, "vera") as vera:
                ws_v = await vera.ws_connect(f"{url}/ws")
                await ws_v.receive(timeout=10)
                await ws_v.send_json({"type": "queue_prompt", "data": {"prompt": chain(1)}})
                while True:
                    reply = json.loads((await ws_v.receive(timeout=10)).data)
                    if reply["type"] != "status":
                        break
                assert reply["type"] == "prompt_rejected"
                await ws_v.close()
            await ws_a.close()
            await ws_b.close()
    finally:
        await server.close()


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), (0, 255, 0)).save(buf, format="PNG")
    return buf.getvalue()


async def _upload(client, url, name, overwrite=False):
    form = aiohttp.FormData()
    form.add_field("image", _png(), filename=name, content_type="image/png")
    if overwrite:
        form.add_field("overwrite", "true")
    async with client.post(f"{url}/upload/image", data=form) as resp:
        return resp.status, await resp.json()


async def test_uploads_are_the_uploaders(tmp_path):
    server = await start_auth_server(tmp_path)
    url = server.url
    try:
        (server.state.env.input_dir / "shared.png").write_bytes(_png())  # put there by hand: everyone's
        async with bearer(server, "alice") as alice, bearer(server, "bob") as bob:
            status, body = await _upload(alice, url, "secret.png")
            assert status == 200 and body["name"] == "secret.png"
            view = f"{url}/view?filename=secret.png&type=input"
            assert (await _get(alice, view))[0] == 200
            assert (await _get(bob, view))[0] == 404
            status, body = await _upload(bob, url, "secret.png", overwrite=True)
            assert status == 403
            assert (await _get(bob, f"{url}/view?filename=shared.png&type=input"))[0] == 200
            # a mask upload may not read another user's image either
            form = aiohttp.FormData()
            form.add_field("image", _png(), filename="mask.png", content_type="image/png")
            form.add_field("original_ref", json.dumps({"filename": "secret.png", "type": "input"}))
            async with bob.post(f"{url}/upload/mask", data=form) as resp:
                assert resp.status == 404
            # nor may bob's prompt read it (the string input names alice's upload)
            status, body = await _post(bob, url, chain(1, tag="secret.png"))
            assert status == 403 and body["error"]["type"] == "forbidden_input"
            assert (await _post(bob, url, chain(1, tag="shared.png")))[0] == 200
            assert (await _post(alice, url, chain(1, tag="secret.png")))[0] == 200
    finally:
        await server.close()


async def test_prompt_rate_and_queue_quota_answer_429(tmp_path):
    server = await start_auth_server(tmp_path, settings=AuthSettings(prompts_per_minute=3, queue_quota=2))
    url = server.url
    now = [5000.0]
    server.state.auth.clock = lambda: now[0]
    try:
        async with bearer(server, "alice") as alice, bearer(server, "bob") as bob, bearer(server, "admin") as admin:
            async with admin.post(f"{url}/api/queue/pause") as resp:
                assert resp.status == 200
            assert (await _post(alice, url, chain(1)))[0] == 200
            assert (await _post(alice, url, chain(2)))[0] == 200
            status, body = await _post(alice, url, chain(3))
            assert status == 429 and body["error"]["type"] == "queue_quota"
            assert (await _post(bob, url, chain(3)))[0] == 200  # per user
            async with alice.post(f"{url}/queue", json={"clear": True}) as resp:
                assert resp.status == 200
            assert (await _post(alice, url, chain(4)))[0] == 200  # the third this minute
            status, body = await _post(alice, url, chain(5))
            assert status == 429 and body["error"]["type"] == "rate_limited"
            assert body["error"]["retry_after"] > 0
            now[0] += 61
            assert (await _post(alice, url, chain(5)))[0] == 200
    finally:
        await server.close()


async def test_user_data_lives_in_each_users_own_folder(tmp_path):
    server = await start_auth_server(tmp_path)
    url = server.url
    user_dir = server.state.env.user_dir
    try:
        async with bearer(server, "alice") as alice, bearer(server, "bob") as bob:
            async with alice.post(f"{url}/userdata/workflows%2Fmine.json", data=b'{"a": 1}') as resp:
                assert resp.status == 200
            async with alice.post(f"{url}/settings/Comfy.Theme", json="dark") as resp:
                assert resp.status == 200
            assert (user_dir / "alice" / "workflows" / "mine.json").read_bytes() == b'{"a": 1}'
            assert not (user_dir / "default" / "workflows" / "mine.json").exists()
            assert (await _get(alice, f"{url}/userdata/workflows%2Fmine.json"))[0] == 200
            assert (await _get(bob, f"{url}/userdata/workflows%2Fmine.json"))[0] == 404
            assert (await _get(bob, f"{url}/userdata?dir=workflows"))[1] == []
            assert (await _get(alice, f"{url}/userdata?dir=workflows"))[1] == ["mine.json"]
            assert (await _get(bob, f"{url}/settings/Comfy.Theme"))[1] is None
            assert (await _get(alice, f"{url}/settings/Comfy.Theme"))[1] == "dark"
            async with bob.delete(f"{url}/userdata/workflows%2Fmine.json") as resp:
                assert resp.status == 404
            assert (user_dir / "alice" / "workflows" / "mine.json").exists()
    finally:
        await server.close()

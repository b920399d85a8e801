"""Comfy's API v2 served natively (web/routes_v2.py, web/v2/): every route and its errors, with
our own HTTP client against a live server running the tiny test nodes (no models)."""
from __future__ import annotations

import asyncio
import io
import json
import time

import aiohttp
import pytest
from blake3 import blake3

from tests.web.web_harness import chain, start_test_server

ASSET = {"__type": "core/ASSET"}


def _png(red: int = 10) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (3, 3), (red, 0, 0)).save(buf, format="PNG")
    return buf.getvalue()


def _digest(data: bytes) -> str:
    return "blake3:" + blake3(data).hexdigest()


async def _post_job(server, body: dict, key: str | None = None) -> tuple[int, dict]:
    headers = {"Idempotency-Key": key} if key is not None else {}
    async with server.session.post(f"{server.url}/api/v2/jobs", json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def _get(server, path: str) -> tuple[int, dict]:
    async with server.session.get(f"{server.url}{path}") as resp:
        return resp.status, await resp.json()


async def _wait_status(server, job_id: str, wanted: set[str], timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, job = await _get(server, f"/api/v2/jobs/{job_id}")
        assert status == 200, job
        if job["status"] in wanted:
            return job
        await asyncio.sleep(0.02)
    raise AssertionError(f"job {job_id} never reached {wanted}: {job}")


async def _events(server, job_id: str, timeout: float = 20.0) -> list[tuple[str, dict]]:
    """Every SSE event of the job's stream until the server ends it."""
    events: list[tuple[str, dict]] = []
    name = None
    async with server.session.get(f"{server.url}/api/v2/jobs/{job_id}/events",
                                  timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        async for raw in resp.content:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[len("data: "):])))
            assert not line.startswith("id:")  # no replay cursor: v2's stream is live only
    return events


async def _upload(server, data: bytes, *, file_path: str = "photo.png", **fields: str) -> tuple[int, dict]:
    form = aiohttp.FormData()
    form.add_field("file_path", file_path)
    for name, value in fields.items():
        form.add_field(name, value)
    form.add_field("file", data, filename=file_path, content_type="image/png")
    async with server.session.post(f"{server.url}/api/v2/assets", data=form) as resp:
        return resp.status, await resp.json()


# -- health ------------------------------------------------------------------------------------
async def test_health(server):
    status, body = await _get(server, "/api/v2/health")
    assert status == 200
    assert body["status"] == "healthy" and body["queue_pending"] == 0 and body["worker"] == "started"


# -- submit --------------------------------------------------------------------------------------
async def test_submit_runs_and_reports_the_job(server):
    status, job = await _post_job(server, {"workflow": chain(4), "metadata": {"client": "acme"}})
    assert status == 201, job
    assert job["status"] in ("queued", "running", "succeeded")
    assert job["urls"] == {"self": f"/api/v2/jobs/{job['id']}", "events": f"/api/v2/jobs/{job['id']}/events",
                           "cancel": f"/api/v2/jobs/{job['id']}/cancel"}
    assert job["metadata"] == {"client": "acme"}
    done = await _wait_status(server, job["id"], {"succeeded"})
    [out] = done["outputs"]
    assert out["node_id"] == "3" and out["type"] == "image" and out["content_type"] == "image/png"
    assert out["url"] == f"{server.url}/api/v2/assets/{out['id']}/content" and out["job_id"] == job["id"]
    assert done["completed_at"] and done["metrics"]["execution_ms"] is not None and done["error"] is None
    # the same ids on every read
    _, again = await _get(server, f"/api/v2/jobs/{job['id']}")
    assert again["outputs"][0]["id"] == out["id"]
    async with server.session.get(out["url"]) as resp:
        assert resp.status == 200
        assert await resp.read() == (server.state.env.output_dir / out["name"]).read_bytes()


@pytest.mark.parametrize("body,status,code", [
    ({"workflow": []}, 422, "invalid_workflow"),
    ({}, 422, "invalid_workflow"),
    ({"workflow": chain(), "webhook_url": "http://x"}, 422, "invalid_workflow"),
    ({"workflow": {"1": {"class_type": "NoSuchNode", "inputs": {}}}}, 422, "invalid_workflow"),
    ({"workflow": chain(), "metadata": {"bad key!": "v"}}, 422, "metadata_invalid"),
    ({"workflow": chain(), "metadata": {"k": "a\u202eb"}}, 422, "metadata_invalid"),
    ({"workflow": chain(), "metadata": {f"k{i}": "v" for i in range(17)}}, 422, "metadata_invalid"),
    ({"workflow": chain(), "metadata": "a string"}, 422, "metadata_invalid"),
    ({"workflow": chain(), "extra_data": {"client_id": "x"}}, 400, "invalid_request"),
])
async def test_submit_errors(server, body, status, code):
    got, reply = await _post_job(server, body)
    assert got == status and reply["error"]["code"] == code, reply
    assert server.state.queue.remaining == 0


async def test_submit_rejects_a_body_that_is_not_json(server):
    async with server.session.post(f"{server.url}/api/v2/jobs", data=b"{nope") as resp:
        assert resp.status == 400 and (await resp.json())["error"]["code"] == "invalid_request"


async def test_invalid_node_inputs_name_the_node(server):
    workflow = chain()
    workflow["2"]["inputs"]["steps"] = "many"
    status, reply = await _post_job(server, {"workflow": workflow})
    assert status == 422 and reply["error"]["code"] == "invalid_workflow"
    assert "2" in reply["error"]["details"]["node_errors"]


async def test_idempotency_keys_are_single_use(server):
    body = {"workflow": chain(1)}
    status, first = await _post_job(server, body, key="key-1")
    assert status == 201
    status, again = await _post_job(server, body, key="key-1")
    assert status == 422 and again["error"]["code"] == "idempotency_key_reuse"
    assert again["error"]["details"] == {"job_id": first["id"], "same_body": True}
    status, other = await _post_job(server, {"workflow": chain(2)}, key="key-1")
    assert status == 422 and other["error"]["details"] == {"job_id": first["id"], "same_body": False}
    # a refused submission does not spend its key
    bad = chain(3)
    bad["2"]["inputs"]["steps"] = "x"
    assert (await _post_job(server, {"workflow": bad}, key="key-2"))[0] == 422
    assert (await _post_job(server, {"workflow": chain(3)}, key="key-2"))[0] == 201
    status, reply = await _post_job(server, body, key="k" * 256)
    assert status == 400 and reply["error"]["code"] == "invalid_request"


async def test_idempotency_keys_and_cancellations_survive_a_restart(tmp_path):
    server = await start_test_server(tmp_path)
    try:
        status, job = await _post_job(server, {"workflow": chain(1)}, key="durable")
        assert status == 201
        await _wait_status(server, job["id"], {"succeeded"})
    finally:
        await server.close()
    server = await start_test_server(tmp_path)
    try:
        status, reply = await _post_job(server, {"workflow": chain(1)}, key="durable")
        assert status == 422 and reply["error"]["details"]["job_id"] == job["id"]
        assert (await _get(server, f"/api/v2/jobs/{job['id']}"))[1]["status"] == "succeeded"
    finally:
        await server.close()


def _editor_workflow(value: int) -> dict:
    return {"last_node_id": 2, "last_link_id": 1, "version": 0.4,
            "nodes": [{"id": 1, "type": "WebTestConst", "mode": 0, "inputs": [],
                       "outputs": [{"name": "INT", "type": "INT", "links": [1]}], "widgets_values": [value]},
                      {"id": 2, "type": "WebTestOutput", "mode": 0,
                       "inputs": [{"name": "value", "type": "INT", "link": 1}], "outputs": [],
                       "widgets_values": [0, "edited"]}],
            "links": [[1, 1, 0, 2, 0, "INT"]]}


async def test_an_editor_workflow_is_converted_and_kept(server):
    saved = _editor_workflow(9)
    status, job = await _post_job(server, {"workflow": saved})
    assert status == 201, job
    done = await _wait_status(server, job["id"], {"succeeded"})
    assert done["outputs"][0]["name"] == "edited_00009.png"
    status, default = await _get(server, f"/api/v2/jobs/{job['id']}/workflow")
    assert status == 200 and default == {"workflow": saved, "format": "save"}
    status, api = await _get(server, f"/api/v2/jobs/{job['id']}/workflow?format=api")
    assert api["format"] == "api"
    assert api["workflow"]["2"]["inputs"] == {"value": ["1", 0], "filename_prefix": "edited"}
    unknown = _editor_workflow(1)
    unknown["nodes"][0]["type"] = "NotHere"
    status, reply = await _post_job(server, {"workflow": unknown})
    assert status == 422 and reply["error"]["details"]["node_types"] == ["NotHere"]


async def test_workflow_of_an_api_job(server):
    status, job = await _post_job(server, {"workflow": chain(2)})
    status, wf = await _get(server, f"/api/v2/jobs/{job['id']}/workflow")
    assert status == 200 and wf == {"workflow": chain(2), "format": "api"}
    status, reply = await _get(server, f"/api/v2/jobs/{job['id']}/workflow?format=save")
    assert status == 404 and reply["error"]["code"] == "not_found"
    status, reply = await _get(server, f"/api/v2/jobs/{job['id']}/workflow?format=png")
    assert status == 400 and reply["error"]["code"] == "invalid_request"


# -- get / list ----------------------------------------------------------------------------------
async def test_unknown_jobs_are_404(server):
    for path in ("/api/v2/jobs/7f3d2c1b-9a8e-4d6f-b012-3c4d5e6f7a8b", "/api/v2/jobs/not-a-uuid",
                 "/api/v2/jobs/not-a-uuid/workflow"):
        status, reply = await _get(server, path)
        assert status == 404 and reply["error"]["code"] == "not_found"
    async with server.session.post(f"{server.url}/api/v2/jobs/7f3d2c1b-9a8e-4d6f-b012-3c4d5e6f7a8b/cancel") as resp:
        assert resp.status == 404


async def test_a_prompt_from_post_prompt_is_a_job_too(server):
    status, body = await server.post_prompt(chain(6))
    assert status == 200
    events = await _events(server, body["prompt_id"])  # no live events: the stream polls to the end
    assert events[-1] == ("status", {"status": "succeeded"})
    assert [e for e, _ in events].count("output") == 1


async def test_list_pages_filters_and_errors(server):
    ids = []
    for value, label in ((1, "a"), (2, "b"), (3, "a")):
        status, job = await _post_job(server, {"workflow": chain(value), "metadata": {"team": label}})
        ids.append(job["id"])
        await _wait_status(server, job["id"], {"succeeded"})
    status, page = await _get(server, "/api/v2/jobs?limit=2")
    assert status == 200 and [j["id"] for j in page["jobs"]] == ids[::-1][:2]
    assert page["jobs"][0]["status"] == "succeeded" and page["jobs"][0]["metadata"] == {"team": "a"}
    status, rest = await _get(server, f"/api/v2/jobs?limit=2&cursor={page['next_cursor']}")
    assert [j["id"] for j in rest["jobs"]] == [ids[0]] and "next_cursor" not in rest
    status, team = await _get(server, "/api/v2/jobs?metadata[team]=a")
    assert [j["id"] for j in team["jobs"]] == [ids[2], ids[0]]
    assert (await _get(server, "/api/v2/jobs?status=queued"))[1]["jobs"] == []
    for query, code in (("limit=0", "invalid_request"), ("limit=101", "invalid_request"),
                        ("limit=x", "invalid_request"), ("cursor=zzz", "invalid_cursor"),
                        ("status=done", "invalid_request"), ("metadata[bad key]=1", "invalid_metadata_filter"),
                        ("metadata[a]=1&metadata[b]=1&metadata[c]=1&metadata[d]=1", "invalid_metadata_filter")):
        status, reply = await _get(server, f"/api/v2/jobs?{query}")
        assert status == 400 and reply["error"]["code"] == code, query


# -- cancel --------------------------------------------------------------------------------------
async def test_cancel_pending_removes_and_running_interrupts(server):
    status, running = await _post_job(server, {"workflow": chain(1, steps=200, delay=0.05)})
    status, pending = await _post_job(server, {"workflow": chain(2, prefix="second")})
    await _wait_status(server, running["id"], {"running"})
    assert (await _get(server, f"/api/v2/jobs/{pending['id']}"))[1]["queue_position"] == 1
    async with server.session.post(f"{server.url}/api/v2/jobs/{pending['id']}/cancel") as resp:
        assert resp.status == 200 and (await resp.json())["status"] == "canceled"
    assert not server.state.queue.contains(pending["id"])
    async with server.session.post(f"{server.url}/api/v2/jobs/{running['id']}/cancel") as resp:
        assert (await resp.json())["status"] in ("canceling", "canceled")
    done = await _wait_status(server, running["id"], {"canceled"})
    assert done["error"] is None
    async with server.session.post(f"{server.url}/api/v2/jobs/{running['id']}/cancel") as resp:
        assert (await resp.json())["status"] == "canceled"  # idempotent
    assert (await _get(server, f"/api/v2/jobs/{pending['id']}"))[1]["status"] == "canceled"
    assert (await _events(server, pending["id"])) == [("status", {"status": "canceled"})]
    listed = {j["id"]: j["status"] for j in (await _get(server, "/api/v2/jobs"))[1]["jobs"]}
    assert listed == {running["id"]: "canceled", pending["id"]: "canceled"}


# -- events --------------------------------------------------------------------------------------
async def test_events_of_a_live_job(server):
    status, job = await _post_job(server, {"workflow": chain(3, steps=10, delay=0.05, preview=1)})
    events = await _events(server, job["id"])
    kinds = [k for k, _ in events]
    assert kinds[0] == "status" and kinds[-1] == "status" and events[-1][1] == {"status": "succeeded"}
    assert "progress" in kinds and "preview" in kinds and kinds.count("output") == 1
    preview = next(d for k, d in events if k == "preview")
    assert preview["node_id"] == "2" and preview["content_type"] == "image/jpeg" and preview["data_base64"]
    progress = [d for k, d in events if k == "progress"]
    assert all(0.0 <= p["value"] <= 1.0 and p["nodes_total"] == 3 for p in progress)
    output = next(d for k, d in events if k == "output")
    assert kinds.index("output") < len(kinds) - 1  # outputs come before the terminal status
    assert output["id"] == (await _get(server, f"/api/v2/jobs/{job['id']}"))[1]["outputs"][0]["id"]


async def test_events_of_a_failing_job_and_its_error(server):
    workflow = chain(1, steps=10, delay=0.1)  # long enough for the stream to attach while it runs
    workflow["3"] = {"class_type": "WebTestFail", "inputs": {"value": ["2", 0], "message": "kaput"}}
    workflow["4"] = {"class_type": "WebTestOutput", "inputs": {"value": ["3", 0], "filename_prefix": "never"}}
    status, job = await _post_job(server, {"workflow": workflow})
    events = await _events(server, job["id"])
    assert events[-1] == ("status", {"status": "failed"})
    logs = [d for k, d in events if k == "log"]
    assert logs[-1]["level"] == "error" and "kaput" in logs[-1]["message"]
    _, failed = await _get(server, f"/api/v2/jobs/{job['id']}")
    assert failed["error"]["code"] == "node_execution_error" and failed["error"]["node_id"] == "3"
    assert failed["error"]["class_type"] == "WebTestFail" and "kaput" in failed["error"]["message"]


async def test_events_after_the_end_give_outputs_then_status(server):
    status, job = await _post_job(server, {"workflow": chain(5)})
    await _wait_status(server, job["id"], {"succeeded"})
    events = await _events(server, job["id"])
    assert [k for k, _ in events] == ["output", "status"] and events[1][1] == {"status": "succeeded"}


async def test_events_of_an_unknown_job_is_404(server):
    async with server.session.get(f"{server.url}/api/v2/jobs/7f3d2c1b-9a8e-4d6f-b012-3c4d5e6f7a8b/events") as resp:
        assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"


# -- assets --------------------------------------------------------------------------------------
async def test_upload_dedup_and_errors(server):
    data = _png(7)
    status, first = await _upload(server, data, content_type="image/png", expected_hash=_digest(data))
    assert status == 201 and first["created_new"] is True and first["hash"] == _digest(data)
    assert first["size_bytes"] == len(data) and first["file_path"] == "photo.png"
    assert first["url"] == f"{server.url}/api/v2/assets/{first['id']}/content" and first["job_id"] is None
    status, again = await _upload(server, data, file_path="other.png")
    assert status == 200 and again["created_new"] is False and again["hash"] == first["hash"]
    assert again["id"] != first["id"]
    status, reply = await _upload(server, data, expected_hash=_digest(b"other bytes"))
    assert status == 409 and reply["error"]["code"] == "hash_mismatch"
    status, reply = await _upload(server, data, file_path="")
    assert status == 422 and reply["error"]["code"] == "invalid_request"
    async with server.session.post(f"{server.url}/api/v2/assets", json={"file": "x"}) as resp:
        assert resp.status == 422


async def test_hash_probe_from_hash_get_content_delete(server):
    data = _png(20) * 3
    _, asset = await _upload(server, data)
    async with server.session.head(f"{server.url}/api/v2/assets/by-hash/{_digest(data)}") as resp:
        assert resp.status == 200
    async with server.session.head(f"{server.url}/api/v2/assets/by-hash/{_digest(b'nothing')}") as resp:
        assert resp.status == 404
    async with server.session.head(f"{server.url}/api/v2/assets/by-hash/md5:abc") as resp:
        assert resp.status == 400
    async with server.session.post(f"{server.url}/api/v2/assets/from-hash",
                                   json={"hash": _digest(data), "file_path": "again.png"}) as resp:
        minted = await resp.json()
        assert resp.status == 200 and minted["created_new"] is False and minted["file_path"] == "again.png"
    async with server.session.post(f"{server.url}/api/v2/assets/from-hash", json={"hash": _digest(b"x")}) as resp:
        assert resp.status == 404 and (await resp.json())["error"]["code"] == "blob_not_found"
    async with server.session.post(f"{server.url}/api/v2/assets/from-hash", json={"hash": "nope"}) as resp:
        assert resp.status == 422
    status, got = await _get(server, f"/api/v2/assets/{asset['id']}")
    assert status == 200 and got["id"] == asset["id"] and got["hash"] == _digest(data)
    async with server.session.get(asset["url"]) as resp:
        assert resp.status == 200 and await resp.read() == data
    async with server.session.get(asset["url"], headers={"Range": "bytes=2-9"}) as resp:
        assert resp.status == 206 and await resp.read() == data[2:10]
        assert resp.headers["Content-Range"] == f"bytes 2-9/{len(data)}"
    async with server.session.delete(f"{server.url}/api/v2/assets/{asset['id']}") as resp:
        assert resp.status == 204
    for path in (f"/api/v2/assets/{asset['id']}", "/api/v2/assets/not-a-uuid"):
        status, reply = await _get(server, path)
        assert status == 404 and reply["error"]["code"] == "not_found"


async def test_asset_references_become_loader_values(server):
    data = _png(30)
    _, asset = await _upload(server, data)
    workflow = chain(1)
    workflow["2"]["inputs"]["tag"] = {**ASSET, "info": {"id": asset["id"], "file_path": "photo.png"}}
    status, job = await _post_job(server, {"workflow": workflow})
    assert status == 201, job
    _, ran = await _get(server, f"/api/v2/jobs/{job['id']}/workflow")
    tag = ran["workflow"]["2"]["inputs"]["tag"]
    assert (server.state.env.input_dir / tag).read_bytes() == data
    # a job output referenced by id loads from output/ by its annotated name
    done = await _wait_status(server, job["id"], {"succeeded"})
    workflow = chain(2)
    workflow["2"]["inputs"]["tag"] = {**ASSET, "info": {"id": done["outputs"][0]["id"]}}
    _, second = await _post_job(server, {"workflow": workflow})
    _, ran = await _get(server, f"/api/v2/jobs/{second['id']}/workflow")
    assert ran["workflow"]["2"]["inputs"]["tag"] == f"{done['outputs'][0]['name']} [output]"
    # unknown id, unknown hash fallback, malformed
    for info in ({"id": "7f3d2c1b-9a8e-4d6f-b012-3c4d5e6f7a8b"}, None):
        workflow["2"]["inputs"]["tag"] = {**ASSET, "info": info}
        status, reply = await _post_job(server, {"workflow": workflow})
        assert status == 422 and reply["error"]["code"] == "missing_asset"
    workflow["2"]["inputs"]["tag"] = {**ASSET, "info": {"id": "7f3d2c1b-9a8e-4d6f-b012-3c4d5e6f7a8b",
                                                        "hash": _digest(data)}}
    assert (await _post_job(server, {"workflow": workflow}))[0] == 201


async def test_v2_shares_the_catalogue_with_enable_assets(tmp_path):
    server = await start_test_server(tmp_path, enable_assets=True)
    try:
        _, asset = await _upload(server, _png(40))
        status, listed = await _get(server, "/api/assets?tags_all=input")
        assert asset["id"] in [a["id"] for a in listed["assets"]]
        status, job = await _post_job(server, {"workflow": chain(8)})
        done = await _wait_status(server, job["id"], {"succeeded"})
        history = await server.get_json(f"/history/{job['id']}")
        # the id the worker gave the output is the v2 output's id
        assert history[job["id"]]["outputs"]["3"]["images"][0]["id"] == done["outputs"][0]["id"]
    finally:
        await server.close()


async def test_without_enable_assets_the_assets_api_stays_off(server):
    _, asset = await _upload(server, _png(50))
    async with server.session.get(f"{server.url}/api/assets") as resp:
        assert resp.status == 503
    assert (await _get(server, f"/api/v2/assets/{asset['id']}"))[0] == 200

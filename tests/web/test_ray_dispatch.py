"""--ray: prompts run on 2 Ray worker actors, several at once; placement by loader-input affinity;
/queue, /interrupt, /free, /system_stats across workers; uploads and outputs through the server."""
from __future__ import annotations

import tempfile
from pathlib import Path

import aiohttp

from tests.web.ray_harness import progress_of, start_ray_server, wait_until, wait_workers_ready
from tests.web.ray_test_nodes import gated
from tests.web.web_harness import collect_until_done, receive_json, ws_connect


def _pid(entry: dict) -> int:
    """The worker process that ran the prompt (RayTestWho's output)."""
    return entry["outputs"]["3"]["pid"][0]


def _status_types(entry: dict) -> list[str]:
    return [m[0] for m in entry["status"]["messages"]]


async def test_two_clients_prompts_run_at_once_on_different_workers_and_a_third_waits(ray_server, tmp_path):
    server = ray_server
    ws_a, _ = await ws_connect(server, "alice")
    ws_b, _ = await ws_connect(server, "bob")
    gate_a, gate_b = tmp_path / "gate-a", tmp_path / "gate-b"
    _, a = await server.post_prompt(gated(1, gate_a), client_id="alice")
    _, b = await server.post_prompt(gated(2, gate_b), client_id="bob")
    a, b = a["prompt_id"], b["prompt_id"]
    await progress_of(ws_a, a)
    await progress_of(ws_b, b)  # both gates are shut: both prompts are running at the same time
    _, c = await server.post_prompt(gated(3), client_id="alice")
    queue = await server.get_json("/queue")
    assert sorted(item[1] for item in queue["queue_running"]) == sorted([a, b])
    assert [item[1] for item in queue["queue_pending"]] == [c["prompt_id"]]  # every worker is busy
    workers = (await server.get_json("/system_stats"))["workers"]
    assert sorted(w["running"] for w in workers) == sorted([a, b])
    assert all(w["devices"][0]["type"] == "cpu" for w in workers)
    gate_a.touch()
    await collect_until_done(ws_a, a, timeout=60)
    frames_c = await collect_until_done(ws_a, c["prompt_id"], timeout=60)  # took alice's freed worker
    assert any(isinstance(f, dict) and f["type"] == "execution_success" for f in frames_c)
    gate_b.touch()
    frames_b = await collect_until_done(ws_b, b, timeout=60)
    assert all(f["data"].get("prompt_id") in (b, None) for f in frames_b if isinstance(f, dict) and "data" in f
               and f["type"] not in ("status",))  # bob sees only his own prompt
    entry_a, entry_b = await server.wait_history(a), await server.wait_history(b)
    assert entry_a["status"]["completed"] and entry_b["status"]["completed"]
    assert _pid(entry_a) != _pid(entry_b)
    assert {w["pid"] for w in workers} == {_pid(entry_a), _pid(entry_b)}
    await ws_a.close()
    await ws_b.close()


async def test_a_prompt_goes_to_the_worker_that_ran_its_checkpoint(ray_server):
    server = ray_server
    await wait_workers_ready(server)

    async def run(value: int, ckpt: str) -> int:
        _, body = await server.post_prompt(gated(value, ckpt=ckpt))
        return _pid(await server.wait_history(body["prompt_id"], timeout=60))

    first = await run(1, "a.safetensors")
    second = await run(2, "b.safetensors")
    assert second != first  # no affinity for b: the least-loaded worker (the one that ran nothing)
    # Both have run one prompt; without affinity the tie goes to worker-0, which ran a.
    assert await run(3, "b.safetensors") == second
    assert await run(4, "a.safetensors") == first


async def test_interrupt_by_prompt_id_reaches_its_worker_and_a_global_one_every_worker(ray_server, tmp_path):
    server = ray_server
    ws, _ = await ws_connect(server, "int")
    _, a = await server.post_prompt(gated(1, tmp_path / "never-a"), client_id="int")
    _, b = await server.post_prompt(gated(2, tmp_path / "never-b"), client_id="int")
    a, b = a["prompt_id"], b["prompt_id"]
    await progress_of(ws, a)
    await progress_of(ws, b)
    async with server.session.post(f"{server.url}/interrupt", json={"prompt_id": a}) as resp:
        assert resp.status == 200
    entry_a = await server.wait_history(a, timeout=60)
    assert _status_types(entry_a)[-1] == "execution_interrupted" and not entry_a["status"]["completed"]
    queue = await server.get_json("/queue")
    assert [item[1] for item in queue["queue_running"]] == [b]  # the other prompt is untouched
    async with server.session.post(f"{server.url}/interrupt", data=b"") as resp:
        assert resp.status == 200
    entry_b = await server.wait_history(b, timeout=60)
    assert _status_types(entry_b)[-1] == "execution_interrupted"
    await ws.close()


async def test_free_reaches_every_worker(ray_server):
    server = ray_server
    await wait_workers_ready(server)

    async def run(value: int, ckpt: str) -> dict:
        _, body = await server.post_prompt(gated(value, ckpt=ckpt))
        return await server.wait_history(body["prompt_id"], timeout=60)

    def cached(entry: dict) -> list[str]:
        return next(m[1]["nodes"] for m in entry["status"]["messages"] if m[0] == "execution_cached")

    x, y = await run(1, "x.safetensors"), await run(2, "y.safetensors")
    assert _pid(x) != _pid(y) and cached(x) == [] and cached(y) == []
    assert cached(await run(1, "x.safetensors")) == ["1", "3"]  # each worker keeps its outputs
    assert cached(await run(2, "y.safetensors")) == ["1", "3"]
    async with server.session.post(f"{server.url}/free", json={"free_memory": True}) as resp:
        assert resp.status == 200
    again_x, again_y = await run(1, "x.safetensors"), await run(2, "y.safetensors")
    assert (_pid(again_x), _pid(again_y)) == (_pid(x), _pid(y))
    assert cached(again_x) == [] and cached(again_y) == []  # both workers dropped their caches


async def test_uploads_travel_to_the_worker_and_outputs_come_back(ray_server):
    await _copy_an_upload(ray_server)


def _worker_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("comfy-ray-worker-*")}


async def test_with_shared_folders_workers_use_the_servers_own(ray_cluster, tmp_path):
    before = _worker_folders()
    server = await start_ray_server(tmp_path, shared_output=True)
    try:
        assert len(await wait_workers_ready(server)) == 2
        assert _worker_folders() == before  # no folders of their own: the server's input and output
        await _copy_an_upload(server)
    finally:
        await server.close()


async def test_workers_folders_of_their_own_are_removed_when_the_server_stops(ray_cluster, tmp_path):
    before = _worker_folders()
    server = await start_ray_server(tmp_path)
    try:
        await wait_workers_ready(server)
        assert len(_worker_folders() - before) == 2
    finally:
        await server.close()
    assert _worker_folders() <= before


async def _copy_an_upload(server) -> None:
    """Upload a file, copy it into the output folder on a worker; the copy is on the server
    (through /view) when the client gets the node's `executed`, while the prompt still runs."""
    payload = b"\x89PNG not really, but bytes all the same"
    form = aiohttp.FormData()
    form.add_field("image", payload, filename="up.png", content_type="image/png")
    async with server.session.post(f"{server.url}/upload/image", data=form) as resp:
        assert resp.status == 200, await resp.text()
        name = (await resp.json())["name"]
    ws, _ = await ws_connect(server, "copier")
    gate = server.state.env.output_dir.parent / f"gate-{name}"
    prompt = {"1": {"class_type": "RayTestCopy", "inputs": {"image": name}},
              "2": {"class_type": "RayTestGate", "inputs": {"value": ["1", 0], "gate": str(gate)}},
              "3": {"class_type": "RayTestWho", "inputs": {"value": ["2", 0], "ckpt_name": "c.safetensors"}}}
    _, body = await server.post_prompt(prompt, client_id="copier")
    assert body["node_errors"] == {}
    executed = await receive_json(ws, lambda m: m["type"] == "executed" and m["data"]["node"] == "1", timeout=60)
    assert executed["data"]["output"]["images"][0]["filename"] == f"copy_{name}"
    async with server.session.get(f"{server.url}/view", params={"filename": f"copy_{name}", "type": "output"}) as resp:
        assert resp.status == 200 and await resp.read() == payload
    gate.touch()
    entry = await server.wait_history(body["prompt_id"], timeout=60)
    assert entry["status"]["completed"], entry["status"]
    assert entry["outputs"]["3"]["values"] == [len(payload)]
    assert (server.state.env.output_dir / f"copy_{name}").read_bytes() == payload
    await ws.close()


async def test_the_embedded_default_lists_no_workers(tmp_path):
    from tests.web.web_harness import start_test_server

    server = await start_test_server(tmp_path)
    try:
        assert "workers" not in await server.get_json("/system_stats")
    finally:
        await server.close()


async def test_two_workers_saving_the_same_file_name_keep_both_files(ray_server):
    """Each worker numbers files from its own folder; the second file of a name is written under
    a free name on the server, and its executed event and history entry name that file."""
    server = ray_server
    await wait_workers_ready(server)

    async def copy_upload(payload: bytes, ckpt: str) -> dict:
        form = aiohttp.FormData()
        form.add_field("image", payload, filename="same.png", content_type="image/png")
        form.add_field("overwrite", "true")
        async with server.session.post(f"{server.url}/upload/image", data=form) as resp:
            assert resp.status == 200 and (await resp.json())["name"] == "same.png"
        prompt = {"1": {"class_type": "RayTestCopy", "inputs": {"image": "same.png"}},
                  "3": {"class_type": "RayTestWho", "inputs": {"value": ["1", 0], "ckpt_name": ckpt}}}
        _, body = await server.post_prompt(prompt)
        entry = await server.wait_history(body["prompt_id"], timeout=60)
        assert entry["status"]["completed"], entry["status"]
        return entry

    first = await copy_upload(b"first upload", "a.safetensors")
    second = await copy_upload(b"second upload, other bytes", "b.safetensors")  # the other, idle worker
    assert _pid(first) != _pid(second)
    assert first["outputs"]["1"]["images"][0]["filename"] == "copy_same.png"
    renamed = second["outputs"]["1"]["images"][0]["filename"]
    assert renamed == "copy_same_1.png"
    out = server.state.env.output_dir
    assert (out / "copy_same.png").read_bytes() == b"first upload"
    async with server.session.get(f"{server.url}/view", params={"filename": renamed, "type": "output"}) as resp:
        assert resp.status == 200 and await resp.read() == b"second upload, other bytes"


async def test_two_clients_reconnecting_while_both_their_prompts_run_each_get_the_rest_of_their_own(ray_server, tmp_path):
    import json

    server = ray_server
    hub = server.state.hub
    gates = {"alice": tmp_path / "gate-a", "bob": tmp_path / "gate-b"}
    ids = {}
    for n, client in enumerate(("alice", "bob"), start=1):
        ws, _ = await ws_connect(server, client)
        _, body = await server.post_prompt(gated(n, gates[client]), client_id=client)
        ids[client] = body["prompt_id"]
        await progress_of(ws, ids[client])
        await ws.close()

    def kept_progress(client: str) -> bool:
        return any(isinstance(m, str) and json.loads(m)["type"] == "progress" for m in hub.kept_for(client))

    await wait_until(lambda: kept_progress("alice") and kept_progress("bob"), what="both owners' progress kept")
    for gate in gates.values():
        gate.touch()
    for client in ("alice", "bob"):
        await server.wait_history(ids[client])
    for client, other in (("alice", "bob"), ("bob", "alice")):
        ws, _ = await ws_connect(server, client)
        frames = [f for f in await collect_until_done(ws, ids[client], timeout=60) if isinstance(f, dict)]
        assert any(f["type"] == "execution_success" and f["data"]["prompt_id"] == ids[client] for f in frames)
        assert any(f["type"] == "progress" for f in frames)  # what it missed while away
        assert not any((f.get("data") or {}).get("prompt_id") == ids[other] for f in frames)
        await ws.close()

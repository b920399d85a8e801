"""--ray faults: a worker killed mid-prompt is replaced and its prompt finishes on another worker
with exactly one history entry; a prompt that loses its worker twice is reported failed."""
from __future__ import annotations

from pathlib import Path

from tests.web.ray_harness import progress_of, wait_until, wait_workers_ready
from tests.web.ray_test_nodes import gated
from tests.web.web_harness import ws_connect


async def _kill_worker_running(server, ray, prompt_id: str) -> int:
    """Kill the actor running `prompt_id`; returns its process id."""
    slot = server.state.worker.worker_of(prompt_id)
    assert slot is not None and slot.handle is not None
    killed = slot.info["pid"]
    ray.kill(slot.handle, no_restart=True)
    return killed


def _running_elsewhere(server, prompt_id: str, dead_pids: set[int]):
    def check() -> bool:
        slot = server.state.worker.worker_of(prompt_id)
        return slot is not None and slot.info.get("pid") not in dead_pids and slot.state == "ready"
    return check


async def test_a_killed_worker_is_replaced_and_its_prompt_finishes_elsewhere_once(ray_server, ray_cluster, tmp_path):
    server = ray_server
    ws, _ = await ws_connect(server, "victim")
    gate = tmp_path / "gate"
    _, body = await server.post_prompt(gated(7, gate), client_id="victim")
    pid = body["prompt_id"]
    await progress_of(ws, pid)
    folder = server.state.worker.worker_of(pid).info["folder"]
    assert Path(folder).is_dir()
    killed = await _kill_worker_running(server, ray_cluster, pid)
    await wait_until(_running_elsewhere(server, pid, {killed}), what="the prompt running again on another worker")
    assert not Path(folder).exists()  # a dead worker's own folders go with it (it ran on this machine)
    await progress_of(ws, pid)
    gate.touch()
    entry = await server.wait_history(pid, timeout=60)
    assert entry["status"]["completed"] is True
    assert entry["outputs"]["3"]["pid"][0] != killed and entry["outputs"]["3"]["values"] == [7]
    assert list(await server.get_json("/history")) == [pid]  # one entry, not two
    workers = await wait_workers_ready(server)  # the dead worker has a successor
    assert killed not in {w["pid"] for w in workers} and max(w["generation"] for w in workers) == 2
    assert (await server.get_json("/queue")) == {"queue_running": [], "queue_pending": []}
    await ws.close()


async def test_a_prompt_that_loses_its_worker_twice_is_reported_failed(ray_server, ray_cluster, tmp_path):
    server = ray_server
    ws, _ = await ws_connect(server, "unlucky")
    _, body = await server.post_prompt(gated(1, tmp_path / "never"), client_id="unlucky")
    pid = body["prompt_id"]
    await progress_of(ws, pid)
    first = await _kill_worker_running(server, ray_cluster, pid)
    await wait_until(_running_elsewhere(server, pid, {first}), what="the prompt running again")
    await progress_of(ws, pid)
    await _kill_worker_running(server, ray_cluster, pid)
    error = await ws.receive_json(timeout=60)
    while error["type"] != "execution_error":
        error = await ws.receive_json(timeout=60)
    assert error["data"]["prompt_id"] == pid
    assert error["data"]["exception_type"] == "web.ray_backend.errors.WorkerLostError"
    assert "Ray worker running this prompt died" in error["data"]["exception_message"]
    entry = await server.wait_history(pid, timeout=60)
    assert entry["status"]["status_str"] == "error" and entry["status"]["messages"][-1][0] == "execution_error"
    assert list(await server.get_json("/history")) == [pid]
    await wait_workers_ready(server)  # both replaced; the server carries on
    _, after = await server.post_prompt(gated(2))
    assert (await server.wait_history(after["prompt_id"], timeout=60))["status"]["completed"]
    await ws.close()

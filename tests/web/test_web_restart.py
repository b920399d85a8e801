"""Restart durability: kill -9 a server with one prompt running and two queued, start it again:
history kept, the running one reported interrupted (and re-queueable), the queued ones run."""
from __future__ import annotations

import json
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from tests.web.web_harness import spawn_server
from tests.web.web_test_pack import srv_prompt

# client-chosen prompt ids are UUIDs (POST /prompt refuses anything else)
ID = {"done-0": "0b9e1c3a-5d7f-4e2a-9c1b-0000000d0e00", "running-1": "0b9e1c3a-5d7f-4e2a-9c1b-000000000001",
      "pending-3": "0b9e1c3a-5d7f-4e2a-9c1b-000000000003", "pending-4": "0b9e1c3a-5d7f-4e2a-9c1b-000000000004"}

PACK = Path(__file__).resolve().parent / "web_test_pack"


def _call(url: str, path: str, body: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        raw = resp.read()
        return json.loads(raw) if raw else None


def _wait(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def base_dir(tmp_path):
    shutil.copytree(PACK, tmp_path / "custom_nodes" / "web_test_pack")
    return tmp_path


def test_killed_server_keeps_history_and_queue(base_dir):
    server = spawn_server(base_dir)
    try:
        url = server.url
        done = _call(url, "/prompt", {"prompt": srv_prompt(1, prefix="before"), "prompt_id": ID["done-0"]})
        _wait(lambda: _call(url, f"/history/{ID['done-0']}"), what="first prompt")
        _call(url, "/prompt", {"prompt": srv_prompt(2, gate="gate"), "prompt_id": ID["running-1"]})
        _wait(lambda: _call(url, "/queue")["queue_running"], what="the gated prompt to start")
        for n in (3, 4):
            _call(url, "/prompt", {"prompt": srv_prompt(n, prefix="after"), "prompt_id": ID[f"pending-{n}"]})
        queue = _call(url, "/queue")
        assert [i[1] for i in queue["queue_pending"]] == [ID["pending-3"], ID["pending-4"]]
        assert done["prompt_id"] == ID["done-0"]
    finally:
        server.kill()  # SIGKILL: no clean shutdown

    server = spawn_server(base_dir)
    try:
        url = server.url
        _wait(lambda: _call(url, f"/history/{ID['pending-4']}"), what="queued prompts to run after restart")
        history = _call(url, "/history")
        assert list(history)[:2] == [ID["done-0"], ID["running-1"]]
        assert history[ID["done-0"]]["status"]["status_str"] == "success"
        interrupted = history[ID["running-1"]]
        assert interrupted["status"]["status_str"] == "error"
        kind, data = interrupted["status"]["messages"][-1]
        assert kind == "execution_interrupted" and data["prompt_id"] == ID["running-1"]
        for n in (3, 4):
            entry = history.get(ID[f"pending-{n}"]) or _call(url, f"/history/{ID[f'pending-{n}']}")[ID[f"pending-{n}"]]
            assert entry["status"]["status_str"] == "success"
            assert (base_dir / "output" / f"after_{n:03d}.png").is_file()
        jobs = {j["id"]: j["status"] for j in _call(url, "/jobs")["jobs"]}
        assert jobs[ID["running-1"]] == "cancelled" and jobs[ID["done-0"]] == "completed"

        # the interrupted prompt can be queued again from its history entry
        (base_dir / "output" / "gate").write_text("open")
        _call(url, "/prompt", {"prompt": interrupted["prompt"][2], "prompt_id": ID["running-1"]})
        rerun = _wait(lambda: (_call(url, f"/history/{ID['running-1']}") or {}).get(ID["running-1"], {}).get(
            "status", {}).get("completed"), what="re-queued prompt")
        assert rerun is True
        assert list(_call(url, "/history"))[-1] == ID["running-1"]
    finally:
        server.stop()
    assert server.proc.returncode == 0  # SIGTERM is a clean shutdown
    assert "Stopped." in server.log_path.read_text()


async def test_graceful_shutdown_records_the_running_prompt_as_interrupted(tmp_path):
    import asyncio

    from tests.web.web_harness import chain, start_test_server
    from web.store import PromptStore

    srv = await start_test_server(tmp_path)
    _, running = await srv.post_prompt(chain(1, steps=10000, delay=0.05))
    _, waiting = await srv.post_prompt(chain(2))
    while srv.state.queue.running is None:
        await asyncio.sleep(0.01)
    await srv.close()
    store = PromptStore.open(tmp_path / "user")
    entry = store.history_entry(running["prompt_id"])
    assert entry["status"]["messages"][-1][0] == "execution_interrupted"
    assert [i.prompt_id for i in store.pending_items()] == [waiting["prompt_id"]]
    assert store.recover_interrupted() == []

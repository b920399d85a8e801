"""Queue control survives kill -9: a paused queue stays paused, a reordered queue keeps its order,
and a retry keeps its links both ways, across two SIGKILLs of a `main.py` subprocess."""
from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.web.web_harness import spawn_server
from tests.web.web_test_pack import srv_prompt

PACK = Path(__file__).resolve().parent / "web_test_pack"
GATED = "0b9e1c3a-5d7f-4e2a-9c1b-0000000000a0"
A, B, C = ("0b9e1c3a-5d7f-4e2a-9c1b-0000000000a1", "0b9e1c3a-5d7f-4e2a-9c1b-0000000000a2",
           "0b9e1c3a-5d7f-4e2a-9c1b-0000000000a3")


def _call(url: str, path: str, body: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"},
                                 method="POST" if body is not None else "GET")
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


def test_pause_order_and_retry_survive_sigkill(base_dir):
    server = spawn_server(base_dir)
    try:
        url = server.url
        _call(url, "/prompt", {"prompt": srv_prompt(1, gate="gate"), "prompt_id": GATED})
        _wait(lambda: _call(url, "/api/queue/state")["running"] == [GATED], what="the gated prompt to start")
        assert _call(url, "/api/queue/pause", {})["paused"] is True
        for n, pid in ((2, A), (3, B), (4, C)):
            _call(url, "/prompt", {"prompt": srv_prompt(n, prefix="q"), "prompt_id": pid})
        assert _call(url, "/api/queue/move", {"prompt_id": C, "position": "front"})["pending"] == [C, A, B]
    finally:
        server.kill()

    server = spawn_server(base_dir)
    try:
        url = server.url
        # still paused: the worker looks at the three restored prompts and leaves them
        state = _wait(lambda: (lambda s: s if s["held"] == 3 else None)(_call(url, "/api/queue/state")),
                      what="the restarted worker to hold the queue")
        assert state["paused"] is True and state["running"] == [] and state["pending"] == [C, A, B]
        assert _call(url, f"/history/{GATED}")[GATED]["status"]["status_str"] == "error"  # interrupted by the kill
        retried = _call(url, f"/api/jobs/{GATED}/retry", {})
        new = retried["prompt_id"]
        assert retried["retry_of"] == GATED
        assert _call(url, "/api/queue/move", {"prompt_id": new, "position": 0})["pending"] == [new, C, A, B]
    finally:
        server.kill()

    server = spawn_server(base_dir)
    try:
        url = server.url
        state = _call(url, "/api/queue/state")
        assert state["paused"] is True and state["pending"] == [new, C, A, B]
        assert _call(url, f"/history/{GATED}")[GATED]["retried_as"] == new
        assert _call(url, f"/api/jobs/{new}")["retry_of"] == GATED
        (base_dir / "output" / "gate").write_text("open")
        assert _call(url, "/api/queue/resume", {})["paused"] is False
        _wait(lambda: _call(url, f"/history/{B}"), what="the queue to run after resume")
        history = _call(url, "/history")
        assert list(history)[-4:] == [new, C, A, B]
        assert history[new]["status"]["status_str"] == "success" and history[new]["retry_of"] == GATED
        jobs = {j["id"]: j for j in _call(url, "/api/jobs")["jobs"]}
        assert jobs[GATED]["retried_as"] == new and jobs[new]["retry_of"] == GATED
        with pytest.raises(urllib.error.HTTPError) as caught:
            _call(url, f"/api/jobs/{GATED}/retry", {})
        assert caught.value.code == 409
    finally:
        server.stop()

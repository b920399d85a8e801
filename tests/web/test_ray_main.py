"""`python main.py --ray --ray-workers 2`: the server starts a local Ray instance, its workers load
the same custom-node pack from the base directory, a prompt's output file comes back to the
server's output folder, and SIGTERM stops everything cleanly."""
from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from tests.web.web_harness import spawn_server
from tests.web.web_test_pack import srv_prompt

# client-chosen prompt ids are UUIDs (POST /prompt refuses anything else)
VIA_RAY = "0b9e1c3a-5d7f-4e2a-9c1b-000000000ea7"

PACK = Path(__file__).resolve().parent / "web_test_pack"


def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def test_main_with_ray_runs_prompts_on_workers_with_the_same_packs(tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="needs `pip install -r requirements-ray.txt`")
    monkeypatch.setenv("RAY_AUTH_MODE", os.environ.get("RAY_AUTH_MODE", "disabled"))
    shutil.copytree(PACK, tmp_path / "custom_nodes" / "web_test_pack")
    server = spawn_server(tmp_path, "--ray", "--ray-workers", "2", timeout=120)
    try:
        deadline = time.monotonic() + 120
        while len([w for w in _get(f"{server.url}/system_stats").get("workers", []) if w["state"] == "ready"]) < 2:
            assert time.monotonic() < deadline, server.log_path.read_text()
            time.sleep(0.1)
        workers = _get(f"{server.url}/system_stats")["workers"]
        assert len({w["pid"] for w in workers}) == 2 and all(w["pid"] != server.proc.pid for w in workers)
        body = json.dumps({"prompt": srv_prompt(9, prefix="ray"), "prompt_id": VIA_RAY}).encode()
        request = urllib.request.Request(f"{server.url}/prompt", data=body,
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=30).close()
        while not _get(f"{server.url}/history/{VIA_RAY}"):
            assert time.monotonic() < deadline, server.log_path.read_text()
            time.sleep(0.05)
        entry = _get(f"{server.url}/history/{VIA_RAY}")[VIA_RAY]
        assert entry["status"]["completed"], entry["status"]
        assert (tmp_path / "output" / "ray_009.png").is_file()  # written by a worker, stored by the server
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log_path.read_text()

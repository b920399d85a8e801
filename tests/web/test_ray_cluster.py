"""`main.py --ray ADDRESS` in front of a Ray cluster started with `ray start` (tests/web/ray_nodes.py):
workers on two nodes (a second `ray start --address` node on this machine, loopback), a node
that dies mid-prompt, and a head that dies and comes back. The server is a subprocess; these
are the slowest Ray tests (several `ray start`s each). Also: the GCS probe the dispatcher
relies on to notice that Ray is gone."""
from __future__ import annotations

import json
import shutil
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.web.ray_nodes import RayNodes
from tests.web.web_harness import spawn_server
from tests.web.web_test_pack import srv_prompt

PACK = Path(__file__).resolve().parent / "web_test_pack"
TIMEOUT = 120

def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def _id(label: str) -> str:
    """The prompt id (a UUID, as ComfyUI requires of client ids) a test names by `label`."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"test_ray_cluster/{label}"))


def _label(prompt_id: str | None) -> str | None:
    return next((label for label in LABELS if _id(label) == prompt_id), prompt_id)


LABELS = ("a", "b", "kept", "later", "before", "after")


def _post_prompt(url: str, prompt: dict, label: str) -> None:
    body = json.dumps({"prompt": prompt, "prompt_id": _id(label)}).encode()
    request = urllib.request.Request(f"{url}/prompt", data=body, headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).close()


def _wait(predicate, server, what: str):
    deadline = time.monotonic() + TIMEOUT
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {TIMEOUT} s\n{server.log_path.read_text()[-6000:]}")
        time.sleep(0.1)


def _workers(server) -> list[dict]:
    """The workers `/system_stats` lists, each `running` prompt named by its test label."""
    workers = _get(f"{server.url}/system_stats").get("workers", [])
    return [{**w, "running": _label(w["running"])} for w in workers]


def _ready(server, count: int, generation: int = 1):
    workers = _workers(server)
    ok = len(workers) == count and all(w["state"] == "ready" and w["generation"] >= generation for w in workers)
    return workers if ok else None


def _history(server, label: str) -> dict | None:
    return _get(f"{server.url}/history/{_id(label)}").get(_id(label))


@pytest.fixture
def nodes(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    cluster = RayNodes()
    try:
        yield cluster
    finally:
        cluster.close()


def _server(tmp_path: Path, address: str | None, workers: int):
    """`main.py --ray ADDRESS` (None: its own local instance) with the web test pack."""
    shutil.copytree(PACK, tmp_path / "custom_nodes" / "web_test_pack")
    ray_args = ["--ray"] if address is None else ["--ray", address]
    return spawn_server(tmp_path, "--cpu", *ray_args, "--ray-workers", str(workers), timeout=TIMEOUT)


@pytest.mark.slow
def test_workers_on_two_nodes_and_a_node_that_dies_mid_prompt(nodes, tmp_path):
    head = nodes.start_head(num_cpus=1)
    second = nodes.add_node(num_cpus=1)  # one CPU per node: one worker lands on each
    server = _server(tmp_path, nodes.address, 2)
    try:
        workers = _wait(lambda: _ready(server, 2), server, "two workers ready")
        assert len({w["node_id"] for w in workers}) == 2, workers
        assert sorted(head.holds(w["pid"]) for w in workers) == [False, True], workers
        gates = {name: tmp_path / f"gate_{name}" for name in ("a", "b")}
        _post_prompt(server.url, srv_prompt(1, gate=str(gates["a"]), prefix="a"), "a")
        _post_prompt(server.url, srv_prompt(2, gate=str(gates["b"]), prefix="b"), "b")
        running = _wait(lambda: {w["running"]: w for w in _workers(server) if w["running"]}.get("b") and
                        {w["running"]: w for w in _workers(server) if w["running"]}, server, "both prompts running")
        assert set(running) == {"a", "b"}
        on_second = next(pid for pid, w in running.items() if second.holds(w["pid"]))
        on_head = "a" if on_second == "b" else "b"

        second.kill()  # the node, its raylet and its worker, mid-prompt
        for gate in gates.values():
            gate.touch()
        for prompt_id in ("a", "b"):
            entry = _wait(lambda: _history(server, prompt_id), server, f"prompt {prompt_id} in the history")
            assert entry["status"]["completed"], entry["status"]
        history = _get(f"{server.url}/history")
        assert sorted(map(_label, history)) == ["a", "b"]  # one entry each: the lost prompt ran to the end once
        # Its output came back from the worker that finished it (on the head) to the server's folder.
        assert (tmp_path / "output" / f"{on_second}_00{1 if on_second == 'a' else 2}.png").is_file()
        assert (tmp_path / "output" / f"{on_head}_00{1 if on_head == 'a' else 2}.png").is_file()
        # The second node's worker was lost; its successor waits for a CPU no node has left.
        slots = {w["name"]: w for w in _workers(server)}
        lost = next(w for w in slots.values() if w["generation"] == 2)
        assert lost["state"] == "starting", slots
        finished_by = next(w for w in slots.values() if w["generation"] == 1)
        assert finished_by["prompts_run"] == 2 and finished_by["state"] == "ready", slots
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log_path.read_text()[-6000:]


@pytest.mark.slow
def test_the_server_outlives_a_ray_restart_and_joins_again(nodes, tmp_path):
    head = nodes.start_head(num_cpus=2)
    server = _server(tmp_path, nodes.address, 1)
    try:
        _wait(lambda: _ready(server, 1), server, "the worker ready")
        gate = tmp_path / "gate"
        _post_prompt(server.url, srv_prompt(5, gate=str(gate), prefix="kept"), "kept")
        _wait(lambda: _workers(server)[0]["running"] == "kept", server, "the prompt running")

        head.kill()  # GCS, raylet and worker: Ray is gone
        _wait(lambda: all(w["state"] == "dead" for w in _workers(server)), server, "the dispatcher noticing")
        _post_prompt(server.url, srv_prompt(6, prefix="later"), "later")  # accepted while Ray is down
        queue = _get(f"{server.url}/queue")
        assert sorted(_label(p[1]) for p in queue["queue_pending"]) == ["kept", "later"], queue  # re-queued, not lost
        assert queue["queue_running"] == []

        nodes.start_head(num_cpus=2)  # the same address, a new cluster
        _wait(lambda: _ready(server, 1, generation=2), server, "a new worker on the new cluster")
        gate.touch()
        for prompt_id, name in (("kept", "kept_005.png"), ("later", "later_006.png")):
            entry = _wait(lambda: _history(server, prompt_id), server, f"prompt {prompt_id} in the history")
            assert entry["status"]["completed"], entry["status"]
            assert (tmp_path / "output" / name).is_file()
        assert sorted(map(_label, _get(f"{server.url}/history"))) == ["kept", "later"]
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log_path.read_text()[-6000:]


@pytest.mark.slow
def test_a_local_ray_instance_whose_gcs_dies_is_started_again(tmp_path, monkeypatch):
    """`--ray` with no address: the server's own Ray instance. Its GCS killed, the server
    notices, ends what is left of that instance (Ray leaves some of it behind) and starts a new one."""
    import os
    import signal

    from web.ray_backend.cluster import ray_descendants

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    server = _server(tmp_path, None, 1)
    try:
        _wait(lambda: _ready(server, 1), server, "the worker ready")
        _post_prompt(server.url, srv_prompt(3, prefix="before"), "before")
        _wait(lambda: _history(server, "before"), server, "the first prompt")
        first = ray_descendants(server.proc.pid)
        gcs = [pid for pid, cmdline in first if b"gcs_server" in cmdline]
        assert len(gcs) == 1, first
        os.kill(gcs[0], signal.SIGKILL)
        _wait(lambda: _ready(server, 1, generation=2), server, "a worker on a new local instance")
        _post_prompt(server.url, srv_prompt(4, prefix="after"), "after")
        entry = _wait(lambda: _history(server, "after"), server, "the prompt after the restart")
        assert entry["status"]["completed"] and (tmp_path / "output" / "after_004.png").is_file()
        left = {pid for pid, _ in first} & {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}
        assert not left, f"processes of the dead instance still running: {left}"
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log_path.read_text()[-6000:]


async def test_the_gcs_probe_tells_a_listening_port_from_a_closed_one(tmp_path):
    import asyncio

    pytest.importorskip("ray", reason="needs `pip install -r requirements-ray.txt`")
    from web.ray_backend import cluster

    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    assert await cluster.gcs_reachable(address) and cluster.gcs_reachable_blocking(address)
    server.close()
    await server.wait_closed()
    assert not await cluster.gcs_reachable(address) and not cluster.gcs_reachable_blocking(address)
    assert not await cluster.gcs_reachable("not-an-address")
    assert cluster.probe_address("ray://head:10001") is None  # Ray Client reports its own errors
    assert cluster.probe_address("10.0.0.5:6379") == "10.0.0.5:6379"


def test_joining_an_absent_gcs_fails_at_once_with_a_connection_error(monkeypatch):
    pytest.importorskip("ray", reason="needs `pip install -r requirements-ray.txt`")
    from tests.web.web_harness import free_port
    from web.config import RaySettings
    from web.ray_backend import cluster

    monkeypatch.setattr(cluster.ray, "is_initialized", lambda: False)  # (this process may be a driver already)
    monkeypatch.setattr(cluster.ray, "init", lambda **kw: pytest.fail("ray.init must not be reached"))
    with pytest.raises(ConnectionError, match="does not accept connections"):
        cluster.connect(RaySettings(address=f"127.0.0.1:{free_port()}"))

"""A local Ray instance for the --ray tests (one per test session: starting Ray costs seconds)
and servers whose prompts run on 2 CPU worker actors. Loopback only; Ray's files under a short
/tmp path (its socket paths have a length limit)."""
from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import pytest

from tests.web.ray_test_nodes import REGISTRY_FACTORY, make_ray_test_registry
from tests.web.web_harness import REPO, TestServer, receive_json, start_test_server
from web.config import RaySettings

WORKERS = 2


def start_ray_cluster():
    """`ray.init` for the tests (the conftest's session fixture `ray_cluster`); returns ray and
    Ray's folder for this session (removed after `ray.shutdown`)."""
    ray = pytest.importorskip("ray", reason="the --ray tests need `pip install -r requirements-ray.txt`")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    # Workers import the test nodes (tests.web...) from the repository, as the driver does.
    ray.init(num_cpus=WORKERS + 2, include_dashboard=False, _temp_dir=temp, _node_ip_address="127.0.0.1",
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}}, log_to_driver=False)
    return ray, temp


async def start_ray_server(tmp_path: Path, *, workers: int = WORKERS, shared_output: bool = False,
                           **overrides) -> TestServer:
    settings = RaySettings(workers=workers, registry_factory=REGISTRY_FACTORY, shared_output=shared_output)
    return await start_test_server(tmp_path, registry=make_ray_test_registry(), ray=settings, **overrides)


async def wait_workers_ready(server: TestServer, timeout: float = 60.0) -> list[dict]:
    """/system_stats's workers once every one is ready (polled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = (await server.get_json("/system_stats")).get("workers", [])
        if len(workers) == WORKERS and all(w["state"] == "ready" for w in workers):
            return workers
        await asyncio.sleep(0.05)
    raise AssertionError(f"the Ray workers were not all ready in {timeout} s: {workers}")


async def wait_until(predicate, timeout: float = 60.0, what: str = "condition") -> None:
    """Poll `predicate()` (on the loop) until true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout} s")
        await asyncio.sleep(0.02)


async def progress_of(ws, prompt_id: str) -> dict:
    """The next `progress` message of `prompt_id` (its node is running on a worker)."""
    return await receive_json(ws, lambda m: m["type"] == "progress" and m["data"]["prompt_id"] == prompt_id,
                              timeout=60)

"""Ray clusters made of `ray start --block` processes on loopback, for the tests that need a
cluster outside the test process: several nodes on this machine, a node that dies, a head that
restarts. Each node runs in its own session, so a test kills exactly that node (`ray stop`
would end every Ray process on the machine, the test session's own instance included).

Servers joining such a cluster run as subprocesses (`tests.web.web_harness.spawn_server`): the
test process may already be the driver of the session's in-process instance (`ray_cluster`),
and a process joins one cluster at most."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.web.web_harness import free_port

STARTED = "Ray runtime started"


def ray_cli() -> str:
    pytest.importorskip("ray", reason="the --ray tests need `pip install -r requirements-ray.txt`")
    path = Path(sys.executable).with_name("ray")
    if not path.is_file():
        pytest.skip(f"the `ray` command is not next to {sys.executable}")
    return str(path)


@dataclass
class RayNode:
    name: str
    proc: subprocess.Popen
    log_path: Path

    @property
    def sid(self) -> int:
        # `ray start` leads a session of its own (start_new_session); the node's processes stay
        # in it (worker processes make their own process group, not their own session).
        return self.proc.pid

    def holds(self, pid: int) -> bool:
        """Whether process `pid` (a worker actor) belongs to this node."""
        try:
            return os.getsid(pid) == self.sid
        except ProcessLookupError:
            return False

    def kill(self) -> None:
        """SIGKILL every process of the node (its raylet, workers and, on the head, the GCS)."""
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and self.holds(int(entry.name)):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.proc.wait(timeout=30)


class RayNodes:
    """`start_head`, then `add_node`s; `close` kills what is left."""

    def __init__(self) -> None:
        self.cli = ray_cli()
        self.temp = Path(tempfile.mkdtemp(prefix="rn", dir="/tmp"))  # Ray's socket paths are short
        self.port = free_port()
        self.nodes: list[RayNode] = []
        self.env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start_head(self, *, num_cpus: int) -> RayNode:
        """The head on `self.port` (the same port when started again after `kill`)."""
        return self._start("head", ["--head", f"--port={self.port}", f"--temp-dir={self.temp}",
                                    "--include-dashboard=false"], num_cpus)

    def add_node(self, *, num_cpus: int) -> RayNode:
        name = f"node{len(self.nodes)}"
        return self._start(name, [f"--address={self.address}", f"--temp-dir={self.temp / name}"], num_cpus)

    def _start(self, name: str, args: list[str], num_cpus: int) -> RayNode:
        log_path = self.temp / f"{name}-{len(self.nodes)}.log"
        command = [self.cli, "start", "--block", *args, f"--num-cpus={num_cpus}", "--num-gpus=0",
                   "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                    start_new_session=True)
        node = RayNode(name, proc, log_path)
        self.nodes.append(node)
        deadline = time.monotonic() + 120
        while STARTED not in log_path.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"`ray start` ({name}) did not start:\n{log_path.read_text(errors='replace')}")
            time.sleep(0.1)
        return node

    def close(self) -> None:
        for node in self.nodes:
            if node.proc.poll() is None:
                node.kill()
        shutil.rmtree(self.temp, ignore_errors=True)

"""Start a real server on a free loopback port, in-process or as a subprocess, and talk to it."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from web.app import start_server
from web.bootstrap import build_state
from web.config import ServerConfig
from web.state import AppState

REPO = Path(__file__).resolve().parents[2]


@dataclass
class TestServer:
    state: AppState
    runner: Any
    url: str
    session: aiohttp.ClientSession = field(default=None)  # type: ignore[assignment]

    __test__ = False

    @property
    def host(self) -> str:
        return self.url.split("//", 1)[1]

    async def post_prompt(self, prompt: dict, **body: Any) -> tuple[int, dict]:
        async with self.session.post(f"{self.url}/prompt", json={"prompt": prompt, **body}) as resp:
            return resp.status, await resp.json()

    async def get_json(self, path: str, **kw: Any) -> Any:
        async with self.session.get(f"{self.url}{path}", **kw) as resp:
            assert resp.status == 200, (path, resp.status, await resp.text())
            return await resp.json()

    async def wait_history(self, prompt_id: str, timeout: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            entry = await self.get_json(f"/history/{prompt_id}")
            if entry:
                return entry[prompt_id]
            await asyncio.sleep(0.02)
        raise AssertionError(f"prompt {prompt_id} did not finish in {timeout} s")

    async def close(self) -> None:
        await self.session.close()
        await self.runner.cleanup()


async def start_test_server(tmp_path: Path, *, registry: Any = None, frontend: bool = False,
                            **overrides: Any) -> TestServer:
    from tests.web.web_test_nodes import make_test_registry

    config = ServerConfig(base_dir=tmp_path, listen=("127.0.0.1",), port=0, custom_node_dirs=(), **overrides)
    state = build_state(config, registry=registry if registry is not None else make_test_registry())
    runner, urls = await start_server(state, frontend=frontend)
    server = TestServer(state, runner, urls[0])
    server.session = aiohttp.ClientSession()
    return server


async def ws_connect(server: TestServer, client_id: str | None = None, *, flags: dict | None = None):
    """A WebSocket to the server; returns (ws, first status message)."""
    query = f"?clientId={client_id}" if client_id else ""
    ws = await server.session.ws_connect(f"{server.url}/ws{query}")
    first = json.loads((await ws.receive(timeout=10)).data)
    if flags is not None:
        await ws.send_json({"type": "feature_flags", "data": flags})
        reply = await receive_json(ws, lambda m: m["type"] == "feature_flags")
        assert reply["data"]["supports_preview_metadata"] is True
    return ws, first


async def receive_json(ws, predicate=lambda m: True, timeout: float = 20.0) -> dict:
    """The next JSON message matching `predicate` (others are skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("no matching WebSocket message in time")
        msg = await ws.receive(timeout=left)
        if msg.type == aiohttp.WSMsgType.TEXT:
            data = json.loads(msg.data)
            if predicate(data):
                return data
        elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
            raise AssertionError(f"socket closed: {msg}")


async def collect_until_done(ws, prompt_id: str, timeout: float = 20.0) -> list:
    """Every frame (JSON dicts and binary bytes) up to `executing {node: null}` for `prompt_id`."""
    frames: list = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"prompt {prompt_id} did not finish; got {frames}")
        msg = await ws.receive(timeout=left)
        if msg.type == aiohttp.WSMsgType.BINARY:
            frames.append(msg.data)
            continue
        if msg.type != aiohttp.WSMsgType.TEXT:
            raise AssertionError(f"socket closed: {msg}")
        data = json.loads(msg.data)
        frames.append(data)
        if data["type"] == "executing" and data["data"].get("node") is None \
                and data["data"].get("prompt_id") == prompt_id:
            return frames


def chain(value: int = 1, *, steps: int = 2, delay: float = 0.0, preview: int = 0, tag: str = "",
          prefix: str = "webtest") -> dict:
    """Const -> Slow -> Output: a three-node prompt whose output node writes one PNG."""
    return {
        "1": {"class_type": "WebTestConst", "inputs": {"value": value}},
        "2": {"class_type": "WebTestSlow", "inputs": {"value": ["1", 0], "steps": steps, "delay": delay,
                                                      "preview": preview, "tag": tag}},
        "3": {"class_type": "WebTestOutput", "inputs": {"value": ["2", 0], "filename_prefix": prefix}},
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    url: str
    log_path: Path

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def spawn_server(base_dir: Path, *extra: str, timeout: float = 60.0) -> ServerProcess:
    """`python main.py --base-directory BASE --port P` as a subprocess; waits for its URL line."""
    port = free_port()
    log_path = base_dir / f"server-{port}.log"
    log = open(log_path, "w")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(REPO / "main.py"), "--base-directory", str(base_dir),
                             "--port", str(port), *extra], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}: {log_path.read_text()}")
        if "To see the GUI go to" in log_path.read_text():
            return ServerProcess(proc, f"http://127.0.0.1:{port}", log_path)
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"server did not start in {timeout} s: {log_path.read_text()}")

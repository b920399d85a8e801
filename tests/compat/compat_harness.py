"""A real server (tests/web/web_harness.TestServer) loading the fixture packs and the example pack."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import aiohttp

from tests.web.web_harness import TestServer
from web.app import start_server
from web.bootstrap import build_state
from web.config import ServerConfig

REPO = Path(__file__).resolve().parents[2]
PACKS = Path(__file__).resolve().parent / "packs"
EXAMPLE_PACKS = REPO / "custom_nodes"


async def start_pack_server(tmp_path: Path, **overrides: Any) -> TestServer:
    """Built-in nodes + tests/compat/packs + custom_nodes/ (the example pack), on a free port."""
    overrides.setdefault("custom_node_dirs", (PACKS, EXAMPLE_PACKS))
    config = ServerConfig(base_dir=tmp_path, listen=("127.0.0.1",), port=0, **overrides)
    state = build_state(config)
    runner, urls = await start_server(state, frontend=False)
    server = TestServer(state, runner, urls[0])
    server.session = aiohttp.ClientSession()
    return server


def pack_record(server: TestServer, pack_name: str) -> Any:
    """The `RECORD` a loaded fixture pack keeps of what its hooks saw (failing if it did not load)."""
    [pack] = [p for p in server.state.packs if p.name == pack_name]
    assert pack.ok, pack.error
    return pack.module.RECORD


async def run_prompt(server: TestServer, prompt: dict, **extra: Any) -> dict:
    """POST a prompt (a fresh prompt id, `extra` as POST fields) and wait for its history entry."""
    prompt_id = str(uuid.uuid4())
    status, body = await server.post_prompt(prompt, prompt_id=prompt_id, **extra)
    assert status == 200, body
    return await server.wait_history(prompt_id, timeout=60)

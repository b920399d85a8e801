"""Property-based fuzz of POST /prompt and the WebSocket: a few hundred hostile bodies, after
which the server still answers and what was queued before is untouched."""
from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.web.web_harness import chain, start_test_server

# client-chosen prompt ids are UUIDs (POST /prompt refuses anything else)
BLOCKER = "0b9e1c3a-5d7f-4e2a-9c1b-00000000b10c"
SENTINEL = "0b9e1c3a-5d7f-4e2a-9c1b-000000005e17"

NODE_TYPES = ["WebTestConst", "WebTestAdd", "WebTestSlow", "WebTestOutput", "WebTestFail", "Nope", "", 5, None]

json_scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=5)
links = st.tuples(st.text(max_size=3) | st.integers(0, 5), st.integers(-1, 3) | st.floats(allow_nan=False)).map(list)
node = st.fixed_dictionaries({"class_type": st.sampled_from(NODE_TYPES)},
                             optional={"inputs": st.dictionaries(
                                 st.sampled_from(["value", "a", "b", "steps", "delay", "preview", "tag",
                                                  "filename_prefix", "message", "x"]),
                                 json_scalars | links, max_size=5) | json_values})
prompts = st.dictionaries(st.sampled_from(["1", "2", "3", "x", ""]), node | json_scalars, max_size=4)
bodies = (st.fixed_dictionaries({"prompt": prompts}, optional={
    "client_id": json_values, "prompt_id": json_values, "extra_data": json_values, "front": json_values,
    "number": json_values, "partial_execution_targets": json_values}) | json_values)


class _BackgroundServer:
    """The server on its own event loop thread, so hypothesis can drive it synchronously."""

    def __init__(self, tmp_path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = self.call(start_test_server(tmp_path))

    def call(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def request(self, method: str, path: str, data: bytes | None = None) -> tuple[int, bytes, str]:
        req = urllib.request.Request(self.server.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), exc.headers.get("Content-Type", "")

    def close(self) -> None:
        self.call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def bg_server(tmp_path):
    bg = _BackgroundServer(tmp_path)
    status, body, _ = bg.request("POST", "/prompt", json.dumps(
        {"prompt": chain(1, steps=10000, delay=0.05, tag="blocker"), "prompt_id": BLOCKER}).encode())
    assert status == 200, body
    status, body, _ = bg.request("POST", "/prompt", json.dumps(
        {"prompt": chain(2, tag="sentinel"), "prompt_id": SENTINEL, "number": -1e9}).encode())
    assert status == 200, body
    try:
        yield bg
    finally:
        bg.server.state.queue.interrupt()
        bg.close()


def _assert_intact(bg: _BackgroundServer) -> None:
    status, raw, _ = bg.request("GET", "/queue")
    assert status == 200
    queue = json.loads(raw)
    assert [i[1] for i in queue["queue_running"]] == [BLOCKER]
    sentinel = [i for i in queue["queue_pending"] if i[1] == SENTINEL]
    assert len(sentinel) == 1 and sentinel[0][2] == chain(2, tag="sentinel") and sentinel[0][0] == -1e9
    assert SENTINEL in [i.prompt_id for i in bg.server.state.store.pending_items()]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=bodies)
def _fuzz_prompt(bg, body):
    status, raw, content_type = bg.request("POST", "/prompt", json.dumps(body).encode())
    assert status in (200, 400), (status, raw[:300])
    payload = json.loads(raw)
    if status == 200:
        assert set(payload) == {"prompt_id", "number", "node_errors"}
    else:
        assert set(payload) == {"error", "node_errors"} and "type" in payload["error"]


def test_fuzz_post_prompt(bg_server):
    _fuzz_prompt(bg_server)
    _assert_intact(bg_server)
    status, raw, _ = bg_server.request("POST", "/prompt", b"\x00garbage")
    assert status == 400


ws_frames = (json_values.map(json.dumps) | st.text(max_size=60)
             | st.fixed_dictionaries({"type": st.sampled_from(["queue_prompt", "interrupt", "feature_flags", "x"]),
                                      "data": bodies | json_values}).map(json.dumps))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(frames=st.lists(ws_frames, min_size=1, max_size=4))
def _fuzz_ws(bg, ws_holder, frames):
    async def send_all():
        ws = ws_holder[0]
        for frame in frames:
            await ws.send_str(frame)
        await ws.send_str(json.dumps({"type": "feature_flags", "data": {}}))
        while True:  # every frame is handled in order, so the flags reply marks the end of this batch
            msg = await ws.receive(timeout=10)
            assert msg.type.name == "TEXT", msg
            data = json.loads(msg.data)
            assert data["type"] != "error"
            if data["type"] == "feature_flags":
                return
    bg.call(send_all())


def test_fuzz_websocket(bg_server):
    holder = [bg_server.call(bg_server.server.session.ws_connect(f"{bg_server.server.url}/ws?clientId=fuzz"))]
    _fuzz_ws(bg_server, holder)
    _assert_intact(bg_server)
    bg_server.call(holder[0].close())
    status, _, _ = bg_server.request("GET", "/system_stats")
    assert status == 200

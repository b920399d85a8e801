"""progress_state over the WebSocket: paced (graph/progress.py), the final map always sent first.

The pacing interval is set very long here, so that which messages go out does not depend on how
fast this machine runs the prompt: the first change goes out at once and the rest is held until
the server flushes it before `execution_success` / `execution_error`.
"""
from __future__ import annotations

import json

from graph.progress import ProgressPacing
from tests.web.web_harness import collect_until_done, ws_connect

HELD = ProgressPacing(min_interval=3600.0)


def add_chain(n: int, *, fail_at: int | None = None) -> dict:
    """Const -> Add x (n - 2) -> Output (n nodes); `fail_at` replaces that Add with a failing node."""
    prompt = {"1": {"class_type": "WebTestConst", "inputs": {"value": 1}}}
    for i in range(2, n):
        prompt[str(i)] = {"class_type": "WebTestAdd", "inputs": {"a": [str(i - 1), 0], "b": ["1", 0]}}
    if fail_at is not None:
        prompt[str(fail_at)] = {"class_type": "WebTestFail", "inputs": {"value": [str(fail_at - 1), 0], "message": "boom"}}
    prompt[str(n)] = {"class_type": "WebTestOutput", "inputs": {"value": [str(n - 1), 0], "filename_prefix": "pg"}}
    return prompt


def expected_entry(node_id: str, prompt_id: str, state: str = "finished") -> dict:
    value = 1.0 if state == "finished" else 0.0
    return {"value": value, "max": 1.0, "state": state, "node_id": node_id, "prompt_id": prompt_id,
            "display_node_id": node_id, "parent_node_id": None, "real_node_id": node_id}


async def run_chain(server, client: str, prompt: dict) -> tuple[str, list[dict], int]:
    ws, _ = await ws_connect(server, client)
    _, body = await server.post_prompt(prompt, client_id=client)
    pid = body["prompt_id"]
    frames = [f for f in await collect_until_done(ws, pid) if isinstance(f, dict)]
    await ws.close()
    size = sum(len(json.dumps(f)) for f in frames if f["type"] == "progress_state")
    return pid, frames, size


async def test_a_chain_sends_the_first_and_the_final_map_before_execution_success(server):
    server.state.worker.progress_pacing = HELD
    pid, frames, _ = await run_chain(server, "pace", add_chain(50))
    types = [f["type"] for f in frames]
    states = [f["data"] for f in frames if f["type"] == "progress_state"]
    # ComfyUI sends 100 maps here (every node's start and finish).
    assert len(states) == 2
    assert states[0]["nodes"] == {"1": expected_entry("1", pid, "running")}
    assert states[-1] == {"prompt_id": pid, "nodes": {str(i): expected_entry(str(i), pid) for i in range(1, 51)}}
    last_state = max(i for i, t in enumerate(types) if t == "progress_state")
    assert types[last_state + 1:] == ["execution_success", "status", "executing"]
    assert list(states[-1]["nodes"]) == [str(i) for i in range(1, 51)]  # ComfyUI's order: as nodes started


async def test_progress_bytes_grow_linearly_with_the_chain(server):
    server.state.worker.progress_pacing = HELD
    _, frames100, bytes100 = await run_chain(server, "lin", add_chain(100))
    _, frames1000, bytes1000 = await run_chain(server, "lin", add_chain(1000))
    count = lambda frames: sum(f["type"] == "progress_state" for f in frames)  # noqa: E731
    # The first map and the final one (ComfyUI: 200 and 2000); the first may be replaced by the final
    # one while still queued for a busy socket (web/hub.py's outbox), so one map is possible too.
    assert count(frames100) in (1, 2) and count(frames1000) in (1, 2)
    final = lambda frames: len(json.dumps([f for f in frames if f["type"] == "progress_state"][-1]))  # noqa: E731
    assert final(frames1000) < 11 * final(frames100)  # the final map grows with the chain, linearly
    assert bytes1000 < 2 * final(frames1000) + 1000  # and little else is sent (ComfyUI: ~100 times bytes100)


async def test_the_held_map_goes_out_before_execution_error(server):
    server.state.worker.progress_pacing = HELD
    pid, frames, _ = await run_chain(server, "fail", add_chain(20, fail_at=10))
    types = [f["type"] for f in frames]
    error = types.index("execution_error")
    assert types[error - 1] == "progress_state"
    final = frames[error - 1]["data"]["nodes"]
    assert final["10"] == expected_entry("10", pid, "running")  # the failing node, as ComfyUI leaves it
    assert {n: e["state"] for n, e in final.items() if n != "10"} == {str(i): "finished" for i in range(1, 10)}
    assert "progress_state" not in types[error:]


async def test_default_pacing_ends_with_the_unbatched_final_map(server):
    pid, frames, _ = await run_chain(server, "dflt", add_chain(300))
    types = [f["type"] for f in frames]
    states = [f["data"] for f in frames if f["type"] == "progress_state"]
    assert 1 <= len(states) <= 600
    assert states[-1] == {"prompt_id": pid, "nodes": {str(i): expected_entry(str(i), pid) for i in range(1, 301)}}
    assert types.index("execution_success") == max(i for i, t in enumerate(types) if t == "progress_state") + 1

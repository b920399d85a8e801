"""Packs that wrap `server.PromptServer.send_sync` on the class (timing, progress and notification
packs: ComfyUI-Dev-Utils) see every execution event of a prompt, as ComfyUI's executor sends them
all through it, and what their wrapper sends through the original reaches the client; with an
`execution.execute` wrapper, `server.last_node_id` reads the previous node before the original
and this node after it, unless the node came from the cache. A wrapper that raises costs the
client no event."""
from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest

from tests.compat.compat_harness import pack_record, start_pack_server

EVENT_PACKS = Path(__file__).resolve().parent / "hook_packs_events"

PROMPT = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 4, "batch_size": 1, "color": 0}},
    "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
    "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
}


@pytest.fixture
async def event_server(tmp_path):
    from compat.prompt_server import OWN_SEND_SYNC, PromptServer

    srv = await start_pack_server(tmp_path / "events", custom_node_dirs=(EVENT_PACKS,))
    try:
        yield srv
    finally:
        await srv.close()
        PromptServer.send_sync = OWN_SEND_SYNC  # the pack assigned the class's (one per process)


async def _run_with_socket(server, prompt: dict) -> tuple[str, list[dict]]:
    """POST `prompt` for a connected client; the JSON messages it got until `executing` None."""
    client_id = f"client-{uuid.uuid4().hex[:8]}"
    ws = await server.session.ws_connect(f"{server.url}/ws?clientId={client_id}")
    try:
        await ws.receive(timeout=10)  # the first status message
        prompt_id = str(uuid.uuid4())
        status, body = await server.post_prompt(prompt, prompt_id=prompt_id, client_id=client_id)
        assert status == 200, body
        received = []
        while True:
            message = await ws.receive(timeout=60)
            if message.type.name != "TEXT":
                continue
            frame = json.loads(message.data)
            received.append(frame)
            if frame["type"] == "event_hooks.execution_end":
                return prompt_id, received
    finally:
        await ws.close()


async def test_a_send_sync_wrapper_sees_the_execution_events_and_its_own_reach_the_client(event_server):
    record = pack_record(event_server, "event_hooks_pack")
    prompt_id, received = await _run_with_socket(event_server, PROMPT)
    seen = [(event, data.get("node") if isinstance(data, dict) else None) for event, data, _sid in record["events"]
            if isinstance(data, dict) and data.get("prompt_id") == prompt_id]
    kinds = [event for event, _ in seen]
    assert kinds[0] == "execution_start" and "execution_cached" in kinds
    assert [node for event, node in seen if event == "executing"] == ["1", "2", "3", None]
    assert [node for event, node in seen if event == "executed"] == ["3"]
    assert kinds.index("execution_success") < len(kinds) - 1 and seen[-1] == ("executing", None)
    assert all(sid is not None for _e, data, sid in record["events"] if isinstance(data, dict)
               and data.get("prompt_id") == prompt_id)
    # in step with the nodes, as ComfyUI sends them: each node's `executing` reaches the wrapper
    # before the node has run (so before what the execute wrapper sends after it)
    for node in ("1", "2", "3"):
        assert seen.index(("executing", node)) < seen.index(("event_hooks.executed", node))

    # last_node_id: the previous node's before the original, this node's after
    steps = [s for s in record["steps"] if s["client_id"] is not None]
    assert [(s["node"], s["after"]) for s in steps] == [("1", "1"), ("2", "2"), ("3", "3")]
    assert [s["before"] for s in steps][1:] == ["1", "2"]

    # what the wrappers sent through the original reached the client, in order
    types = [frame["type"] for frame in received]
    assert [f["data"]["node"] for f in received if f["type"] == "event_hooks.executed"] == ["1", "2", "3"]
    assert types.index("executed") < types.index("event_hooks.execution_end")
    assert types[-2:] == ["executing", "event_hooks.execution_end"]

    # run again: the output node comes from the cache (its inputs are not even visited, as in
    # ComfyUI), nothing runs and last_node_id does not move
    record["steps"].clear()
    _prompt_id, received = await _run_with_socket(event_server, PROMPT)
    assert [(s["node"], s["before"], s["after"]) for s in record["steps"]] == [("3", "3", "3")]
    assert not [f for f in received if f["type"] == "event_hooks.executed"]


async def test_a_send_sync_wrapper_that_raises_costs_the_client_no_event(event_server, caplog):
    record = pack_record(event_server, "event_hooks_pack")
    caplog.set_level(logging.ERROR, logger="web.prompt_routing")
    record["raise_on"] = "executed"
    try:
        changed = dict(PROMPT, **{"1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8,
                                                                                "batch_size": 1, "color": 0}}})
        _prompt_id, received = await _run_with_socket(event_server, changed)
    finally:
        record["raise_on"] = None
    assert [f["data"]["node"] for f in received if f["type"] == "executed"] == ["3"]
    assert any("send_sync failed on 'executed'" in r.getMessage() for r in caplog.records)

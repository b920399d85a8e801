"""A client-chosen `prompt_id` on POST /prompt and the WebSocket's queue_prompt: a canonical UUID,
else 400 `invalid_prompt_id` (ComfyUI server.py @002c3fb9, comfy_execution/jobs.py
`validate_job_id` @172be438, Comfy-Org/ComfyUI)."""
from __future__ import annotations

import uuid

import pytest

from tests.web.web_harness import chain, receive_json, ws_connect


async def test_a_client_uuid_is_the_prompt_id_everywhere(server):
    prompt_id = str(uuid.uuid4())
    status, body = await server.post_prompt(chain(1), prompt_id=prompt_id)
    assert status == 200 and body["prompt_id"] == prompt_id
    entry = await server.wait_history(prompt_id)
    assert entry["prompt"][1] == prompt_id
    assert (await server.get_json(f"/api/jobs/{prompt_id}"))["id"] == prompt_id
    # null: the server makes one
    status, body = await server.post_prompt(chain(2), prompt_id=None)
    assert status == 200 and str(uuid.UUID(body["prompt_id"])) == body["prompt_id"]


@pytest.mark.parametrize("value", ["mine-1", "", "6F9619FF-8B86-D011-B42D-00C04FC964FF",
                                   "6f9619ff8b86d011b42d00c04fc964ff", "{6f9619ff-8b86-d011-b42d-00c04fc964ff}",
                                   5, ["x"], {"id": 1}, True])
async def test_anything_but_a_canonical_uuid_is_invalid_prompt_id(server, value):
    status, body = await server.post_prompt(chain(1), prompt_id=value)
    assert status == 400
    assert body["error"]["type"] == "invalid_prompt_id"
    assert body["error"]["message"] == "prompt_id must be a valid UUID"
    assert body["error"]["extra_info"] == {} and body["node_errors"] == {}
    assert server.state.queue.remaining == 0


async def test_a_queued_id_cannot_be_queued_again_but_a_finished_one_can(server):
    prompt_id = str(uuid.uuid4())
    status, _ = await server.post_prompt(chain(1, steps=200, delay=0.02), prompt_id=prompt_id)
    assert status == 200
    status, body = await server.post_prompt(chain(2), prompt_id=prompt_id)
    assert status == 400 and body["error"]["type"] == "invalid_prompt_id"
    assert body["error"]["message"] == "Duplicate prompt_id" and prompt_id in body["error"]["details"]
    server.state.queue.interrupt(prompt_id)
    await server.wait_history(prompt_id)
    # only in the history now: it may run again (ComfyUI replaces the entry)
    status, body = await server.post_prompt(chain(3), prompt_id=prompt_id)
    assert status == 200 and body["prompt_id"] == prompt_id


async def test_websocket_queue_prompt_checks_the_id_too(server):
    ws, _ = await ws_connect(server, "ws-prompt-id")
    try:
        await ws.send_json({"type": "queue_prompt", "data": {"prompt": chain(1), "prompt_id": "nope"}})
        reply = await receive_json(ws, lambda m: m["type"] in ("prompt_queued", "prompt_rejected"))
        assert reply["type"] == "prompt_rejected" and reply["data"]["error"]["type"] == "invalid_prompt_id"
    finally:
        await ws.close()


async def test_extra_data_carries_create_time_and_usage_source(server):
    async with server.session.post(f"{server.url}/prompt", json={"prompt": chain(1)},
                                   headers={"Comfy-Usage-Source": "comfy-sdk"}) as resp:
        body = await resp.json()
    entry = await server.wait_history(body["prompt_id"])
    extra = entry["prompt"][3]
    assert extra["comfy_usage_source"] == "comfy-sdk" and isinstance(extra["create_time"], int)
    job = await server.get_json(f"/api/jobs/{body['prompt_id']}")
    assert job["create_time"] == extra["create_time"]
    # the body's own value wins over the header (ComfyUI)
    status, body = await server.post_prompt(chain(2), extra_data={"comfy_usage_source": "mine"})
    entry = await server.wait_history(body["prompt_id"])
    assert entry["prompt"][3]["comfy_usage_source"] == "mine"

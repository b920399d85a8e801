"""--ray: what a pack's node sends through `PromptServer.instance` on a worker (send_sync to its
client and to everyone, progress text, an unencoded preview) reaches the clients as it does
embedded, and `client_id` / `last_prompt_id` name the running prompt there."""
from __future__ import annotations

import io
import json
import os

from PIL import Image

from tests.web.ray_harness import wait_workers_ready
from tests.web.web_harness import collect_until_done, receive_json, ws_connect
from web.protocol import parse_binary_frame


def _prompt(value: int) -> dict:
    return {"1": {"class_type": "WebTestConst", "inputs": {"value": value}},
            "2": {"class_type": "RayTestPackSend", "inputs": {"value": ["1", 0]}}}


async def test_a_packs_send_sync_on_a_worker_reaches_its_client_and_everyone(ray_server):
    server = ray_server
    await wait_workers_ready(server)
    owner, _ = await ws_connect(server, "owner")
    other, _ = await ws_connect(server, "other")
    _, body = await server.post_prompt(_prompt(7), client_id="owner")
    pid = body["prompt_id"]
    frames = await collect_until_done(owner, pid, timeout=60)

    messages = [f for f in frames if isinstance(f, dict)]
    direct = next(m for m in messages if m["type"] == "raytest.direct")["data"]
    assert direct["client"] == "owner" and direct["prompt"] == pid and direct["value"] == 7
    assert direct["pid"] != os.getpid()  # it ran on a worker
    assert {"type": "raytest.everyone", "data": {"value": 7}} in messages
    binary = [parse_binary_frame(f) for f in frames if isinstance(f, bytes)]
    assert (3, ("2", "text 7")) in binary
    previews = [payload for kind, payload in binary if kind == 1]
    assert len(previews) == 1 and Image.open(io.BytesIO(previews[0][1])).getpixel((0, 0))[:3] == (7, 0, 0)
    # In their place among the prompt's own events: before the node's `executed`.
    kinds = [m["type"] for m in messages]
    assert kinds.index("raytest.direct") < kinds.index("executed")

    everyone = await receive_json(other, lambda m: m["type"].startswith("raytest."), timeout=30)
    assert everyone == {"type": "raytest.everyone", "data": {"value": 7}}  # not the owner's message
    await owner.close()
    await other.close()

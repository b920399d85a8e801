"""The WebSocket: greeting, ComfyUI's per-prompt sequence, routing, previews, reconnect, and
prompt submission over the socket."""
from __future__ import annotations

import asyncio
import json

from tests.web.web_harness import chain, collect_until_done, receive_json, ws_connect
from web.protocol import parse_binary_frame


def _types(frames: list) -> list[str]:
    return [f["type"] if isinstance(f, dict) else f"binary{parse_binary_frame(f)[0]}" for f in frames]


async def test_greeting_has_sid_and_feature_flags_reply(server):
    ws, first = await ws_connect(server, "abc")
    assert first == {"type": "status", "data": {"status": {"exec_info": {"queue_remaining": 0}}, "sid": "abc"}}
    await ws.send_json({"type": "feature_flags", "data": {"supports_preview_metadata": True}})
    reply = await receive_json(ws, lambda m: m["type"] == "feature_flags")
    assert reply["data"] == {"supports_preview_metadata": True,
                             "max_upload_size": server.state.config.max_upload_bytes,
                             "node_replacements": True, "assets": False}
    await ws.close()
    ws2, first2 = await ws_connect(server)  # no clientId: the server makes one
    assert len(first2["data"]["sid"]) == 32
    await ws2.close()


async def test_message_sequence_for_one_prompt(server):
    ws, _ = await ws_connect(server, "seq")
    status, body = await server.post_prompt(chain(2, steps=2), client_id="seq")
    pid = body["prompt_id"]
    frames = await collect_until_done(ws, pid)
    kinds = [t for t in _types(frames) if t != "progress_state"]
    assert kinds == ["status", "execution_start", "execution_cached", "executing", "executing", "progress",
                     "progress", "executing", "executed", "execution_success", "status", "executing"]
    by_type = {}
    for f in frames:
        by_type.setdefault(f["type"], []).append(f["data"])
    assert by_type["status"][0]["status"]["exec_info"]["queue_remaining"] == 1
    assert by_type["status"][-1]["status"]["exec_info"]["queue_remaining"] == 0
    assert [d["node"] for d in by_type["executing"]] == ["1", "2", "3", None]
    assert all(d["prompt_id"] == pid for d in by_type["executing"])
    assert by_type["progress"] == [{"value": 1, "max": 2, "prompt_id": pid, "node": "2"},
                                   {"value": 2, "max": 2, "prompt_id": pid, "node": "2"}]
    assert by_type["executed"][0]["output"]["values"] == [4] and by_type["executed"][0]["node"] == "3"
    states = by_type["progress_state"][-1]["nodes"]
    assert {n: s["state"] for n, s in states.items()} == {"1": "finished", "2": "finished", "3": "finished"}
    # `executing null` comes after the history entry is readable
    assert (await server.get_json(f"/history/{pid}"))[pid]["status"]["completed"] is True
    await ws.close()


async def test_two_clients_do_not_see_each_others_progress(server):
    ws_a, _ = await ws_connect(server, "alice")
    ws_b, _ = await ws_connect(server, "bob")
    _, a = await server.post_prompt(chain(1, steps=3, preview=1), client_id="alice")
    _, b = await server.post_prompt(chain(2, steps=3, preview=1), client_id="bob")
    frames_a = await collect_until_done(ws_a, a["prompt_id"])
    frames_b = await collect_until_done(ws_b, b["prompt_id"])
    for frames, mine, other in ((frames_a, a["prompt_id"], b["prompt_id"]),
                                (frames_b, b["prompt_id"], a["prompt_id"])):
        for f in frames:
            if isinstance(f, bytes):
                continue
            assert f["data"].get("prompt_id") in (None, mine), f
        assert any(isinstance(f, dict) and f["type"] == "progress" for f in frames)
        assert sum(isinstance(f, bytes) for f in frames) == 3
    # Both prompts are over, so whatever b's prompt sent anywhere is queued before this marker:
    # everything alice receives up to it comes from her own prompt or the server.
    await asyncio.to_thread(server.state.send, "test.marker", {}, "alice")
    while True:
        msg = await ws_a.receive(timeout=20)
        assert msg.type.name == "TEXT", msg  # no preview frame (binary) of b's
        assert b["prompt_id"] not in msg.data
        if json.loads(msg.data)["type"] == "test.marker":
            break
    await ws_a.close()
    await ws_b.close()


async def test_previews_are_type1_or_type4_by_client_flags(server):
    ws_old, _ = await ws_connect(server, "old")
    ws_new, _ = await ws_connect(server, "new", flags={"supports_preview_metadata": True})
    _, old = await server.post_prompt(chain(1, steps=1, preview=1), client_id="old")
    frames_old = await collect_until_done(ws_old, old["prompt_id"])
    _, new = await server.post_prompt(chain(5, steps=1, preview=1), client_id="new")
    frames_new = await collect_until_done(ws_new, new["prompt_id"])
    (kind1, (fmt, jpeg1)), = [parse_binary_frame(f) for f in frames_old if isinstance(f, bytes)]
    assert kind1 == 1 and fmt == 1 and jpeg1[:2] == b"\xff\xd8"
    (kind4, (meta, jpeg4)), = [parse_binary_frame(f) for f in frames_new if isinstance(f, bytes)]
    assert kind4 == 4 and jpeg4[:2] == b"\xff\xd8"
    assert meta == {"node_id": "2", "prompt_id": new["prompt_id"], "display_node_id": "2", "parent_node_id": None,
                    "real_node_id": "2", "image_type": "image/jpeg"}
    # the binary frame follows its node's progress message
    types = _types(frames_new)
    assert types.index("binary4") == types.index("progress") + 1
    await ws_old.close()
    await ws_new.close()


async def test_custom_events_from_nodes_reach_the_owner(server):
    ws, _ = await ws_connect(server, "ev")
    prompt = {"1": {"class_type": "WebTestConst", "inputs": {"value": 9}},
              "2": {"class_type": "WebTestEvent", "inputs": {"value": ["1", 0]}}}
    _, body = await server.post_prompt(prompt, client_id="ev")
    frames = await collect_until_done(ws, body["prompt_id"])
    assert {"type": "webtest.custom", "data": {"value": 9}} in frames
    await ws.close()


async def test_state_send_is_threadsafe_and_broadcasts_without_client(server):
    ws1, _ = await ws_connect(server, "one")
    ws2, _ = await ws_connect(server, "two")
    await asyncio.to_thread(server.state.send, "pack.hello", {"n": 1})
    await asyncio.to_thread(server.state.send, "pack.direct", {"n": 2}, "two")
    assert (await receive_json(ws1, lambda m: m["type"].startswith("pack.")))["type"] == "pack.hello"
    assert (await receive_json(ws2, lambda m: m["type"] == "pack.hello"))["data"] == {"n": 1}
    assert (await receive_json(ws2, lambda m: m["type"] == "pack.direct"))["data"] == {"n": 2}
    await asyncio.to_thread(server.state.send, 3, b"\x00\x00\x00\x01Xhi", "two")
    msg = await ws2.receive(timeout=10)
    assert msg.type.name == "BINARY" and parse_binary_frame(msg.data) == (3, ("X", "hi"))
    await ws1.close()
    await ws2.close()


async def test_reconnecting_client_gets_the_rest_of_its_prompt(server):
    ws, _ = await ws_connect(server, "flaky")
    _, body = await server.post_prompt(chain(1, steps=6, delay=0.1), client_id="flaky")
    pid = body["prompt_id"]
    await receive_json(ws, lambda m: m["type"] == "progress")
    await ws.close()
    # Wait until a progress message was sent while no socket was there (the hub keeps it).
    while not any(isinstance(m, str) and json.loads(m)["type"] == "progress"
                  for m in server.state.hub.kept_for("flaky")):  # bounded by the test timeout
        await asyncio.sleep(0.02)
    ws2, first = await ws_connect(server, "flaky")
    assert first["data"]["sid"] == "flaky"
    frames = await collect_until_done(ws2, pid)
    progress = [f["data"]["value"] for f in frames if isinstance(f, dict) and f["type"] == "progress"]
    assert progress[-1] == 6 and len(progress) >= 4  # the steps missed while away are delivered too
    assert any(isinstance(f, dict) and f["type"] == "execution_success" for f in frames)
    await ws2.close()


async def test_queue_prompt_over_the_websocket(server):
    ws, _ = await ws_connect(server, "wsc")
    await ws.send_json({"type": "queue_prompt", "data": {"prompt": chain(3), "request_id": 17,
                                                         "extra_data": {"k": "v"}}})
    queued = await receive_json(ws, lambda m: m["type"] in ("prompt_queued", "prompt_rejected"))
    assert queued["type"] == "prompt_queued" and queued["data"]["request_id"] == 17
    assert set(queued["data"]) == {"prompt_id", "number", "node_errors", "request_id"}
    frames = await collect_until_done(ws, queued["data"]["prompt_id"])
    assert any(isinstance(f, dict) and f["type"] == "executed" for f in frames)
    entry = await server.wait_history(queued["data"]["prompt_id"])
    extra = entry["prompt"][3]
    assert extra == {"k": "v", "client_id": "wsc", "create_time": extra["create_time"]}
    assert isinstance(extra["create_time"], int) and extra["create_time"] > 1.7e12  # ms, as ComfyUI

    bad = chain(3)
    bad["2"]["inputs"]["steps"] = 0
    await ws.send_json({"type": "queue_prompt", "data": {"prompt": bad}})
    rejected = await receive_json(ws, lambda m: m["type"] in ("prompt_queued", "prompt_rejected"))
    assert rejected["type"] == "prompt_rejected"
    assert rejected["data"]["error"]["type"] == "prompt_outputs_failed_validation"
    assert rejected["data"]["node_errors"]["2"]["errors"][0]["type"] == "value_smaller_than_min"
    await ws.send_json({"type": "queue_prompt", "data": "nonsense"})
    rejected = await receive_json(ws, lambda m: m["type"] == "prompt_rejected")
    assert rejected["data"]["error"]["type"] == "invalid_prompt"
    await ws.close()


async def test_websocket_interrupt_only_stops_own_prompt(server):
    owner, _ = await ws_connect(server, "owner")
    other, _ = await ws_connect(server, "other")
    await owner.send_json({"type": "queue_prompt", "data": {"prompt": chain(1, steps=100, delay=0.05)}})
    queued = await receive_json(owner, lambda m: m["type"] == "prompt_queued")
    await receive_json(owner, lambda m: m["type"] == "progress")
    await other.send_json({"type": "interrupt"})
    # A socket's messages are handled in order: once the stranger's next message is answered,
    # its interrupt has been handled, and it stopped nothing.
    await other.send_json({"type": "feature_flags", "data": {}})
    await receive_json(other, lambda m: m["type"] == "feature_flags")
    running = server.state.queue.running
    assert running is not None and running.prompt_id == queued["data"]["prompt_id"]
    assert not running.interrupt.is_set()  # a stranger cannot stop it
    await owner.send_json({"type": "interrupt", "data": {}})
    frames = await collect_until_done(owner, queued["data"]["prompt_id"])
    assert "execution_interrupted" in _types(frames)
    await owner.close()
    await other.close()


async def test_garbage_frames_are_ignored_and_socket_stays_open(server):
    ws, _ = await ws_connect(server, "junk")
    for junk in ["not json", "[]", '{"type": 5}', '{"type": "unknown"}', "{" * 5000, '{"type":"queue_prompt"}']:
        await ws.send_str(junk)
    await ws.send_bytes(b"\x00\x01")
    await ws.send_json({"type": "feature_flags", "data": {}})
    reply = await receive_json(ws, lambda m: m["type"] in ("feature_flags",))
    assert reply["type"] == "feature_flags"
    await ws.close()


async def test_client_back_after_its_prompt_ended_still_gets_the_end(server):
    ws, _ = await ws_connect(server, "late")
    _, body = await server.post_prompt(chain(1, steps=3, delay=0.05), client_id="late")
    await receive_json(ws, lambda m: m["type"] == "execution_start")
    await ws.close()
    await server.wait_history(body["prompt_id"])
    ws2, _ = await ws_connect(server, "late")
    frames = await collect_until_done(ws2, body["prompt_id"])
    assert "execution_success" in _types(frames)
    await ws2.close()
    ws3, _ = await ws_connect(server, "late")  # delivered once only
    # A replay would be queued for the socket on connect, before this marker: the marker comes first.
    await asyncio.to_thread(server.state.send, "test.marker", {}, "late")
    assert json.loads((await ws3.receive(timeout=20)).data)["type"] == "test.marker"
    await ws3.close()

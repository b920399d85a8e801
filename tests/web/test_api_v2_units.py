"""The pure parts of /api/v2 (web/v2/): label rules, list cursors, progress snapshots, and the
bridge's reading of the hub's messages, without a server."""
from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from web.protocol import preview_frame_with_metadata
from web.v2 import jobs
from web.v2.bridge import JobBridge, LiveJob
from web.v2.shapes import check_labels, iso_ms, iso_text


def test_labels_follow_the_v2_rules():
    assert check_labels(None) == ({}, None)
    assert check_labels({"client": "acme", "a.b-c_d": ""}) == ({"client": "acme", "a.b-c_d": ""}, None)
    for bad in ({"": "x"}, {"k" * 41: "x"}, {"sp ace": "x"}, {"k": 1}, {"k": "x" * 257}, {"k": "é" * 129},
                {"k": "tab\there"}, {"k": "\u2066isolate"}, {"k": "\x85"}, {f"k{i}": "v" for i in range(17)}, ["k"]):
        labels, problem = check_labels(bad)
        assert labels == {} and problem, bad
    assert check_labels({"k": "é" * 128})[1] is None  # 256 bytes exactly


def test_times_are_utc_iso():
    assert iso_ms(0) == "1970-01-01T00:00:00+00:00"
    assert iso_ms(None) is None
    assert iso_text("2026-01-02T03:04:05.000006") == "2026-01-02T03:04:05.000006+00:00"


def test_cursors_round_trip_and_refuse_foreign_text():
    view = jobs.JobView("7f3d2c1b-9a8e-4d6f-b012-3c4d5e6f7a8b", "queued", 1234)
    assert jobs.decode_cursor(jobs.encode_cursor(view)) == (1234, view.id)
    for text in ("", "!!!", "bm9wZQ", "WzEsMl0"):  # not base64 / "nope" / [1,2]
        assert jobs.decode_cursor(text) is None


def test_progress_counts_done_nodes_and_the_running_step():
    live = LiveJob("j", nodes_total=4, classes={"2": "KSampler"})
    assert live.progress()["value"] == 0.0
    live.done.update({"1"})
    live.current, live.step, live.steps = "2", 5, 10
    snap = live.progress()
    assert snap["value"] == (1 + 0.5) / 4 and snap["message"] == "KSampler 5/10"
    assert (snap["nodes_done"], snap["nodes_total"], snap["current_node"]) == (1, 4, "2")
    live.done.update({"2", "3", "4", "5"})  # more done than counted (expanded nodes): never past 1
    assert live.progress()["value"] == 1.0


def _bridge(running_id: str) -> JobBridge:
    item = SimpleNamespace(prompt_id=running_id, prompt={"1": {"class_type": "A"}, "2": {"class_type": "B"}})
    queue = SimpleNamespace(running_items=lambda: [item], running=item)
    return JobBridge(SimpleNamespace(queue=queue, hub=None))


def _send(bridge: JobBridge, kind: str, data: dict) -> None:
    bridge.on_text(json.dumps({"type": kind, "data": data}))


async def test_the_bridge_turns_messages_into_job_events():
    bridge = _bridge("job")
    inbox = bridge.subscribe("job")
    _send(bridge, "execution_start", {"prompt_id": "job"})
    _send(bridge, "execution_cached", {"prompt_id": "job", "nodes": ["1"]})
    _send(bridge, "executed", {"prompt_id": "job", "node": "2", "output": {"images": []}})
    _send(bridge, "execution_error", {"prompt_id": "job", "node_id": "2", "node_type": "B",
                                      "exception_message": "bad"})
    _send(bridge, "progress", {"prompt_id": "other", "node": "1", "value": 1, "max": 2})  # not running: ignored
    frame = preview_frame_with_metadata(b"jpeg-bytes", "JPEG", {"node_id": "2", "prompt_id": "job"})
    bridge.on_binary(frame)
    assert bridge.snapshot("job")["nodes_done"] == 2
    _send(bridge, "executing", {"prompt_id": "job", "node": None})
    got = []
    while not inbox.empty():
        got.append(inbox.get_nowait())
    kinds = [k for k, _ in got]
    assert kinds[0] == "status" and got[0][1] == {"status": "running"}
    assert ("executed", {"node": "2", "output": {"images": []}}) in got
    assert any(k == "log" and d["level"] == "error" and "bad" in d["message"] for k, d in got)
    assert any(k == "preview" and d["node_id"] == "2" and d["content_type"] == "image/jpeg" for k, d in got)
    assert kinds[-1] == "final" and bridge.snapshot("job") is None
    assert "other" not in bridge.live


async def test_a_cancel_request_shows_canceling_until_the_end():
    bridge = _bridge("job")
    inbox = bridge.subscribe("job")
    bridge.request_cancel("job")
    assert await asyncio.wait_for(inbox.get(), 1) == ("status", {"status": "canceling"})
    assert "job" in bridge.canceling
    bridge.finished("job")
    assert "job" not in bridge.canceling and await inbox.get() == ("final", None)
    bridge.unsubscribe("job", inbox)
    bridge.publish("job", "log", {})  # nobody listens: nothing kept
    assert inbox.empty()

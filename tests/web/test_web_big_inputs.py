"""Big prompts and bodies keep the event loop free (issue 34): what runs off the loop gives the same
answers as before, and nothing is encoded (no progress map even built) for a client without a
socket. Speed itself is measured by bench/server_hostile.py."""
from __future__ import annotations

import asyncio
import json

import pytest

from graph.events import Event
from graph.progress import ProgressState
from graph.prompt import DynamicPrompt
from graph.relay import MAX_BATCH, EventRelay
from tests.web.web_harness import collect_until_done, ws_connect
from web.bodies import BadRequestBody, _parse_body, parse_json_pieces
from web.hub import Deferred, WebSocketHub
from web.protocol import json_message, json_message_chunked
from web.store import encode_json
from web.submission import OFF_LOOP_NODES


def long_chain(links: int, value: int = 1) -> dict:
    """Const -> Slow x links -> Output (steps=1): a prompt of links + 2 nodes."""
    prompt = {"1": {"class_type": "WebTestConst", "inputs": {"value": value}}}
    for i in range(2, links + 2):
        prompt[str(i)] = {"class_type": "WebTestSlow", "inputs": {"value": [str(i - 1), 0], "steps": 1, "delay": 0.0,
                                                              "preview": 0, "tag": ""}}
    prompt[str(links + 2)] = {"class_type": "WebTestOutput",
                              "inputs": {"value": [str(links + 1), 0], "filename_prefix": "big"}}
    return prompt


DOCUMENTS = [
    {"prompt": long_chain(300), "extra_data": {"extra_pnginfo": {"workflow": {"nodes": [{"id": i, "pos": [1.5, 2]}
                                                                                      for i in range(3000)]}}}},
    {"a": [1, 2, {"b": "x" * 10000, "c": [{}] * 3000}], "d": "\u00e9\n\"", "e": None, "f": True, "g": -1.5e300},
    [[[[]]]] * 2000, {"dup": 1, "dup": 2, "s": "y" * 9000}, "a string", 12, [],
]


@pytest.mark.parametrize("doc", DOCUMENTS, ids=range(len(DOCUMENTS)))
@pytest.mark.parametrize("indent", [None, 2])
def test_piecewise_parsing_and_encoding_give_what_json_gives(doc, indent):
    text = json.dumps(doc, indent=indent)
    parsed = parse_json_pieces(text)
    assert parsed == json.loads(text) and json.dumps(parsed) == json.dumps(json.loads(text))  # order too
    assert encode_json(doc) == json.dumps(doc, default=str)


@pytest.mark.parametrize("bad", ['{"a": NaN' + " " * 5000 + "}", '{"a": [1' + ", 2" * 3000, '{"a": 1}x',
                                 '{"a" 1' + " " * 5000 + "}", "[1, " + "2, " * 3000 + "]", '{"a": Infinity}'])
def test_piecewise_parsing_refuses_what_json_refuses(bad):
    with pytest.raises(ValueError):
        parse_json_pieces(bad)
    with pytest.raises(BadRequestBody):
        _parse_body((bad + " " * 300_000).encode())  # a body big enough to be parsed in pieces


def test_a_big_progress_map_is_encoded_in_pieces_to_the_same_text():
    nodes = {str(i): {"value": 1.0, "max": 2.0, "state": "running", "node_id": str(i)} for i in range(5000)}
    nodes["7"]["value"] = float("nan")
    data = {"prompt_id": "p", "nodes": nodes}
    assert json_message_chunked("progress_state", data) == json_message("progress_state", data)


def _progress_events(n: int) -> list:
    events: list[Event] = []
    prompt = {str(i): {"class_type": "X", "inputs": {}} for i in range(1, n + 1)}
    state = ProgressState("p", DynamicPrompt(prompt), events.append)
    for i in range(1, n + 1):
        state.start(str(i))
        state.finish(str(i))
    return events


async def test_nothing_is_encoded_or_built_for_a_client_without_a_socket():
    hub = WebSocketHub(lambda: {"exec_info": {"queue_remaining": 0}})
    hub.attach(asyncio.get_running_loop())
    events = _progress_events(50)
    for event in events:
        hub.send_event(event, "ghost")  # no socket, no running prompt: dropped
    assert not any(e.is_built for e in events)
    assert hub.kept_for("ghost") == []

    # a client whose prompt runs keeps its events unencoded; only the latest map survives
    hub.begin_prompt("away", "p")
    for event in events:
        hub.send_event(event, "away")
    hub.send("executing", {"node": "3", "prompt_id": "p"}, "away")
    kept = hub.kept_for("away")
    assert not any(e.is_built for e in events)
    maps = [m for m in kept if isinstance(m, Deferred)]
    assert len(maps) == len(events) and [m.superseded for m in maps] == [True] * (len(events) - 1) + [False]


async def test_a_reconnecting_client_gets_the_latest_map_only(server):
    hub = server.state.hub
    events = _progress_events(30)
    hub.begin_prompt("back", "p")
    for event in events:
        hub.send_event(event, "back")
    ws, _status = await ws_connect(server, "back")
    msg = json.loads((await ws.receive(timeout=10)).data)
    assert msg["type"] == "progress_state" and len(msg["data"]["nodes"]) == 30
    assert all(n["state"] == "finished" for n in msg["data"]["nodes"].values())
    assert sum(e.is_built for e in events) == 1  # the latest, built when it was sent
    hub.end_prompt("p")
    await ws.close()


async def test_the_relay_delivers_big_batches_in_order_across_loop_turns():
    got: list[int] = []
    relay = EventRelay(asyncio.get_running_loop(), got.append, delay=0)
    for i in range(MAX_BATCH * 3 + 5):
        relay.put(i)
    while len(got) < MAX_BATCH * 3 + 5:
        await asyncio.sleep(0)
    assert got == list(range(MAX_BATCH * 3 + 5))
    relay.put("last")
    relay.flush()
    assert got[-1] == "last"


async def test_a_big_prompt_is_validated_stored_and_run_as_a_small_one(server):
    prompt = long_chain(OFF_LOOP_NODES + 10)
    ws, _ = await ws_connect(server, "big")
    status, body = await server.post_prompt(prompt, client_id="big")
    assert status == 200, body
    frames = await collect_until_done(ws, body["prompt_id"], timeout=120)
    progress = [f for f in frames if isinstance(f, dict) and f["type"] == "progress_state"]
    assert progress and len(progress[-1]["data"]["nodes"]) == len(prompt)
    entry = await server.wait_history(body["prompt_id"])
    assert entry["status"]["status_str"] == "success" and entry["prompt"][2] == prompt
    await ws.close()
    # a big invalid prompt gets the same 400 as a small one
    prompt[str(OFF_LOOP_NODES)]["inputs"]["steps"] = 0
    status, body = await server.post_prompt(prompt)
    assert status == 400 and body["node_errors"][str(OFF_LOOP_NODES)]["errors"][0]["type"] == "value_smaller_than_min"
    # the same prompt id cannot be queued twice while its store write runs
    ids = "0b9e1c3a-5d7f-4e2a-9c1b-0000000b1900"
    good = long_chain(OFF_LOOP_NODES + 10, value=2)
    answers = await asyncio.gather(server.post_prompt(good, prompt_id=ids), server.post_prompt(good, prompt_id=ids))
    assert sorted(a[0] for a in answers) == [200, 400]
    await server.wait_history(ids, timeout=120)


def test_a_big_stored_entry_reads_back_the_same_nan_included(tmp_path):
    from web.queue_item import QueueItem
    from web.store import PromptStore

    store = PromptStore.open(tmp_path)
    prompt = long_chain(3000)
    item = QueueItem(number=1, prompt_id="0b9e1c3a-5d7f-4e2a-9c1b-0000000b1901", prompt=prompt, extra_data={},
                     outputs=[str(len(prompt))])
    entry = {"prompt": item.wire(), "outputs": {"x": {"v": [float("inf"), 1.5]}}, "meta": {},
             "status": {"status_str": "success", "completed": True, "messages": []}}
    store.add_pending(item)
    assert store.pending_items()[0].prompt == prompt
    store.finish(item, entry, "success", 1, 2)
    read = store.history_entry(item.prompt_id)
    assert json.dumps(read) == json.dumps(entry) and len(json.dumps(entry)) > 256 * 1024
    store.close()

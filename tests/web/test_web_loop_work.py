"""Work proportional to a prompt's or a body's size stays off the server's event loop (issue 34):
the Ray dispatcher writes history in a worker thread, as the embedded worker does, and one long
JSON string is decoded in bounded pieces."""
from __future__ import annotations

import asyncio
import json
import threading
from types import SimpleNamespace

import pytest

from web import bodies
from web.bodies import BadRequestBody, _parse_body, parse_json_pieces
from web.config import RaySettings, ServerConfig
from web.hub import WebSocketHub
from web.prompt_queue import PromptQueue
from web.prompt_run import RunResult
from web.queue_item import QueueItem
from web.store import PromptStore


async def test_the_ray_dispatcher_writes_history_off_the_event_loop(tmp_path, monkeypatch):
    from web.ray_backend.dispatcher import RayDispatcher
    from web.ray_backend.placement import READY, WorkerSlot

    store = PromptStore.open(tmp_path)
    queue = PromptQueue(store)
    hub = WebSocketHub(lambda: {"exec_info": {"queue_remaining": queue.remaining}})
    state = SimpleNamespace(config=ServerConfig(base_dir=tmp_path, ray=RaySettings(workers=1)), env=None,
                            queue=queue, hub=hub, store=store)
    dispatcher = RayDispatcher(state)
    writers: list[int] = []
    finish = store.finish

    def recording_finish(*args, **kwargs):
        writers.append(threading.get_ident())
        return finish(*args, **kwargs)

    monkeypatch.setattr(store, "finish", recording_finish)

    async def streamed(item, slot, run):  # what a worker's stream ends with
        return RunResult("success", {"1": {"value": [1]}}, {}, [["execution_success", {}]])

    monkeypatch.setattr(dispatcher, "_stream_while_ray_lives", streamed)
    queue.put(QueueItem(number=1, prompt_id="p1", prompt={"1": {"class_type": "X", "inputs": {}}},
                        extra_data={}, outputs=["1"]))
    item = await queue.get()
    try:
        await dispatcher.run_item(item, WorkerSlot(0, state=READY))
        assert len(writers) == 1 and writers[0] != threading.get_ident()
        assert store.history_entry("p1")["outputs"] == {"1": {"value": [1]}}
        assert queue.remaining == 0
    finally:
        store.close()


LONG = 3 * bodies.STRING_CHARS + 17


@pytest.mark.parametrize("value", [
    "a" * LONG,
    "\u00e9\u4e2d\U0001f600" * (LONG // 3),  # non-ASCII, written as UTF-8
    ("x\\\"y\n\t\u0001\u2028" + "z" * 50) * (LONG // 40),  # every escape
    "\U0001f600" * LONG,  # surrogate pairs (with ensure_ascii: \ud83d\ude00) across every piece boundary
    "a" * (bodies.STRING_CHARS - 1) + "\\",  # an escape right at the first boundary
])
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_a_long_string_is_decoded_in_pieces_to_what_json_gives(value, ensure_ascii, monkeypatch):
    text = json.dumps({"workflow": value, "n": [value, 1]}, ensure_ascii=ensure_ascii)
    calls: list[int] = []  # characters each call into json's C code could read
    scan, decoder = bodies.scanstring, bodies._DECODER

    def counting_scan(s, end, *args):
        calls.append(len(s) - end)
        return scan(s, end, *args)

    class CountingDecoder:
        def raw_decode(self, s, idx=0):
            value, end = decoder.raw_decode(s, idx)
            calls.append(end - idx)
            return value, end

    monkeypatch.setattr(bodies, "scanstring", counting_scan)
    monkeypatch.setattr(bodies, "_DECODER", CountingDecoder())
    assert parse_json_pieces(text) == json.loads(text)
    assert max(calls) <= bodies.STRING_CHARS + 16  # no call decodes a whole long string
    assert sum(calls) >= 2 * len(json.dumps(value, ensure_ascii=ensure_ascii))  # the strings went through them


@pytest.mark.parametrize("bad", [
    '{"a": "' + "x" * LONG,  # never closed
    '{"a": "' + "x" * LONG + "\u0001" + '"}',  # a raw control character, late in the string
    '{"a": "' + "x" * LONG + "\\q" + '"}',  # an invalid escape
    '{"a": "' + "x" * LONG + "\\u12" + '"}',  # a short \u escape
])
def test_a_long_string_is_refused_as_json_refuses_it(bad):
    with pytest.raises(ValueError):
        json.loads(bad)
    with pytest.raises(ValueError):
        parse_json_pieces(bad)
    with pytest.raises(BadRequestBody):
        _parse_body((bad + " " * 300_000).encode())


def test_the_store_encodes_rows_before_taking_its_lock(tmp_path, monkeypatch):
    """A big prompt's encoding takes seconds in a worker thread; the loop's own short store calls
    must not wait for the lock meanwhile."""
    import web.store

    store = PromptStore.open(tmp_path)
    encode = web.store.encode_json
    locked_while_encoding: list[bool] = []

    def watching_encode(value):
        locked_while_encoding.append(store._lock.locked())
        return encode(value)

    monkeypatch.setattr(web.store, "encode_json", watching_encode)
    try:
        item = QueueItem(number=1, prompt_id="p1", prompt={"1": {"class_type": "X", "inputs": {}}},
                         extra_data={}, outputs=["1"])
        store.add_pending(item)
        store.finish(item, {"prompt": item.wire(), "outputs": {}}, "success", 1, 2)
        assert locked_while_encoding and not any(locked_while_encoding)
        assert store.history_entry("p1")["prompt"][1] == "p1"
    finally:
        store.close()


async def test_a_big_body_holds_off_timed_full_collections_from_before_it_is_read(monkeypatch):
    from aiohttp.test_utils import make_mocked_request

    from web import collector
    from web.bodies import OFF_LOOP_BYTES, read_json

    body = json.dumps({"w": "x" * (OFF_LOOP_BYTES + 10)}).encode()
    noted_before_reading: list[bool] = []

    class Payload:  # what aiohttp's request.read() reads the body from
        def __init__(self) -> None:
            self.chunks = [body]

        def set_read_chunk_size(self, size: int) -> None:
            pass

        async def readany(self) -> bytes:
            noted_before_reading.append(collector._last_big_input > float("-inf"))
            return self.chunks.pop() if self.chunks else b""

    monkeypatch.setattr(collector, "_last_big_input", float("-inf"))
    request = make_mocked_request("POST", "/prompt", headers={"Content-Length": str(len(body))}, payload=Payload())
    assert (await read_json(request)) == json.loads(body)
    assert noted_before_reading and noted_before_reading[0]


def _dispatcher(tmp_path, monkeypatch):
    from web.ray_backend.dispatcher import RayDispatcher

    store = PromptStore.open(tmp_path)
    queue = PromptQueue(store)
    hub = WebSocketHub(lambda: {"exec_info": {"queue_remaining": queue.remaining}})
    state = SimpleNamespace(config=ServerConfig(base_dir=tmp_path, ray=RaySettings(workers=1)), env=None,
                            queue=queue, hub=hub, store=store)
    dispatcher = RayDispatcher(state)

    async def streamed(item, slot, run):
        return RunResult("success", {}, {}, [["execution_success", {}]])

    monkeypatch.setattr(dispatcher, "_stream_while_ray_lives", streamed)
    return dispatcher, queue, store


def _chain_prompt(n: int) -> dict:
    return {str(i): {"class_type": "X", "inputs": {"value": [str(i - 1), 0]} if i > 1 else {}}
            for i in range(1, n + 1)}


async def test_the_ray_dispatcher_frees_an_ended_prompts_data_in_pieces_off_the_loop(tmp_path, monkeypatch):
    from web.ray_backend import dispatcher as dispatcher_module
    from web.ray_backend.placement import READY, WorkerSlot

    dispatcher, queue, store = _dispatcher(tmp_path, monkeypatch)
    threads: list[int] = []
    quiet_after: list[bool] = []
    release = dispatcher_module.release_in_pieces

    def recording_release(holder):
        threads.append(threading.get_ident())
        return release(holder)

    monkeypatch.setattr(dispatcher_module, "release_in_pieces", recording_release)
    monkeypatch.setattr(dispatcher.collector, "quiet_point", lambda: quiet_after.append(bool(threads)))
    queue.put(QueueItem(number=1, prompt_id="p1", prompt=_chain_prompt(40), extra_data={"extra_pnginfo": {}},
                        outputs=["40"]))
    try:
        await dispatcher._guarded(await queue.get(), WorkerSlot(0, state=READY))  # no reference kept here
        assert len(dispatcher.releasing) == 1 and dispatcher.collector.busy()  # freeing: no timed pass
        taken = await next(iter(dispatcher.releasing))
        assert threads and threads[0] != threading.get_ident()
        assert taken >= 2 * 40  # every node's dict and its inputs dict: nothing else held them
        await asyncio.sleep(0)  # the done callback
        assert quiet_after == [True] and not dispatcher.releasing and not dispatcher.collector.busy()
    finally:
        store.close()


async def test_the_ray_dispatcher_keeps_a_requeued_prompts_data(tmp_path, monkeypatch):
    from web.ray_backend.placement import READY, WorkerSlot

    dispatcher, queue, store = _dispatcher(tmp_path, monkeypatch)

    async def lost(item, slot):  # the worker died: the prompt is queued again, to run later
        queue.requeue(item.prompt_id)

    monkeypatch.setattr(dispatcher, "run_item", lost)
    prompt = _chain_prompt(5)
    queue.put(QueueItem(number=1, prompt_id="p1", prompt=prompt, extra_data={}, outputs=["5"]))
    try:
        await dispatcher._guarded(await queue.get(), WorkerSlot(0, state=READY))
        assert not dispatcher.releasing and prompt == _chain_prompt(5)
        assert (await queue.get()).prompt is prompt
    finally:
        store.close()

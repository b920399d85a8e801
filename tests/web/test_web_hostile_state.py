"""Hostile numbers never poison the stored state (issue 34): every number that reaches the store is
range-checked where it enters, and a stored one that cannot be used is repaired at start with a log
line. Each hostile value is followed by a restart of the server on the same database."""
from __future__ import annotations

import json
import logging
import sqlite3

import pytest

from tests.web.web_harness import chain, start_test_server
from web.queue_item import MAX_QUEUE_NUMBER, QueueItem
from web.store import DB_NAME, PromptStore

HOSTILE_NUMBERS = ["1e308", str(2 ** 63), "-1e308", str(2 ** 53 + 2), "1" + "0" * 400, "Infinity", "NaN",
                   "-Infinity", "true", '"5"']


async def _post_raw(server, body: str) -> tuple[int, dict]:
    async with server.session.post(f"{server.url}/prompt", data=body,
                                   headers={"Content-Type": "application/json"}) as resp:
        return resp.status, await resp.json()


@pytest.mark.parametrize("raw", HOSTILE_NUMBERS)
async def test_a_hostile_number_is_refused_and_the_restarted_server_queues_normally(tmp_path, raw):
    prompt = json.dumps(chain(1))
    server = await start_test_server(tmp_path)
    try:
        status, body = await _post_raw(server, f'{{"prompt": {prompt}, "number": {raw}}}')
        assert status == 400, body
        assert body["error"]["type"] == "invalid_prompt"  # the body reader refuses Infinity/NaN itself
        # the limit itself is accepted (ComfyUI's semantics: a given number is used as it is)
        status, body = await server.post_prompt(chain(2), number=-MAX_QUEUE_NUMBER)
        assert status == 200 and body["number"] == -MAX_QUEUE_NUMBER
        await server.wait_history(body["prompt_id"])
    finally:
        await server.close()
    server = await start_test_server(tmp_path)  # the same database
    try:
        status, body = await server.post_prompt(chain(3))
        assert status == 200, body
        assert 0 <= body["number"] <= 2  # the counter continues after the sane stored numbers
        status, front = await server.post_prompt(chain(4), front=True)
        assert status == 200 and front["number"] == -(body["number"] + 1)
    finally:
        await server.close()


async def test_the_largest_allowed_number_leaves_a_usable_counter_after_restart(tmp_path):
    server = await start_test_server(tmp_path)
    try:
        status, body = await server.post_prompt(chain(1), number=MAX_QUEUE_NUMBER)
        assert status == 200, body
        await server.wait_history(body["prompt_id"])
    finally:
        await server.close()
    server = await start_test_server(tmp_path)
    try:
        status, body = await server.post_prompt(chain(2))
        assert status == 200, body
        assert body["number"] == MAX_QUEUE_NUMBER + 1
        await server.wait_history(body["prompt_id"])
    finally:
        await server.close()


def _poison(tmp_path, number, *, table: str) -> str:
    """Write a row with `number` straight into the database, as an older server (or a hand) did."""
    store = PromptStore.open(tmp_path / "user")
    item = QueueItem(number=0, prompt_id="0b9e1c3a-5d7f-4e2a-9c1b-00000000bad0", prompt=chain(9),
                     extra_data={}, outputs=["3"])
    if table == "queue":
        store.add_pending(item)
    else:
        store.finish(item, {"prompt": item.wire(), "outputs": {}, "meta": {},
                            "status": {"status_str": "success", "completed": True, "messages": []}},
                     "success", 1, 2)
    store.close()
    db = sqlite3.connect(tmp_path / "user" / DB_NAME)
    db.execute(f"UPDATE {table} SET number=?", (number,))
    db.commit()
    db.close()
    return item.prompt_id


@pytest.mark.parametrize("table", ["history", "queue"])
@pytest.mark.parametrize("number", [1e308, -1e308, 2 ** 63 - 1, "not a number"])
async def test_a_stored_number_that_cannot_be_used_is_repaired_at_start(tmp_path, caplog, table, number):
    prompt_id = _poison(tmp_path, number, table=table)
    with caplog.at_level(logging.WARNING, logger="web.store"):
        server = await start_test_server(tmp_path)
    try:
        assert any("repaired the stored number" in r.getMessage() and prompt_id in r.getMessage()
                   for r in caplog.records)
        status, body = await server.post_prompt(chain(1))
        assert status == 200, body
        assert -MAX_QUEUE_NUMBER <= body["number"] <= MAX_QUEUE_NUMBER + 1
        await server.wait_history(body["prompt_id"])
        await server.wait_history(prompt_id) if table == "queue" else None
        jobs = await server.get_json("/jobs")
        assert prompt_id in {j["id"] for j in jobs["jobs"]}
    finally:
        await server.close()


async def test_a_stored_row_with_unreadable_json_is_skipped_not_a_500(tmp_path, caplog):
    history_id = _poison(tmp_path, 1, table="history")
    db = sqlite3.connect(tmp_path / "user" / DB_NAME)
    db.execute("UPDATE history SET entry='{not json'")
    db.execute("INSERT INTO queue (prompt_id, number, prompt, extra_data, outputs, state, create_ms)"
               " VALUES ('0b9e1c3a-5d7f-4e2a-9c1b-00000000bad1', 1, '[broken', '{}', '[]', 'pending', 1)")
    db.execute("INSERT INTO queue (prompt_id, number, prompt, extra_data, outputs, state, create_ms)"
               " VALUES ('0b9e1c3a-5d7f-4e2a-9c1b-00000000bad2', 1, '{}', '{}', '[]', 'running', 'x')")
    db.commit()
    db.close()
    with caplog.at_level(logging.WARNING, logger="web.store"):
        server = await start_test_server(tmp_path)
    try:
        assert any("bad1" in r.getMessage() and "cannot be read" in r.getMessage() for r in caplog.records)
        for path in ("/history", f"/history/{history_id}", "/jobs", "/queue", "/history?max_items=5"):
            await server.get_json(path)  # 200, not 500
        status, body = await server.post_prompt(chain(1))
        assert status == 200, body
        await server.wait_history(body["prompt_id"])
    finally:
        await server.close()


@pytest.mark.parametrize("query", ["max_items=" + "9" * 30, "offset=-" + "9" * 30, "max_items=" + "9" * 5000])
async def test_history_window_past_a_64_bit_integer_is_a_400(server, query):
    async with server.session.get(f"{server.url}/history?{query}") as resp:
        assert resp.status == 400, await resp.text()


async def test_packs_cannot_queue_or_set_an_unusable_number(server):
    with pytest.raises(ValueError):
        server.state.queue.put_wire((1e308, "0b9e1c3a-5d7f-4e2a-9c1b-00000000bad3", chain(1), {}, ["3"]))
    with pytest.raises(ValueError):
        server.state.queue.counter = 2 ** 63
    assert server.state.queue.counter < 2 ** 53

"""Queue control (docs/queue.md): pause / resume, move, retry, per-owner priorities, their routes,
and the store's migration of a database from before them. In-process servers; the kill -9
durability of all of it is tests/web/test_queue_control_restart.py."""
from __future__ import annotations

import asyncio
import json
import sqlite3
import time

import pytest

from tests.web.web_harness import chain, receive_json, start_test_server, ws_connect
from web.prompt_queue import PRIORITY_STEP, PromptQueue, PromptStateError, QueueControlError, UnknownPromptError
from web.queue_item import DEFAULT_OWNER, QueueItem
from web.store import PromptStore


async def _until(predicate, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def _post(srv, path: str, body: dict | None = None) -> tuple[int, dict]:
    async with srv.session.post(f"{srv.url}{path}", json=body) as resp:
        raw = await resp.read()
        return resp.status, json.loads(raw) if raw else None


def _failing(value: int = 1) -> dict:
    return {"1": {"class_type": "WebTestConst", "inputs": {"value": value}},
            "2": {"class_type": "WebTestFail", "inputs": {"value": ["1", 0], "message": "boom"}},
            "3": {"class_type": "WebTestOutput", "inputs": {"value": ["2", 0], "filename_prefix": "fail"}}}


@pytest.fixture
async def srv(tmp_path):
    server = await start_test_server(tmp_path)
    yield server
    await server.close()


# -- pause / resume ---------------------------------------------------------------------------

async def test_pause_holds_new_prompts_and_resume_releases_them(srv):
    ws, first = await ws_connect(srv, "watcher")
    assert first["data"]["status"] == {"exec_info": {"queue_remaining": 0}}  # ComfyUI's shape unpaused
    status, state = await _post(srv, "/api/queue/pause")
    assert status == 200 and state["paused"] is True
    paused = await receive_json(ws, lambda m: m["type"] == "status")
    assert paused["data"]["status"]["exec_info"] == {"queue_remaining": 0, "paused": True}

    ids = [(await srv.post_prompt(chain(n)))[1]["prompt_id"] for n in (1, 2)]
    # the worker looked at the queue after both entered and left them there
    state = await _until(lambda: _state_if(srv, lambda s: s["held"] == 2), "the worker to hold both prompts")
    assert state["running"] == [] and state["pending"] == ids and state["paused"] is True
    assert srv.state.queue.running is None and srv.state.store.paused() is True
    assert await srv.get_json(f"/history/{ids[0]}") == {}

    status, state = await _post(srv, "/api/queue/resume")
    assert status == 200 and state["paused"] is False
    resumed = await receive_json(ws, lambda m: m["type"] == "status" and "paused" not in m["data"]["status"]["exec_info"])
    assert resumed["data"]["status"]["exec_info"]["queue_remaining"] >= 1
    for pid in ids:
        assert (await srv.wait_history(pid))["status"]["status_str"] == "success"
    assert list(await srv.get_json("/history")) == ids
    assert srv.state.store.paused() is False
    await ws.close()


async def _state_if(srv, predicate):
    state = await srv.get_json("/api/queue/state")
    return state if predicate(state) else None


async def test_the_running_prompt_finishes_while_paused(srv):
    _, running = await srv.post_prompt(chain(1, steps=20, delay=0.02))
    await _until(lambda: _state_if(srv, lambda s: s["running"]), "the first prompt to start")
    await _post(srv, "/api/queue/pause")
    _, waiting = await srv.post_prompt(chain(2))
    assert (await srv.wait_history(running["prompt_id"]))["status"]["status_str"] == "success"
    state = await _until(lambda: _state_if(srv, lambda s: s["held"] == 1), "the worker to hold the second")
    assert state["pending"] == [waiting["prompt_id"]] and state["running"] == []
    await _post(srv, "/api/queue/resume")
    assert (await srv.wait_history(waiting["prompt_id"]))["status"]["status_str"] == "success"


async def test_pause_and_resume_are_idempotent_and_durable(tmp_path):
    store = PromptStore.open(tmp_path)
    queue = PromptQueue(store)
    changes = []
    queue.on_change = lambda: changes.append(queue.paused)
    queue.pause()
    queue.pause()
    assert changes == [True] and PromptQueue(store).paused is True
    queue.resume()
    queue.resume()
    assert changes == [True, False] and PromptQueue(store).paused is False


async def test_a_cancelled_get_while_paused_takes_nothing(tmp_path):
    queue = PromptQueue(PromptStore.open(tmp_path))
    queue.pause()
    queue.put(QueueItem(number=0, prompt_id="a", prompt={}, extra_data={}, outputs=[]))
    getter = asyncio.ensure_future(queue.get())
    while queue.held != 1:
        await asyncio.sleep(0)
    getter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await getter
    assert queue.held == 0 and [i.prompt_id for i in queue.pending()] == ["a"] and queue.running is None
    queue.resume()
    assert (await queue.get()).prompt_id == "a"


# -- move -------------------------------------------------------------------------------------

async def test_move_reorders_pending_prompts_durably_and_runs_in_the_new_order(srv):
    await _post(srv, "/api/queue/pause")
    a, b, c = [(await srv.post_prompt(chain(n)))[1]["prompt_id"] for n in (1, 2, 3)]
    status, moved = await _post(srv, "/api/queue/move", {"prompt_id": c, "position": "front"})
    assert status == 200 and moved["pending"] == [c, a, b] and moved["position"] == 0
    numbers = {i.prompt_id: i.number for i in srv.state.queue.pending()}
    assert numbers[c] < numbers[a]  # a number below the lowest
    status, moved = await _post(srv, "/api/queue/move", {"prompt_id": a, "position": 2})
    assert status == 200 and moved["pending"] == [c, b, a]
    status, moved = await _post(srv, "/api/queue/move", {"prompt_id": a, "position": 1})
    assert moved["pending"] == [c, a, b]
    # durable: the store holds the same order, and a new prompt still goes last
    assert [i.prompt_id for i in srv.state.store.pending_items()] == [c, a, b]
    _, d = await srv.post_prompt(chain(4))
    assert (await srv.get_json("/api/queue/state"))["pending"] == [c, a, b, d["prompt_id"]]
    status, moved = await _post(srv, "/api/queue/move", {"prompt_id": c, "position": "back"})
    assert moved["pending"] == [a, b, d["prompt_id"], c]
    await _post(srv, "/api/queue/resume")
    for pid in (a, b, d["prompt_id"], c):
        await srv.wait_history(pid)
    assert list(await srv.get_json("/history")) == [a, b, d["prompt_id"], c]


async def test_move_renumbers_when_no_number_fits_between_neighbours(tmp_path):
    store = PromptStore.open(tmp_path)
    queue = PromptQueue(store)
    for pid, number in (("a", 5), ("b", 5), ("c", 6)):  # packs may queue equal numbers
        queue.put(QueueItem(number=number, prompt_id=pid, prompt={}, extra_data={}, outputs=[]))
    queue.move("c", 1)
    assert [i.prompt_id for i in queue.pending()] == ["a", "c", "b"]
    assert [i.number for i in queue.pending()] == [5, 6, 7]
    assert [(i.prompt_id, i.number) for i in PromptStore.open(tmp_path).pending_items()] == [
        ("a", 5), ("c", 6), ("b", 7)]
    assert queue.next_number(False) == 8  # later prompts still enter after the moved ones


async def test_move_errors(srv):
    _, running = await srv.post_prompt(chain(1, steps=40, delay=0.02))
    await _until(lambda: _state_if(srv, lambda s: s["running"]), "the prompt to start")
    _, waiting = await srv.post_prompt(chain(2))
    pid = waiting["prompt_id"]
    cases = [({"prompt_id": running["prompt_id"], "position": 0}, 409, "invalid_state"),
             ({"prompt_id": "0b9e1c3a-5d7f-4e2a-9c1b-00000000dead", "position": 0}, 404, "unknown_prompt"),
             ({"prompt_id": pid, "position": 1}, 400, "invalid_request"),
             ({"prompt_id": pid, "position": -1}, 400, "invalid_request"),
             ({"prompt_id": pid, "position": True}, 400, "invalid_request"),
             ({"prompt_id": pid, "position": "middle"}, 400, "invalid_request"),
             ({"prompt_id": 5, "position": 0}, 400, "invalid_request")]
    for body, code, kind in cases:
        status, answer = await _post(srv, "/api/queue/move", body)
        assert (status, answer["error"]["type"]) == (code, kind), body
    async with srv.session.post(f"{srv.url}/api/queue/move", data=b"[1") as resp:
        assert resp.status == 400 and "error" in await resp.json()
    srv.state.queue.interrupt(running["prompt_id"])
    await srv.wait_history(pid)


# -- retry ------------------------------------------------------------------------------------

async def test_retry_of_a_failed_job_reruns_it_linked_both_ways(srv):
    body_extra = {"extra_pnginfo": {"workflow": {"id": "wf-1"}}}
    _, failed = await srv.post_prompt(_failing(), extra_data=body_extra, client_id="c1")
    old = failed["prompt_id"]
    assert (await srv.wait_history(old))["status"]["status_str"] == "error"
    status, retried = await _post(srv, f"/api/jobs/{old}/retry")
    assert status == 200 and retried["retry_of"] == old
    new = retried["prompt_id"]
    assert new != old
    rerun = await srv.wait_history(new)
    assert rerun["status"]["status_str"] == "error" and rerun["retry_of"] == old  # it ran again
    assert rerun["prompt"][2] == _failing() and rerun["prompt"][3]["extra_pnginfo"] == body_extra["extra_pnginfo"]
    assert rerun["prompt"][3]["client_id"] == "c1"
    assert (await srv.get_json(f"/history/{old}"))[old]["retried_as"] == new
    history = await srv.get_json("/history")
    assert history[old]["retried_as"] == new and history[new]["retry_of"] == old
    jobs = {j["id"]: j for j in (await srv.get_json("/api/jobs"))["jobs"]}
    assert jobs[old]["retried_as"] == new and jobs[new]["retry_of"] == old
    assert (await srv.get_json(f"/api/jobs/{new}"))["retry_of"] == old
    # a job that was never retried carries neither key (ComfyUI's shapes)
    assert "retried_as" not in jobs[new] and "retry_of" not in jobs[old]
    # retried once: retry the retry instead
    status, answer = await _post(srv, f"/api/jobs/{old}/retry")
    assert status == 409 and new in answer["error"]["message"]


async def test_retry_of_an_interrupted_job_runs_it_to_completion(srv):
    _, slow = await srv.post_prompt(chain(3, steps=25, delay=0.02))
    old = slow["prompt_id"]
    await _until(lambda: _state_if(srv, lambda s: s["running"] == [old]), "the prompt to start")
    await _post(srv, "/interrupt", {"prompt_id": old})
    assert (await srv.wait_history(old))["status"]["status_str"] == "error"
    assert {j["id"]: j["status"] for j in (await srv.get_json("/api/jobs"))["jobs"]}[old] == "cancelled"
    await _post(srv, "/api/queue/pause")
    status, retried = await _post(srv, f"/api/jobs/{old}/retry")
    new = retried["prompt_id"]
    pending = await srv.get_json(f"/api/jobs/{new}")
    assert pending["status"] == "pending" and pending["retry_of"] == old
    await _post(srv, "/api/queue/resume")
    assert (await srv.wait_history(new))["status"]["status_str"] == "success"


async def test_retry_errors(srv):
    _, done = await srv.post_prompt(chain(1))
    await srv.wait_history(done["prompt_id"])
    status, answer = await _post(srv, f"/api/jobs/{done['prompt_id']}/retry")
    assert status == 409 and answer["error"]["type"] == "invalid_state"
    status, answer = await _post(srv, "/api/jobs/0b9e1c3a-5d7f-4e2a-9c1b-00000000dead/retry")
    assert status == 404 and answer["error"]["type"] == "unknown_prompt"
    await _post(srv, "/api/queue/pause")
    _, waiting = await srv.post_prompt(chain(2))
    status, answer = await _post(srv, f"/api/jobs/{waiting['prompt_id']}/retry")
    assert status == 409
    status, answer = await _post(srv, f"/api/jobs/{waiting['prompt_id']}/retry", {"front": "yes"})
    assert status == 400
    with pytest.raises(UnknownPromptError):
        srv.state.queue.retry("nope")
    with pytest.raises(PromptStateError):
        srv.state.queue.retry(done["prompt_id"])


# -- priorities -------------------------------------------------------------------------------

async def test_an_owner_priority_moves_its_later_prompts_ahead(srv):
    await _post(srv, "/api/queue/pause")
    _, first = await srv.post_prompt(chain(1))
    status, listing = await _post(srv, "/api/queue/priorities", {"owner": DEFAULT_OWNER, "priority": 2})
    assert status == 200 and listing["priorities"] == {DEFAULT_OWNER: 2}
    _, second = await srv.post_prompt(chain(2))
    assert second["number"] == first["number"] + 1 - 2 * PRIORITY_STEP
    assert (await srv.get_json("/api/queue/state"))["pending"] == [second["prompt_id"], first["prompt_id"]]
    assert srv.state.store.priorities() == {DEFAULT_OWNER: 2}
    assert (await srv.get_json("/api/queue/priorities"))["priorities"] == {DEFAULT_OWNER: 2}
    for bad in ({"owner": DEFAULT_OWNER, "priority": -1}, {"owner": DEFAULT_OWNER, "priority": 1001},
                {"owner": DEFAULT_OWNER, "priority": 1.5}, {"owner": "", "priority": 1}, {"priority": 1},
                {"owner": DEFAULT_OWNER, "priority": True}):
        status, answer = await _post(srv, "/api/queue/priorities", bad)
        assert status == 400 and answer["error"]["type"] == "invalid_request", bad
    await _post(srv, "/api/queue/priorities", {"owner": DEFAULT_OWNER, "priority": 0})
    assert srv.state.store.priorities() == {}


async def test_priority_orders_owners_and_keeps_first_come_first_served_within_one(tmp_path):
    queue = PromptQueue(PromptStore.open(tmp_path))
    queue.set_priority("alice", 1)
    order = [("bob", "b1"), ("alice", "a1"), ("bob", "b2"), ("alice", "a2")]
    for owner, pid in order:
        queue.put(QueueItem(number=queue.next_number(False, owner), prompt_id=pid, prompt={}, extra_data={},
                            outputs=[], owner=owner))
    assert [i.prompt_id for i in queue.pending()] == ["a1", "a2", "b1", "b2"]
    assert [i.owner for i in PromptStore.open(tmp_path).pending_items()] == ["alice", "alice", "bob", "bob"]
    with pytest.raises(QueueControlError):
        queue.set_priority("x" * 201, 1)


# -- the store's migration ----------------------------------------------------------------------

_OLD_SCHEMA = """
CREATE TABLE queue (prompt_id TEXT PRIMARY KEY, number REAL NOT NULL, prompt TEXT NOT NULL,
    extra_data TEXT NOT NULL, outputs TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'pending',
    create_ms INTEGER NOT NULL, start_ms INTEGER);
CREATE TABLE history (seq INTEGER PRIMARY KEY AUTOINCREMENT, prompt_id TEXT NOT NULL UNIQUE,
    entry TEXT NOT NULL, status TEXT NOT NULL, number REAL NOT NULL, create_ms INTEGER NOT NULL,
    start_ms INTEGER, end_ms INTEGER NOT NULL);
"""


def test_a_database_from_before_queue_control_is_migrated(tmp_path):
    from web.store import DB_NAME

    db = sqlite3.connect(tmp_path / DB_NAME)
    db.executescript(_OLD_SCHEMA)
    db.execute("INSERT INTO queue VALUES ('p1', 3, '{}', '{}', '[]', 'pending', 1, NULL)")
    wire = [1, "h1", {}, {}, []]
    entry = {"prompt": wire, "outputs": {}, "meta": {}, "status": {"status_str": "error", "messages": []}}
    db.execute("INSERT INTO history (prompt_id, entry, status, number, create_ms, start_ms, end_ms)"
               " VALUES ('h1', ?, 'error', 1, 1, 1, 2)", (json.dumps(entry),))
    db.commit()
    db.close()
    store = PromptStore.open(tmp_path)
    [item] = store.pending_items()
    assert (item.prompt_id, item.owner, item.retry_of) == ("p1", DEFAULT_OWNER, None)
    assert store.history_entry("h1") == entry  # no link keys on an entry without retries
    assert store.paused() is False and store.priorities() == {}
    queue = PromptQueue(store)
    queue.restore(store.pending_items())
    new = queue.retry("h1")
    reopened = PromptStore.open(tmp_path)
    assert reopened.history_record("h1").retried_as == new
    assert {i.prompt_id: i.retry_of for i in reopened.pending_items()} == {"p1": None, new: "h1"}


def test_a_rerun_under_the_same_id_keeps_the_link_to_its_retry(tmp_path):
    store = PromptStore.open(tmp_path)
    queue = PromptQueue(store)
    item = QueueItem(number=1, prompt_id="old", prompt={}, extra_data={}, outputs=[])
    entry = {"prompt": item.wire(), "outputs": {}, "meta": {}, "status": {"status_str": "error", "messages": []}}
    store.finish(item, entry, "error", 1, 2)
    new = queue.retry("old")
    store.finish(item, entry, "error", 3, 4)  # the old id queued and finished again (POST /prompt with it)
    assert store.history_record("old").retried_as == new and store.history_entry("old")["retried_as"] == new

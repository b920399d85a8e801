"""The WebSocket hub's reconnect catch-up with several prompts running at once (--ray): what each
owner misses is kept for that owner, kept after its prompt ends until its next one starts, and
only for the clients whose prompts ended last."""
from __future__ import annotations

from web.hub import ENDED_KEPT, WebSocketHub


def _hub() -> WebSocketHub:
    return WebSocketHub(lambda: {"exec_info": {"queue_remaining": 0}})


def test_each_running_prompts_owner_keeps_what_it_missed():
    hub = _hub()
    hub.begin_prompt("alice", "a")
    hub.begin_prompt("bob", "b")
    hub.send("progress", {"prompt_id": "a"}, "alice")
    hub.send("progress", {"prompt_id": "b"}, "bob")
    hub.send("progress", {"prompt_id": "x"}, "carol")  # owns no running prompt: not kept
    assert [m for m in hub.kept_for("alice")] == ['{"type": "progress", "data": {"prompt_id": "a"}}']
    assert [m for m in hub.kept_for("bob")] == ['{"type": "progress", "data": {"prompt_id": "b"}}']
    assert hub.kept_for("carol") == []
    hub.note_executing("a", "5")
    hub.note_executing("b", "7")
    assert (hub.running["a"].last_node, hub.running["b"].last_node) == ("5", "7")


def test_a_second_prompt_of_the_same_client_keeps_the_first_ones_messages():
    hub = _hub()
    hub.begin_prompt("alice", "a1")
    hub.send("executing", {"node": "1", "prompt_id": "a1"}, "alice")
    hub.begin_prompt("alice", "a2")  # on another worker, while a1 runs
    assert len(hub.kept_for("alice")) == 1
    hub.end_prompt("a1")
    hub.send("executing", {"node": "1", "prompt_id": "a2"}, "alice")
    assert len(hub.kept_for("alice")) == 2
    hub.end_prompt("a2")
    assert len(hub.kept_for("alice")) == 2  # kept after the end, for a late reconnect
    hub.send("status", {}, "alice")  # nothing runs for alice now: not kept any more
    assert len(hub.kept_for("alice")) == 2
    hub.begin_prompt("alice", "a3")
    assert hub.kept_for("alice") == []  # its next prompt starts afresh


def test_only_the_latest_ended_clients_keep_their_missed_messages():
    hub = _hub()
    clients = [f"c{n}" for n in range(ENDED_KEPT + 2)]
    hub.begin_prompt("runner", "r")
    hub.send("progress", {}, "runner")
    for n, client in enumerate(clients):
        hub.begin_prompt(client, f"p{n}")
        hub.send("progress", {"n": n}, client)
        hub.end_prompt(f"p{n}")
    assert hub.kept_for("c0") == [] and hub.kept_for("c1") == []  # ended first, dropped
    assert all(len(hub.kept_for(client)) == 1 for client in clients[2:])
    assert len(hub.kept_for("runner")) == 1  # still running: never dropped

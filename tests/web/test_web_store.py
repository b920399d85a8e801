"""The SQLite queue/history store: durability across reopen, windowing, recovery, trimming."""
from __future__ import annotations

from web.queue_item import QueueItem
from web.store import PromptStore


def _item(pid: str, number: float = 0, **extra) -> QueueItem:
    return QueueItem(number=number, prompt_id=pid, prompt={"1": {"class_type": "X", "inputs": {}}},
                     extra_data={"client_id": "c", **extra}, outputs=["1"])


def _entry(item: QueueItem) -> dict:
    return {"prompt": item.wire(), "outputs": {}, "status": {"status_str": "success", "completed": True,
                                                             "messages": []}, "meta": {}}


def test_pending_items_survive_reopen_in_queue_order(tmp_path):
    store = PromptStore.open(tmp_path)
    store.add_pending(_item("b", 2))
    store.add_pending(_item("a", 1))
    store.add_pending(_item("c", -5))
    store.close()
    again = PromptStore.open(tmp_path)
    assert [i.prompt_id for i in again.pending_items()] == ["c", "a", "b"]
    assert again.max_number() == 2


def test_sensitive_extra_data_is_never_written(tmp_path):
    store = PromptStore.open(tmp_path)
    store.add_pending(_item("a", api_key_comfy_org="secret", auth_token_comfy_org="tok"))
    store.close()
    raw = (tmp_path / "comfy_engine_queue.sqlite3").read_bytes()
    wal = tmp_path / "comfy_engine_queue.sqlite3-wal"
    raw += wal.read_bytes() if wal.exists() else b""
    assert b"secret" not in raw and b"tok\"" not in raw
    assert PromptStore.open(tmp_path).pending_items()[0].extra_data == {"client_id": "c"}


def test_running_prompt_becomes_interrupted_history_on_recovery(tmp_path):
    store = PromptStore.open(tmp_path)
    store.add_pending(_item("run", 1))
    store.add_pending(_item("wait", 2))
    store.mark_running("run", 123)
    store.close()  # the server "dies" here
    again = PromptStore.open(tmp_path)
    assert again.recover_interrupted() == ["run"]
    entry = again.history_entry("run")
    assert entry["status"]["status_str"] == "error" and entry["status"]["completed"] is False
    kinds = [m[0] for m in entry["status"]["messages"]]
    assert kinds[-1] == "execution_interrupted"
    assert entry["status"]["messages"][-1][1]["prompt_id"] == "run"
    assert entry["prompt"][1] == "run" and entry["prompt"][2] == {"1": {"class_type": "X", "inputs": {}}}
    assert [i.prompt_id for i in again.pending_items()] == ["wait"]
    assert again.history_record("run").status == "interrupted"


def test_history_windowing_matches_comfyui(tmp_path):
    store = PromptStore.open(tmp_path)
    for n in range(5):
        item = _item(f"p{n}", n)
        store.finish(item, _entry(item), "success", 1, 2)
    assert list(store.history()) == ["p0", "p1", "p2", "p3", "p4"]
    assert list(store.history(max_items=2)) == ["p3", "p4"]  # offset -1: the last ones
    assert list(store.history(max_items=2, offset=1)) == ["p1", "p2"]
    assert list(store.history(offset=3)) == ["p3", "p4"]
    assert store.history(offset=5) == {}
    store.delete_history(["p1"])
    assert "p1" not in store.history()
    store.clear_history()
    assert store.history() == {}


def test_finish_moves_prompt_from_queue_to_history_and_trims(tmp_path):
    store = PromptStore.open(tmp_path, max_history=3)
    for n in range(5):
        item = _item(f"p{n}", n)
        store.add_pending(item)
        store.finish(item, _entry(item), "success", 1, 2)
    assert store.pending_items() == []
    assert list(store.history()) == ["p2", "p3", "p4"]
    again = _item("p2", 9)  # re-running an id replaces its entry and moves it to the end
    store.finish(again, _entry(again), "error", 3, 4)
    assert list(store.history()) == ["p3", "p4", "p2"]

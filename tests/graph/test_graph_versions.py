"""VersionedMap (graph/versions.py): every past state reads exactly as a copy taken then would."""
from __future__ import annotations

import random
import threading

from graph.versions import VersionedMap


def changes(count: int, keys: int, seed: int = 0) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [(f"k{rng.randrange(keys)}", i) for i in range(count)]


def test_every_version_reads_as_the_copy_taken_then_in_any_order():
    versions, copies, live = [], [], {}
    store: VersionedMap[str, int] = VersionedMap()
    for key, value in changes(2000, 150):
        versions.append(store.set(key, value))
        live[key] = value
        copies.append(dict(live))
    order = list(range(len(versions)))
    random.Random(1).shuffle(order)
    for i in order:
        state = store.read(versions[i])
        assert state == copies[i] and list(state) == list(copies[i]), i  # values and key order


def test_a_version_is_built_once_and_only_when_read():
    store: VersionedMap[str, int] = VersionedMap()
    first = store.set("a", 1)
    second = store.set("b", 2)
    assert not first.is_built and not second.is_built
    built = store.read(first, lambda state: {"nodes": state})
    assert built == {"nodes": {"a": 1}} and first.is_built and not second.is_built
    assert store.read(first, lambda state: {"other": state}) is built  # every reader gets the same object
    assert store.get("a") == 1 and store.get("b") == 2 and store.get("c") is None


def test_a_reader_changing_its_map_changes_no_other_version():
    store: VersionedMap[str, int] = VersionedMap()
    first, second = store.set("a", 1), store.set("b", 2)
    mine = store.read(first)
    mine["a"] = 99
    mine["z"] = 0
    third = store.set("c", 3)
    assert store.read(second) == {"a": 1, "b": 2} and store.read(third) == {"a": 1, "b": 2, "c": 3}


def test_replacing_a_value_keeps_the_key_in_its_first_place():
    store: VersionedMap[str, int] = VersionedMap()
    store.set("a", 1)
    store.set("b", 2)
    third = store.set("a", 3)
    store.set("c", 4)
    assert list(store.read(third).items()) == [("a", 3), ("b", 2)]


def test_readers_on_other_threads_see_each_state_while_the_writer_goes_on():
    store: VersionedMap[str, int] = VersionedMap()
    versions, copies, live = [], [], {}
    lock = threading.Lock()
    problems: list = []
    done = threading.Event()

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not done.is_set():
            with lock:
                if not versions:
                    continue
                i = rng.randrange(len(versions))
                version, expected = versions[i], copies[i]
            state = store.read(version)
            if state != expected or list(state) != list(expected):
                problems.append(i)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    for key, value in changes(3000, 300, seed=2):
        live[key] = value
        snapshot = dict(live)
        version = store.set(key, value)
        with lock:
            versions.append(version)
            copies.append(snapshot)
    done.set()
    for thread in threads:
        thread.join()
    assert problems == []
    assert all(store.read(v) == c for v, c in zip(versions, copies))

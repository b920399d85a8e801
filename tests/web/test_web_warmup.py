"""web/warmup.py: the deferred memory manager, the nodes' lazy imports, the background warm-up,
and the server starting its queue worker only after the warm-up."""
from __future__ import annotations

import asyncio
import importlib
import threading
from types import SimpleNamespace

import aiohttp
import pytest

from web import warmup
from web.app import start_server
from web.bootstrap import build_state
from web.config import ServerConfig
from web.warmup import DeferredMemoryManager, lazy_imports, warm_up

# client-chosen prompt ids are UUIDs (POST /prompt refuses anything else)
EARLY = "0b9e1c3a-5d7f-4e2a-9c1b-0000000ea21e"


class _FakeManager:
    def __init__(self, *, cpu_only: bool) -> None:
        self.cpu_only = cpu_only
        self.device = "fake-device"
        self.recovered: list[BaseException] = []

    def recover(self, exc: BaseException) -> bool:
        self.recovered.append(exc)
        return True


def _counting_factory():
    built: list[_FakeManager] = []

    def factory(*, cpu_only: bool) -> _FakeManager:
        built.append(_FakeManager(cpu_only=cpu_only))
        return built[-1]
    return factory, built


def test_deferred_manager_is_built_on_first_use_and_only_once():
    factory, built = _counting_factory()
    memory = DeferredMemoryManager(cpu_only=True, factory=factory)
    recover = memory.recover  # what build_state hands the executor: builds nothing
    assert not memory.resolved and built == []
    assert memory.device == "fake-device" and memory.resolved
    error = RuntimeError("CUDA out of memory")
    assert recover(error) is True and built[0].recovered == [error]
    assert memory.resolve() is built[0] and len(built) == 1 and built[0].cpu_only is True


def test_deferred_manager_builds_once_under_concurrent_first_use():
    factory, built = _counting_factory()
    memory = DeferredMemoryManager(factory=factory)
    barrier = threading.Barrier(8)
    seen = []

    def use() -> None:
        barrier.wait()
        seen.append(memory.resolve())
    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1 and all(m is built[0] for m in seen)


def test_deferred_manager_never_forwards_private_names():
    factory, built = _counting_factory()
    memory = DeferredMemoryManager(factory=factory)
    try:
        memory._anything  # noqa: B018
    except AttributeError:
        pass
    else:
        raise AssertionError("a private name was forwarded")
    assert built == [] and "not built yet" in repr(memory)


def test_default_factory_is_comfy_core_memory_manager():
    from comfy_core.memory import MemoryManager

    memory = DeferredMemoryManager(cpu_only=True)
    assert isinstance(memory.resolve(), MemoryManager) and memory.device.type == "cpu"


def test_lazy_imports_are_the_nodes_function_level_imports_and_all_import():
    names = lazy_imports("nodes")
    assert {"torch", "comfy_core.sampling.ksampler", "comfy_core.loading", "comfy_core.prompt.conditioning",
            "safetensors.torch"} <= set(names)
    assert "graph.native" not in names and "nodes._names" not in names  # module-level imports
    for name in names:  # the warm-up list holds no stale module names
        importlib.import_module(name)
    # The image nodes' file and pixel work is in comfy_core.image: its lazy imports are warmed too.
    assert {"PIL", "numpy"} <= set(lazy_imports("comfy_core.image"))


def test_warm_up_imports_and_builds_the_deferred_manager_and_survives_a_missing_module():
    factory, built = _counting_factory()
    env = SimpleNamespace(memory=DeferredMemoryManager(factory=factory))
    seconds = warm_up(env, modules=["json", "no_such_module_for_the_warm_up_test"])
    assert seconds >= 0 and env.memory.resolved and len(built) == 1
    warm_up(SimpleNamespace(memory=None), modules=[])  # no manager: nothing to build


async def test_queue_worker_starts_only_after_the_background_warm_up(tmp_path, monkeypatch):
    from tests.web.web_harness import chain
    from tests.web.web_test_nodes import make_test_registry

    gate, calls = threading.Event(), []

    def gated_warm_up(env, **options):
        calls.append(env)
        gate.wait(30)
        return 0.0
    monkeypatch.setattr(warmup, "warm_up", gated_warm_up)
    state = build_state(ServerConfig(base_dir=tmp_path, port=0, custom_node_dirs=()), registry=make_test_registry())
    runner, urls = await start_server(state, frontend=False, warm_up=True)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{urls[0]}/object_info") as resp:  # served during the warm-up
                assert resp.status == 200
            async with session.post(f"{urls[0]}/prompt", json={"prompt": chain(1), "prompt_id": EARLY}) as resp:
                assert resp.status == 200
            # No worker has been started to take it (not "none took it yet"): it waits for the warm-up.
            assert state.worker is not None and not state.worker.started
            async with session.get(f"{urls[0]}/queue") as resp:
                queue = await resp.json()
            assert [item[1] for item in queue["queue_pending"]] == [EARLY] and queue["queue_running"] == []
            assert calls == [state.env]
            gate.set()
            while True:  # bounded by the test timeout
                async with session.get(f"{urls[0]}/history/{EARLY}") as resp:
                    if await resp.json():
                        break
                await asyncio.sleep(0.02)
    finally:
        gate.set()
        await runner.cleanup()


def test_warm_up_opens_the_queue_after_torch_and_imports_the_rest_only_while_idle(monkeypatch):
    events: list[str] = []
    busy_answers = iter([True, True, False, False, True, False, False, False])

    def busy() -> bool:
        answer = next(busy_answers, False)
        events.append(f"busy={answer}")
        return answer
    monkeypatch.setattr(warmup, "_import_quietly", lambda name: events.append(name))
    monkeypatch.setattr(warmup, "_build_shared_tokenizer", lambda: events.append("tokenizer"))
    monkeypatch.setattr(warmup, "_import_families", lambda: events.append("families"))
    warm_up(SimpleNamespace(memory=None), modules=["a", "b"], runtime_ready=lambda: events.append("ready"),
            busy=busy, idle_poll_s=0)
    # torch first, then the queue may start and the CLIP tokenizer is built (a first prompt needs it);
    # every later piece (the modules, the model families, the final collection) waits for a False from busy()
    assert events == ["torch", "ready", "tokenizer", "busy=True", "busy=True", "busy=False", "a", "busy=False",
                      "b", "busy=True", "busy=False", "families", "busy=False"]


async def test_a_prompt_runs_while_the_warm_up_still_imports_the_rest(tmp_path, monkeypatch):
    from tests.web.web_harness import chain
    from tests.web.web_test_nodes import make_test_registry

    gate, imported = threading.Event(), []

    def gated_import(name: str) -> None:
        if name != "torch":  # torch is imported; the rest of the runtime stalls until the gate opens
            gate.wait(30)
        imported.append(name)
    monkeypatch.setattr(warmup, "_import_quietly", gated_import)
    state = build_state(ServerConfig(base_dir=tmp_path, port=0, custom_node_dirs=()), registry=make_test_registry())
    runner, urls = await start_server(state, frontend=False, warm_up=True)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{urls[0]}/prompt", json={"prompt": chain(1), "prompt_id": EARLY}) as resp:
                assert resp.status == 200
            while True:  # bounded by the test timeout
                async with session.get(f"{urls[0]}/history/{EARLY}") as resp:
                    if await resp.json():
                        break
                await asyncio.sleep(0.02)
            assert imported == ["torch"] and not gate.is_set()  # finished with the rest still waiting
    finally:
        gate.set()
        await runner.cleanup()


def test_warm_up_signals_its_imports_done_even_when_opening_the_queue_fails():
    """`imported` is what a background pack load waits for (web/pack_start.py): it is set once
    torch and the tokenizer are in, and set all the same when the warm-up fails half-way."""
    imported = threading.Event()
    warm_up(SimpleNamespace(), modules=[], imported=imported)
    assert imported.is_set()

    def broken_gate() -> None:
        raise RuntimeError("the queue gate failed")

    imported = threading.Event()
    with pytest.raises(RuntimeError, match="queue gate"):
        warm_up(SimpleNamespace(), modules=[], runtime_ready=broken_gate, imported=imported)
    assert imported.is_set()

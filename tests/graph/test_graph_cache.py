"""Cache strategies and signatures."""
from __future__ import annotations

import pytest

from graph.cache import CacheConfig, CacheEntry, LRUCache, OutputCache, RAMPressureCache, estimate_bytes
from graph.executor import Executor
from graph.prompt import DynamicPrompt
from graph.signature import Signatures, Unique
from tests.graph.helpers import node, ran, run_prompt


def prompt_for(value: int) -> dict:
    return {"1": node("IntConst", value=value), "2": node("Add", a=["1", 0], b=1), "3": node("FloatSink", value=["2", 0])}


async def test_classic_keeps_only_the_last_prompt(registry, calls):
    executor = Executor(registry, cache=CacheConfig("classic"))
    await run_prompt(executor, prompt_for(1))
    await run_prompt(executor, prompt_for(2))
    calls.clear()
    out = await run_prompt(executor, prompt_for(1))  # A -> B -> A recomputes A
    assert out.executed == ["1", "2", "3"]


async def test_lru_keeps_older_prompts(registry, calls):
    executor = Executor(registry, cache=CacheConfig("lru", size=10))
    await run_prompt(executor, prompt_for(1))
    await run_prompt(executor, prompt_for(2))
    out = await run_prompt(executor, prompt_for(1))
    assert out.executed == []


async def test_lru_evicts_whole_old_generations():
    cache = LRUCache(2)
    cache.begin_prompt(set())
    cache.set("a", CacheEntry([[1]]))
    cache.set("b", CacheEntry([[2]]))
    cache.begin_prompt(set())
    cache.set("c", CacheEntry([[3]]))  # over size: generation 1 (a, b) goes
    assert cache.keys() == {"c"}
    cache.begin_prompt({"c"})
    cache.set("d", CacheEntry([[4]]))
    assert cache.keys() == {"c", "d"}


def test_lru_zero_means_classic():
    from graph.cache import make_cache

    assert type(make_cache(CacheConfig("lru", size=0))) is OutputCache
    assert type(make_cache(CacheConfig("lru", size=3))) is LRUCache


async def test_none_keeps_nothing_and_frees_consumed_outputs(registry, calls, recorder):
    executor = Executor(registry, cache=CacheConfig("none"))
    await run_prompt(executor, prompt_for(1))
    assert executor.cache_keys() == set()  # every output was released once its consumers ran
    out = await run_prompt(executor, prompt_for(1), sink=recorder)
    assert out.executed == ["1", "2", "3"] and recorder.of("execution_cached")[0]["nodes"] == []


async def test_none_keeps_values_needed_later_in_the_prompt(registry, calls):
    executor = Executor(registry, cache=CacheConfig("none"))
    prompt = {"1": node("IntConst", value=1), "2": node("Add", a=["1", 0], b=1), "3": node("Add", a=["1", 0], b=["2", 0]),
              "4": node("FloatSink", value=["3", 0])}
    out = await run_prompt(executor, prompt)
    assert out.ui_outputs["4"] == {"value": [3]}


async def test_ram_pressure_evicts_when_memory_is_low(registry):
    free = {"bytes": 10 << 30}
    executor = Executor(registry, cache=CacheConfig("ram", ram_headroom_gb=1.0, ram_probe=lambda: free["bytes"]))
    await run_prompt(executor, prompt_for(1))
    assert len(executor.cache_keys()) == 3
    free["bytes"] = 0  # never recovers: everything is evicted
    await run_prompt(executor, prompt_for(2))
    assert executor.cache_keys() == set()


def test_ram_eviction_prefers_old_and_large():
    free = {"bytes": 0}
    cache = RAMPressureCache(1.0, probe=lambda: free["bytes"])

    class Tensorish:
        device = type("D", (), {"type": "cpu"})()

        def element_size(self):
            return 4

        def nelement(self):
            return 1000

    cache.begin_prompt(set())
    cache.set("old_small", CacheEntry([[1]]))
    cache.set("old_big", CacheEntry([[Tensorish()]]))
    cache.begin_prompt(set())
    cache.set("new_big", CacheEntry([[Tensorish()]]))
    evicted = []
    original = cache._drop

    def drop(keys):
        keys = list(keys)
        evicted.extend(keys)
        if len(evicted) >= 1:
            free["bytes"] = 2 << 30  # recovered after the first eviction
        original(keys)

    cache._drop = drop
    cache.poll()
    assert evicted == ["old_big"]
    assert estimate_bytes([[Tensorish()], {"x": b"ab"}, "abc", 5]) == 4000 + 2 + 3


async def test_reset_drops_everything(registry, calls):
    executor = Executor(registry)
    await run_prompt(executor, prompt_for(1))
    executor.reset()
    out = await run_prompt(executor, prompt_for(1))
    assert out.executed == ["1", "2", "3"]


def test_cache_config_rejects_bad_values():
    with pytest.raises(ValueError, match="kind"):
        CacheConfig("bogus")
    with pytest.raises(ValueError, match="size"):
        CacheConfig("lru", size=-1)


async def test_signatures_ignore_ids_and_include_position(registry):
    def sigs(prompt):
        dyn = DynamicPrompt(prompt)
        s = Signatures(dyn, registry.get, lambda c: {i.name: i for i in registry.get(c).current_inputs()})
        return s, dyn

    a, _ = sigs({"1": node("IntConst", value=1), "2": node("Add", a=["1", 0], b=2)})
    b, _ = sigs({"x": node("IntConst", value=1), "y": node("Add", a=["x", 0], b=2)})
    c, _ = sigs({"1": node("IntConst", value=1), "2": node("Add", a=2, b=["1", 0])})
    await a.prepare(["1", "2"]); await b.prepare(["x", "y"]); await c.prepare(["1", "2"])
    assert a.get("2") == b.get("y") and a.get("2") != c.get("2")
    tensor_constant, _ = sigs({"1": node("IntConst", value=object())})
    await tensor_constant.prepare(["1"])
    assert isinstance(tensor_constant.get("1"), Unique)
    cyclic, _ = sigs({"1": node("Add", a=["2", 0], b=1), "2": node("Add", a=["1", 0], b=1)})
    await cyclic.prepare(["1", "2"])
    assert isinstance(cyclic.get("1"), Unique)


async def test_signature_of_a_long_chain_is_linear_and_recursion_free(registry):
    prompt = {"0": node("IntConst", value=0)}
    for i in range(1, 5000):
        prompt[str(i)] = node("Add", a=[str(i - 1), 0], b=1)
    dyn = DynamicPrompt(prompt)
    s = Signatures(dyn, registry.get, lambda c: {i.name: i for i in registry.get(c).current_inputs()})
    await s.prepare(prompt)
    assert isinstance(s.get("4999"), bytes)


async def test_none_also_frees_expanded_outputs(registry):
    executor = Executor(registry, cache=CacheConfig("none"))
    prompt = {"1": node("IntConst", value=5), "4": node("Repeat", value=["1", 0], count=3, step=10),
              "5": node("FloatSink", value=["4", 0])}
    out = await run_prompt(executor, prompt)
    assert out.ui_outputs["5"] == {"value": [35]} and executor.cache_keys() == set()

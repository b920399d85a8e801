"""`comfy_execution.caching` (survey 5, A2): today's ComfyUI's executor cache classes, working
standalone on a `DynamicPrompt`, a node id list and an is-changed cache, as packs build and patch
them: input-signature keys (equal for identical subgraphs, different when an input, IS_CHANGED,
or a node id that counts differs), `BasicCache` / `HierarchicalCache` / `LRUCache` /
`RAMPressureCache` / `DependencyAwareCache` / `NullCache`, and ComfyUI-LG_HotReload's replacement
of `HierarchicalCache.set_prompt` that drops the entries of reloaded classes."""
from __future__ import annotations

import pytest
import torch


class Source:
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    CATEGORY = "test"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 0})}}

    def run(self, value):
        return (value,)


class Mid:
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    CATEGORY = "test"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"x": ("INT",), "scale": ("FLOAT", {"default": 1.0})},
                "optional": {"y": ("INT",)}}

    def run(self, x, scale, y=0):
        return (x,)


class WithId:
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    CATEGORY = "test"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"x": ("INT",)}, "hidden": {"unique_id": "UNIQUE_ID"}}

    def run(self, x, unique_id=None):
        return (x,)


class Random:
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    CATEGORY = "test"
    NOT_IDEMPOTENT = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"x": ("INT",)}}

    def run(self, x):
        return (x,)


class Changed:
    """ComfyUI's is-changed cache shape: an object with an async `get(node_id)`."""

    def __init__(self, values=None):
        self.values = dict(values or {})
        self.asked: list[str] = []

    async def get(self, node_id):
        self.asked.append(node_id)
        return self.values.get(node_id, False)


@pytest.fixture
def registered(session):
    for name, cls in (("Source", Source), ("Mid", Mid), ("WithId", WithId), ("Random", Random)):
        session.registry.add_v1(name, cls)
    return session


def dyn(prompt):
    from comfy_execution.graph import DynamicPrompt

    return DynamicPrompt(prompt)


# Two identical chains under different ids (1 -> 2, 3 -> 4), and one that differs in a constant (5).
PROMPT = {
    "1": {"class_type": "Source", "inputs": {"value": 3}},
    "2": {"class_type": "Mid", "inputs": {"x": ["1", 0], "scale": 2.0}},
    "3": {"class_type": "Source", "inputs": {"value": 3}},
    "4": {"class_type": "Mid", "inputs": {"x": ["3", 0], "scale": 2.0}},
    "5": {"class_type": "Mid", "inputs": {"x": ["1", 0], "scale": 3.0}},
}


async def keys_of(prompt, changed=None, key_class=None):
    from comfy_execution import caching

    key_class = key_class or caching.CacheKeySetInputSignature
    keys = key_class(dyn(prompt), list(prompt), changed or Changed())
    await keys.add_keys(list(prompt))
    return keys


# -- the module ----------------------------------------------------------------------------------------

def test_the_module_is_served_and_execution_reexports_its_classes(session):
    import execution
    from comfy_execution import caching, graph, graph_utils

    assert execution.HierarchicalCache is caching.HierarchicalCache
    assert execution.BasicCache is caching.BasicCache and execution.LRUCache is caching.LRUCache
    assert execution.CacheKeySetInputSignature is caching.CacheKeySetInputSignature
    assert execution.DependencyAwareCache is caching.DependencyAwareCache
    assert caching.DynamicPrompt is graph.DynamicPrompt and caching.is_link is graph_utils.is_link
    assert issubclass(caching.HierarchicalCache, caching.BasicCache)
    assert issubclass(caching.RAMPressureCache, caching.LRUCache)
    assert issubclass(caching.CacheKeySetID, caching.CacheKeySet)
    from comfy_execution.caching import (BasicCache, CacheKeySetID, CacheKeySetInputSignature,  # noqa: F401
                                         DependencyAwareCache, HierarchicalCache, LRUCache, NullCache,
                                         RAMPressureCache, Unhashable, include_unique_id_in_input, to_hashable)


# -- keys ----------------------------------------------------------------------------------------------

def test_to_hashable_is_frozensets_of_pairs_and_unhashables_never_match(session):
    from comfy_execution.caching import Unhashable, to_hashable

    assert to_hashable(3) == 3 and to_hashable("a") == "a" and to_hashable(None) is None
    assert to_hashable(["a", 1]) == frozenset({(0, "a"), (1, 1)})
    assert to_hashable({"k": [2]}) == frozenset({("k", frozenset({(0, 2)}))})
    assert to_hashable(("a", 1)) == to_hashable(["a", 1])  # sequences alike
    hash(to_hashable([{"a": (1, [2, 3])}, "x"]))
    tensor = to_hashable(torch.zeros(2))
    assert isinstance(tensor, Unhashable) and tensor.value != tensor.value  # NaN
    assert to_hashable([torch.zeros(2)]) != to_hashable([torch.zeros(2)])


async def test_identical_subgraphs_key_alike_and_a_constant_changes_the_key(registered):
    from comfy_execution.caching import to_hashable

    keys = await keys_of(PROMPT)
    assert keys.get_data_key("2") == keys.get_data_key("4")
    assert keys.get_data_key("1") == keys.get_data_key("3")
    assert keys.get_data_key("5") != keys.get_data_key("2")
    # the key written out independently: the node, then its ancestors, each
    # [class, is_changed, (input, value | ("ANCESTOR", index, socket)) by sorted name]
    expected = frozenset({
        (0, frozenset({(0, "Mid"), (1, False), (2, frozenset({(0, "scale"), (1, 2.0)})),
                       (3, frozenset({(0, "x"), (1, frozenset({(0, "ANCESTOR"), (1, 0), (2, 0)}))}))})),
        (1, frozenset({(0, "Source"), (1, False), (2, frozenset({(0, "value"), (1, 3)}))})),
    })
    assert keys.get_data_key("2") == expected
    assert keys.get_data_key("1") == to_hashable([["Source", False, ("value", 3)]])
    assert keys.get_subcache_key("2") == ("2", "Mid") and keys.all_node_ids() == set(PROMPT)
    assert set(keys.get_used_subcache_keys()) == {(n, PROMPT[n]["class_type"]) for n in PROMPT}


async def test_is_changed_values_enter_the_key_of_the_node_and_its_descendants(registered):
    same = await keys_of(PROMPT, Changed({"1": "a", "3": "a"}))
    assert same.get_data_key("2") == same.get_data_key("4")
    differ = await keys_of(PROMPT, Changed({"1": "a", "3": "b"}))
    assert differ.get_data_key("1") != differ.get_data_key("3")
    assert differ.get_data_key("2") != differ.get_data_key("4")  # through the ancestor
    assert set(differ.is_changed_cache.asked) == set(PROMPT)


async def test_ancestors_are_ordered_depth_first_by_input_name(registered):
    prompt = {
        "a": {"class_type": "Source", "inputs": {"value": 1}},
        "b": {"class_type": "Mid", "inputs": {"x": ["a", 0], "scale": 1.0}},
        "c": {"class_type": "Source", "inputs": {"value": 2}},
        "d": {"class_type": "Mid", "inputs": {"y": ["b", 0], "x": ["c", 0], "scale": 1.0}},
        "e": {"class_type": "Mid", "inputs": {"x": ["d", 0], "y": ["a", 0], "scale": 1.0}},
    }
    keys = await keys_of(prompt)
    # e: x -> d (d: x -> c, y -> b (b: x -> a)), then y -> a (already listed)
    assert keys.get_ordered_ancestry(keys.dynprompt, "e") == (["d", "c", "b", "a"], {"d": 0, "c": 1, "b": 2, "a": 3})
    signature = await keys.get_immediate_node_signature(keys.dynprompt, "e", {"d": 0, "c": 1, "b": 2, "a": 3})
    assert signature == ["Mid", False, ("scale", 1.0), ("x", ("ANCESTOR", 0, 0)), ("y", ("ANCESTOR", 3, 0))]
    assert (await keys.get_immediate_node_signature(keys.dynprompt, "zz", {}))[0] != \
        (await keys.get_immediate_node_signature(keys.dynprompt, "zz", {}))[0]  # a missing node: NaN
    # a long chain does not hit the recursion limit
    chain = {"0": {"class_type": "Source", "inputs": {"value": 0}}}
    chain.update({str(i): {"class_type": "Mid", "inputs": {"x": [str(i - 1), 0], "scale": 1.0}} for i in range(1, 1500)})
    ancestors, _ = keys.get_ordered_ancestry(dyn(chain), "1499")
    assert ancestors == [str(i) for i in range(1498, -1, -1)]


async def test_unique_id_and_not_idempotent_classes_key_by_node_id(registered):
    from comfy_execution.caching import NODE_CLASS_CONTAINS_UNIQUE_ID, include_unique_id_in_input

    assert include_unique_id_in_input("WithId") is True and include_unique_id_in_input("Mid") is False
    prompt = {
        "1": {"class_type": "Source", "inputs": {"value": 3}},
        "2": {"class_type": "WithId", "inputs": {"x": ["1", 0]}},
        "3": {"class_type": "WithId", "inputs": {"x": ["1", 0]}},
        "4": {"class_type": "Random", "inputs": {"x": ["1", 0]}},
        "5": {"class_type": "Random", "inputs": {"x": ["1", 0]}},
    }
    keys = await keys_of(prompt)
    assert keys.get_data_key("2") != keys.get_data_key("3")
    assert keys.get_data_key("4") != keys.get_data_key("5")
    signature = await keys.get_immediate_node_signature(keys.dynprompt, "2", {"1": 0})
    assert signature == ["WithId", False, "2", ("x", ("ANCESTOR", 0, 0))]
    # ComfyUI's memo, when a pack writes it, is honoured
    NODE_CLASS_CONTAINS_UNIQUE_ID["WithId"] = False
    try:
        keys = await keys_of(prompt)
        assert keys.get_data_key("2") == keys.get_data_key("3")
    finally:
        NODE_CLASS_CONTAINS_UNIQUE_ID.pop("WithId")
    with pytest.raises(KeyError):
        include_unique_id_in_input("NoSuchNode")


async def test_a_packs_replacement_of_include_unique_id_in_input_is_used(registered, monkeypatch):
    from comfy_execution import caching

    monkeypatch.setattr(caching, "include_unique_id_in_input", lambda class_type: class_type == "Mid")
    keys = await keys_of(PROMPT)
    assert keys.get_data_key("2") != keys.get_data_key("4")  # now keyed by id
    assert keys.get_data_key("1") == keys.get_data_key("3")


async def test_a_class_a_pack_puts_into_node_class_mappings_is_keyed(registered):
    """The pattern of a pack's own test: a class registered only in `nodes.NODE_CLASS_MAPPINGS`."""
    import nodes
    from comfy_execution.caching import BasicCache, CacheKeySetInputSignature, include_unique_id_in_input

    class Probe:
        RETURN_TYPES = ("IMAGE",)

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"prompt": ("STRING", {}), "seed": ("INT", {})},
                    "hidden": {"node": "UNIQUE_ID"}}

    def prompt(seed):
        return dyn({"1": {"class_type": "CacheProbeOnly", "inputs": {"prompt": "same", "seed": seed}}})

    nodes.NODE_CLASS_MAPPINGS["CacheProbeOnly"] = Probe
    try:
        assert include_unique_id_in_input("CacheProbeOnly") is True

        async def result_after(first, second):
            cache = BasicCache(CacheKeySetInputSignature)
            changed = Changed()
            await cache.set_prompt(prompt(first), ["1"], changed)
            cache.set_local("1", "done")
            await cache.set_prompt(prompt(second), ["1"], changed)
            return cache.get_local("1")

        assert await result_after(1234, 1234) == "done"
        assert await result_after(1234, 5678) is None
    finally:
        nodes.NODE_CLASS_MAPPINGS.pop("CacheProbeOnly", None)


async def test_id_keys_are_node_id_and_class(registered):
    from comfy_execution.caching import CacheKeySetID

    keys = await keys_of(PROMPT, key_class=CacheKeySetID)
    assert keys.get_data_key("2") == ("2", "Mid") == keys.get_subcache_key("2")
    await keys.add_keys(["missing"])  # a node not in the prompt is skipped
    assert keys.get_data_key("missing") is None and keys.all_node_ids() == set(PROMPT)


# -- caches --------------------------------------------------------------------------------------------

async def test_basic_cache_set_get_and_clean_unused(registered):
    from comfy_execution.caching import BasicCache, CacheKeySetInputSignature

    cache = BasicCache(CacheKeySetInputSignature)
    assert cache.get_local("2") is None and not hasattr(cache, "cache_key_set")
    await cache.set_prompt(dyn(PROMPT), list(PROMPT), Changed())
    assert cache.initialized and cache.all_node_ids() == set(PROMPT)
    cache.set_local("2", "two")
    assert cache.get_local("4") == "two"  # the same signature
    assert await cache._get_immediate("2") == "two"
    cache.set_local("5", "five")
    # the next prompt keeps only node 5's subgraph
    await cache.set_prompt(dyn({k: PROMPT[k] for k in ("1", "5")}), ["1", "5"], Changed())
    cache.clean_unused()
    assert list(cache.cache.values()) == ["five"]
    cache.remove_local("5")
    assert cache.cache == {} and cache.get_local("5") is None
    cache.poll(ram_headroom=1)
    assert cache.recursive_debug_dump() == []


async def test_hierarchical_cache_keeps_expanded_nodes_in_their_parents_subcache(registered):
    from comfy_execution.caching import CacheKeySetID, HierarchicalCache

    cache = HierarchicalCache(CacheKeySetID)
    assert await cache.get("1") is None  # no prompt yet
    prompt = dyn({"1": PROMPT["1"], "2": PROMPT["2"]})
    await cache.set_prompt(prompt, ["1", "2"], Changed())
    await cache.set("2", "parent value")
    prompt.add_ephemeral_node("2.0.1", {"class_type": "Source", "inputs": {"value": 7}}, "2", "2")
    prompt.add_ephemeral_node("2.0.1.9", {"class_type": "Source", "inputs": {"value": 8}}, "2.0.1", "2")
    assert await cache.get("2.0.1") is None
    with pytest.raises(AssertionError):
        await cache.set("2.0.1", "child")  # no subcache yet
    sub = await cache.ensure_subcache_for("2", ["2.0.1"])
    await cache.set("2.0.1", "child")
    assert await cache.get("2.0.1") == "child" and cache.get_local("2.0.1") == "child"
    assert sub.get_local("2.0.1") == "child" and "child" not in cache.cache.values()
    assert cache.subcaches == {("2", "Mid"): sub}
    deeper = await cache.ensure_subcache_for("2.0.1", ["2.0.1.9"])
    cache.set_local("2.0.1.9", "grandchild")
    assert deeper.get_local("2.0.1.9") == "grandchild" and cache.all_node_ids() == {"1", "2", "2.0.1", "2.0.1.9"}
    cache.remove_local("2.0.1")
    assert await cache.get("2.0.1") is None and await cache.get("2") == "parent value"
    dump = cache.recursive_debug_dump()
    assert dump[0] == {"key": ("2", "Mid"), "value": "parent value"} and dump[1]["subcache_key"] == ("2", "Mid")
    # a next prompt without node 2 drops its subcache
    await cache.set_prompt(dyn({"1": PROMPT["1"]}), ["1"], Changed())
    cache.clean_unused()
    assert cache.subcaches == {} and cache.cache == {}


async def test_null_cache_keeps_nothing(session):
    from comfy_execution.caching import NullCache

    cache = NullCache()
    await cache.set_prompt(dyn(PROMPT), list(PROMPT), Changed())
    await cache.set("1", "x")
    cache.set_local("1", "x")
    assert await cache.get("1") is None and cache.get_local("1") is None and cache.all_node_ids() == []
    assert await cache.ensure_subcache_for("1", ["2"]) is cache
    cache.clean_unused(), cache.poll(), cache.remove_local("1")


async def test_lru_cache_evicts_the_oldest_generations_beyond_max_size(registered):
    from comfy_execution.caching import CacheKeySetInputSignature, LRUCache

    def one(value):
        return {"1": {"class_type": "Source", "inputs": {"value": value}}}

    cache = LRUCache(CacheKeySetInputSignature, max_size=2)
    for value in (1, 2, 3):
        await cache.set_prompt(dyn(one(value)), ["1"], Changed())
        await cache.set("1", f"v{value}")
        cache.clean_unused()
    assert cache.generation == 3 and sorted(cache.cache.values()) == ["v2", "v3"]  # v1's generation went
    # reading v2 again makes it the newest: the next eviction takes v3
    await cache.set_prompt(dyn(one(2)), ["1"], Changed())
    assert await cache.get("1") == "v2"
    await cache.set_prompt(dyn(one(4)), ["1"], Changed())
    cache.set_local("1", "v4")
    cache.clean_unused()
    assert sorted(cache.cache.values()) == ["v2", "v4"] and cache.min_generation == 4
    assert set(cache.used_generation) == set(cache.cache)
    cache.remove_local("1")
    assert sorted(cache.cache.values()) == ["v2"]
    # expansions: children keyed in the cache itself, the parent remembers them
    prompt = dyn(dict(PROMPT))
    await cache.set_prompt(prompt, list(PROMPT), Changed())
    prompt.add_ephemeral_node("2.1", {"class_type": "Source", "inputs": {"value": 9}}, "2", "2")
    assert await cache.ensure_subcache_for("2", ["2.1"]) is cache
    await cache.set("2.1", "child")
    assert cache.get_local("2.1") == "child"
    assert cache.children[cache.cache_key_set.get_data_key("2")] == [cache.cache_key_set.get_data_key("2.1")]


async def test_ram_pressure_cache_releases_the_biggest_and_oldest_first(registered, monkeypatch):
    from comfy_execution import caching

    class Entry:
        def __init__(self, *outputs):
            self.outputs = list(outputs)
            self.ui = None

    available = {"bytes": 0}
    monkeypatch.setattr(caching, "virtual_memory_available", lambda: available["bytes"])

    def prompt(*values):
        return dyn({str(v): {"class_type": "Source", "inputs": {"value": v}} for v in values})

    cache = caching.RAMPressureCache(caching.CacheKeySetInputSignature)
    assert cache.max_size == 0
    await cache.set_prompt(prompt(1, 2, 3), ["1", "2", "3"], Changed())
    shared = torch.zeros(1000, dtype=torch.uint8)
    await cache.set("1", Entry([torch.zeros(100, dtype=torch.uint8)]))
    await cache.set("2", Entry([shared, shared[:10]]))  # one storage, counted once
    await cache.set("3", Entry(torch.zeros(10, dtype=torch.uint8)))
    cache.clean_unused()
    assert len(cache.cache) == 3  # no size limit
    await cache.set_prompt(prompt(3, 4), ["3", "4"], Changed())  # generation 2: 1, 2 are old; 3 is current
    await cache.set("4", Entry(torch.zeros(5000, dtype=torch.uint8)))
    key = cache.cache_key_set.get_data_key

    # enough RAM: nothing goes
    available["bytes"] = 10_000
    assert cache.ram_release(5_000) == 0 and len(cache.cache) == 4
    # every eviction frees what the entry holds; the current prompt's entries stay
    evicted = []

    def forget(k):
        evicted.append(k)
        freed = sum(t.untyped_storage().nbytes() for t in _tensors(cache.cache[k].outputs))
        available["bytes"] += freed
        caching.LRUCache._forget(cache, k)

    monkeypatch.setattr(cache, "_forget", forget)
    available["bytes"] = 0
    freed = cache.ram_release(10**9)
    assert len(evicted) == 2 and key("3") in cache.cache and key("4") in cache.cache
    assert freed == pytest.approx(1000 + 100 + 2 * caching.RAM_CACHE_DEFAULT_RAM_USAGE)
    assert not cache.active_evictions
    # free_active: the current prompt's too, the biggest first, until the target is reached
    available["bytes"] = 0
    freed = cache.ram_release(4000, free_active=True)
    assert evicted[2:] == [key("4")] and key("3") in cache.cache
    assert freed == pytest.approx(5000 + caching.RAM_CACHE_DEFAULT_RAM_USAGE)
    assert cache.active_evictions and cache.full_evictions
    # min_entry_size leaves small entries
    available["bytes"] = 0
    assert cache.ram_release(10**9, free_active=True, min_entry_size=100) == 0 and key("3") in cache.cache
    await cache.set_prompt(prompt(3), ["3"], Changed())
    assert not cache.active_evictions and not cache.full_evictions
    cache.remove_local("3")
    assert cache.cache == {} and cache.timestamps == {}


def _tensors(outputs):
    for item in outputs:
        if isinstance(item, (list, tuple)):
            yield from _tensors(item)
        elif isinstance(item, torch.Tensor):
            yield item


def test_ram_pressure_scores_age_and_size_and_old_model_patchers_first(session, monkeypatch):
    from comfy_execution import caching
    from comfy_core.patching.model import ModelPatcher

    monkeypatch.setattr(caching, "virtual_memory_available", lambda: 0)
    cache = caching.RAMPressureCache(caching.CacheKeySetID)
    cache.generation = 3
    patcher = ModelPatcher.__new__(ModelPatcher)

    class Clip:
        def __init__(self):
            self.patcher = patcher

    class Entry:
        def __init__(self, outputs):
            self.outputs = outputs

    big_new = Entry([torch.zeros(1500, dtype=torch.uint8)])   # 1500 * 1.3**1 = 1950
    small_old = Entry([torch.zeros(1000, dtype=torch.uint8)])  # 1000 * 1.3**3 = 2197
    clip_old = Entry([Clip()])                                  # an old model patcher: first
    tie_a, tie_b = Entry([]), Entry([])                         # equal scores: least recently touched first
    cache.cache = {"big_new": big_new, "small_old": small_old, "clip": clip_old, "tie_a": tie_a, "tie_b": tie_b}
    cache.used_generation = {"big_new": 2, "small_old": 0, "clip": 2, "tie_a": 1, "tie_b": 1}
    cache.timestamps = {"big_new": 1.0, "small_old": 2.0, "clip": 3.0, "tie_a": 5.0, "tie_b": 4.0}
    order = []
    monkeypatch.setattr(cache, "_forget", lambda k: (order.append(k), caching.LRUCache._forget(cache, k)))
    cache.ram_release(1)
    assert order == ["clip", "small_old", "big_new", "tie_b", "tie_a"]
    assert caching.is_model_patcher_output(patcher) and not caching.is_model_patcher_output(torch.zeros(1))
    dynamic = type("D", (), {"is_dynamic": lambda self: True})()
    assert caching.all_outputs_dynamic([dynamic, [dynamic]]) and not caching.all_outputs_dynamic([dynamic, 1])
    assert not caching.all_outputs_dynamic(None)


async def test_dependency_aware_cache_drops_a_value_once_its_readers_ran(registered):
    from comfy_execution.caching import CacheKeySetInputSignature, DependencyAwareCache

    cache = DependencyAwareCache(CacheKeySetInputSignature)
    await cache.set_prompt(dyn(PROMPT), list(PROMPT), Changed())
    assert cache.descendants["1"] == {"2", "5"} and cache.ancestors["2"] == {"1"}
    await cache.set("1", "one")
    await cache.set("2", "two")
    assert await cache.get("1") == "one"  # node 5 still reads it
    await cache.set("5", "five")
    assert await cache.get("1") is None and await cache.get("2") == "two"
    assert cache.executed_nodes == {"1", "2", "5"}
    cache.clean_unused()
    assert cache.recursive_debug_dump()[-1]["executed_nodes"]
    await cache.set_prompt(dyn(PROMPT), list(PROMPT), Changed())
    assert cache.cache == {} and cache.executed_nodes == set()


# -- ComfyUI-LG_HotReload's patch ----------------------------------------------------------------------

def _mentions(key, names) -> bool:
    """The pack's walk of a key: frozensets and tuples searched for a reloaded class name."""
    for item in key:
        if isinstance(item, (frozenset, tuple)) and _mentions(item, names):
            return True
        if item in names:
            return True
    return False


async def test_lg_hotreload_set_prompt_wrapper_drops_reloaded_classes(registered, monkeypatch):
    from comfy_execution import caching

    reloaded: dict[str, int] = {}
    original = caching.BasicCache.set_prompt
    calls = []

    def set_prompt(self, dynprompt, node_ids, is_changed_cache):  # the pack's wrapper, as it is written
        calls.append(list(node_ids))
        if not hasattr(self, "cache_key_set"):
            reloaded.clear()
            return original(self, dynprompt, node_ids, is_changed_cache)
        found = [node_id for node_id, key in self.cache_key_set.keys.items() if _mentions(key, reloaded)]
        for node_id in found:
            data_key = self.cache_key_set.get_data_key(node_id)
            if data_key and data_key in self.cache:
                del self.cache[data_key]
                del self.cache_key_set.keys[node_id]
                del self.cache_key_set.subcache_keys[node_id]
        return original(self, dynprompt, node_ids, is_changed_cache)

    monkeypatch.setattr(caching.HierarchicalCache, "set_prompt", set_prompt)
    outputs = caching.HierarchicalCache(caching.CacheKeySetInputSignature)
    objects = caching.HierarchicalCache(caching.CacheKeySetID)
    untouched = caching.LRUCache(caching.CacheKeySetInputSignature)  # not a HierarchicalCache
    prompt = {k: PROMPT[k] for k in ("1", "2")}
    for cache in (outputs, objects, untouched):
        await cache.set_prompt(dyn(prompt), ["1", "2"], Changed())
        await cache.set("1", "source")
        await cache.set("2", "mid")
    assert len(calls) == 2
    reloaded["Mid"] = 1  # the pack reloaded the file of `Mid`
    for cache in (outputs, objects, untouched):
        await cache.set_prompt(dyn(prompt), ["1", "2"], Changed())
    assert len(calls) == 4
    assert await outputs.get("2") is None and await outputs.get("1") == "source"
    assert await objects.get("2") is None and await objects.get("1") == "source"
    assert await untouched.get("2") == "mid"


class Stamped:
    """A V1 node whose IS_CHANGED answers from its constant input (a file-stamp node's shape)."""

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    CATEGORY = "test"
    calls: list = []

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"name": ("STRING", {"default": ""}), "x": ("INT",)}}

    @classmethod
    def IS_CHANGED(cls, name, x=None):
        cls.calls.append((name, x))
        if name == "boom":
            raise OSError("no such file")
        return f"stamp-{name}"

    def run(self, name, x):
        return (x,)


async def test_is_changed_cache_answers_is_changed_from_constants_once_and_feeds_the_key_sets(registered):
    import execution
    from comfy_execution import caching

    registered.registry.add_v1("Stamped", Stamped)
    Stamped.calls.clear()
    prompt = {"1": {"class_type": "Source", "inputs": {"value": 3}},
              "2": {"class_type": "Stamped", "inputs": {"name": "a.png", "x": ["1", 0]}},
              "3": {"class_type": "Stamped", "inputs": {"name": "boom", "x": ["1", 0]}}}
    dynprompt = dyn(prompt)
    cache = execution.IsChangedCache("p1", dynprompt, None)
    assert await cache.get("1") is False  # no IS_CHANGED
    assert await cache.get("2") == ["stamp-a.png"]
    assert await cache.get("2") == ["stamp-a.png"] and Stamped.calls == [("a.png", None)]  # once; links not followed
    failed = await cache.get("3")
    assert isinstance(failed, float) and failed != failed  # NaN: keyed apart, as ComfyUI
    assert dynprompt.get_node("2")["is_changed"] == ["stamp-a.png"]  # kept in the prompt, read first later

    keys = caching.CacheKeySetInputSignature(dynprompt, list(prompt), execution.IsChangedCache("p1", dynprompt, None))
    await keys.add_keys(list(prompt))
    # the same constants, another IS_CHANGED answer (the file changed): another key for node 2 only
    touched = {**prompt, "2": {**prompt["2"], "is_changed": ["stamp-a.png, modified"]}}
    other = caching.CacheKeySetInputSignature(dyn(touched), list(touched),
                                              execution.IsChangedCache("p2", dyn(touched), None))
    await other.add_keys(list(touched))
    assert keys.get_data_key("1") == other.get_data_key("1")
    assert keys.get_data_key("2") != other.get_data_key("2")

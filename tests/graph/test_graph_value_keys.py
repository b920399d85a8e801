"""Value keys: a node that a model handle reaches hits the cache when an upstream change leaves
its input values equal (graph/value_keys.py), under every cache strategy, and never where a
value key would be unsound. Plain-Python handles stand in for patchers here (no torch)."""
from __future__ import annotations

from collections import Counter

import pytest

from graph.cache import CacheConfig, CacheEntry, OutputCache
from graph.executor import Executor
from graph.native import Hidden, Input, Int, Output, String, node
from graph.registry import Registry
from graph.value_keys import element_token, holds_handles, value_token
from tests.graph.helpers import run_prompt


class Handle:
    """A model handle: its signature says which model and patches it stands for."""

    def __init__(self, signature) -> None:
        self.signature = signature

    def cache_signature(self):
        return self.signature


class Calls(Counter):
    def hook(self, node_id: str, _call_index: int, _graph_index: int) -> None:
        self[node_id] += 1


def build_registry() -> Registry:
    @node("MakeHandle", inputs=[String("name"), Int("junk")], outputs=[Output("MODEL")])
    def make_handle(name, junk):
        # `junk` changes the node's structural key, never its output.
        return (Handle(("model", name)),)

    @node("MakeOpaque", inputs=[String("name"), Int("junk")], outputs=[Output("MODEL")])
    def make_opaque(name, junk):
        return (Handle(None),)  # a handle without a lasting identity

    @node("Patch", inputs=[Input("model", "MODEL"), Int("strength")], outputs=[Output("MODEL")])
    def patch(model, strength):
        if strength == 0:
            return (model,)  # LoraLoader's shortcut: the input itself
        return (Handle(model.signature + (("patch", strength),)),)

    @node("Sample", inputs=[Input("model", "MODEL"), Input("seed", "INT")], outputs=[Output("LATENT")])
    def sample(model, seed):
        return ({"samples": (model.signature, seed)},)

    @node("Decode", inputs=[Input("samples", "LATENT")], outputs=[Output("IMAGE")])
    def decode(samples):
        return (("image", samples["samples"]),)

    @node("Show", inputs=[Input("image", "IMAGE")], output_node=True)
    def show(image):
        return {"ui": {"image": [repr(image)]}}

    @node("SaveWithPrompt", inputs=[Input("image", "IMAGE"), Hidden("prompt", "PROMPT")], output_node=True)
    def save_with_prompt(image, prompt):
        return {"ui": {"saved": [len(prompt)]}}

    @node("Negate", inputs=[Int("value")], outputs=[Output("INT")])
    def negate(value):
        return (-value,)

    @node("Abs", inputs=[Input("value", "INT")], outputs=[Output("INT")])
    def absolute(value):
        return (abs(value),)

    @node("PickLazy", inputs=[Input("model", "MODEL", lazy=True)], outputs=[Output("LATENT")],
          check_lazy_status=lambda model=None: ["model"] if model is None else [])
    def pick_lazy(model):
        return ({"samples": model.signature},)

    @node("Wrap", inputs=[Input("model", "MODEL")], outputs=[Output("MODEL")])
    def wrap(model):
        return (Handle(("wrapped", model.signature)),)

    @node("UseWrapped", inputs=[Input("model", "MODEL")], output_node=True)
    def use_wrapped(model):
        return {"ui": {"sig": [repr(model.signature)]}}

    registry = Registry()
    for fn in (make_handle, make_opaque, patch, sample, decode, show, save_with_prompt, negate, absolute,
               pick_lazy, wrap, use_wrapped):
        registry.add_native(fn)
    return registry


def workflow(junk: int = 0, *, strength: int = 0, name: str = "sd15", seed_from: int = 7,
             maker: str = "MakeHandle", sink: str = "Show") -> dict:
    return {
        "1": {"class_type": maker, "inputs": {"name": name, "junk": junk}},
        "2": {"class_type": "Patch", "inputs": {"model": ["1", 0], "strength": strength}},
        "3": {"class_type": "Negate", "inputs": {"value": seed_from}},
        "4": {"class_type": "Abs", "inputs": {"value": ["3", 0]}},
        "5": {"class_type": "Sample", "inputs": {"model": ["2", 0], "seed": ["4", 0]}},
        "6": {"class_type": "Decode", "inputs": {"samples": ["5", 0]}},
        "7": {"class_type": sink, "inputs": {"image": ["6", 0]}},
    }


@pytest.fixture
def calls() -> Calls:
    return Calls()


def executor_for(calls: Calls, kind: str = "classic", size: int = 0, value_keys: bool = True) -> Executor:
    return Executor(build_registry(), cache=CacheConfig(kind, size=size), before_node_call=[calls.hook],
                    value_keys=value_keys)


async def test_an_upstream_change_that_leaves_the_handle_equal_hits_downstream(calls, recorder):
    executor = executor_for(calls)
    first = await run_prompt(executor, workflow(junk=0))
    assert calls == Counter({str(n): 1 for n in range(1, 8)})
    calls.clear()
    second = await run_prompt(executor, workflow(junk=1), sink=recorder)
    # MakeHandle and Patch run (their keys changed); the rest take the results of equal inputs.
    assert calls == Counter({"1": 1, "2": 1})
    assert second.ui_outputs == first.ui_outputs
    # Reused nodes are announced like nodes that ran, and the output node's UI is sent again.
    assert {e["node"] for e in recorder.of("executing")} >= {"5", "6", "7"}
    assert [e["node"] for e in recorder.of("executed")] == ["7"]
    assert second.meta["7"]["node_id"] == "7"


async def test_structural_keys_alone_when_value_keys_are_off(calls):
    executor = executor_for(calls, value_keys=False)
    await run_prompt(executor, workflow(junk=0))
    calls.clear()
    await run_prompt(executor, workflow(junk=1))  # ComfyUI's behaviour: everything downstream runs
    assert calls == Counter({str(n): 1 for n in (1, 2, 5, 6, 7)})


async def test_a_changed_handle_or_value_runs_downstream_again(calls):
    executor = executor_for(calls)
    await run_prompt(executor, workflow())
    calls.clear()
    await run_prompt(executor, workflow(strength=2))  # a real patch: a new handle
    assert calls == Counter({"2": 1, "5": 1, "6": 1, "7": 1})
    calls.clear()
    await run_prompt(executor, workflow(strength=2, seed_from=8))  # the seed value changed
    assert calls == Counter({"3": 1, "4": 1, "5": 1, "6": 1, "7": 1})


async def test_equal_scalar_outputs_are_keyed_by_value_where_a_handle_reaches(calls):
    executor = executor_for(calls)
    await run_prompt(executor, workflow(seed_from=7))
    calls.clear()
    # Negate(-7) = 7 and Abs(7) = 7: Abs runs, and Sample, whose model is a handle, sees seed 7 again.
    await run_prompt(executor, workflow(seed_from=-7))
    assert calls == Counter({"3": 1, "4": 1})


async def test_a_handle_without_a_signature_is_keyed_by_its_producer(calls):
    executor = executor_for(calls)
    await run_prompt(executor, workflow(maker="MakeOpaque"))
    calls.clear()
    await run_prompt(executor, workflow(maker="MakeOpaque", junk=1))
    assert calls == Counter({str(n): 1 for n in (1, 2, 5, 6, 7)})


async def test_nodes_that_read_the_prompt_always_run_when_their_key_changed(calls):
    executor = executor_for(calls)
    await run_prompt(executor, workflow(sink="SaveWithPrompt"))
    calls.clear()
    await run_prompt(executor, workflow(junk=1, sink="SaveWithPrompt"))
    assert calls == Counter({"1": 1, "2": 1, "7": 1})


async def test_lazy_nodes_are_never_keyed_by_value(calls):
    executor = executor_for(calls)
    prompt = {"1": {"class_type": "MakeHandle", "inputs": {"name": "a", "junk": 0}},
              "2": {"class_type": "PickLazy", "inputs": {"model": ["1", 0]}},
              "3": {"class_type": "Decode", "inputs": {"samples": ["2", 0]}},
              "4": {"class_type": "Show", "inputs": {"image": ["3", 0]}}}
    await run_prompt(executor, prompt)
    calls.clear()
    prompt["1"]["inputs"]["junk"] = 1
    await run_prompt(executor, prompt)
    assert calls == Counter({"1": 1, "2": 1, "3": 1, "4": 1})


async def test_classic_does_not_carry_entries_holding_handles(calls):
    executor = executor_for(calls)
    prompt = {"1": {"class_type": "MakeHandle", "inputs": {"name": "a", "junk": 0}},
              "2": {"class_type": "Wrap", "inputs": {"model": ["1", 0]}},
              "3": {"class_type": "UseWrapped", "inputs": {"model": ["2", 0]}}}
    await run_prompt(executor, prompt)
    calls.clear()
    prompt["1"]["inputs"]["junk"] = 1
    await run_prompt(executor, prompt)
    # Wrap's entry holds a handle, so it was dropped with its structural key and Wrap runs; its new
    # handle is equal, so UseWrapped (carried: no handle in its outputs) is reused.
    assert calls == Counter({"1": 1, "2": 1})


# Classic drops Patch's entry (it holds a handle) when its structural key leaves the prompt, so
# Patch runs again; LRU and RAM keep it, and Patch itself is reused, its input handle being equal.
@pytest.mark.parametrize("kind,size,ran", [("classic", 0, {"1", "2"}), ("lru", 50, {"1"}), ("ram", 0, {"1"})])
async def test_value_hits_under_each_strategy_that_keeps_outputs(calls, kind, size, ran):
    executor = executor_for(calls, kind, size)
    await run_prompt(executor, workflow(junk=0))
    calls.clear()
    await run_prompt(executor, workflow(junk=1))
    assert calls == Counter({n: 1 for n in ran})
    calls.clear()
    await run_prompt(executor, workflow(junk=1))  # now under its own structural keys
    assert calls == Counter()


async def test_no_cache_strategy_keeps_nothing_to_reach(calls):
    executor = executor_for(calls, "none")
    await run_prompt(executor, workflow(junk=0))
    calls.clear()
    await run_prompt(executor, workflow(junk=1))
    assert calls == Counter({str(n): 1 for n in range(1, 8)})


async def test_classic_carries_value_reachable_entries_for_one_prompt_only(calls):
    executor = executor_for(calls)
    await run_prompt(executor, workflow(junk=0))
    held = len(executor.cache_keys())
    await run_prompt(executor, workflow(junk=1, strength=3))  # nothing downstream is reached again
    # The entries carried from the first prompt that this one did not reach are gone at its end.
    assert len(executor.cache_keys()) == held
    calls.clear()
    await run_prompt(executor, workflow(junk=2))  # back to the first handle: computed again
    assert calls == Counter({"1": 1, "2": 1, "5": 1, "6": 1, "7": 1})


def test_cache_index_follows_the_entry_it_names():
    cache = OutputCache()
    cache.begin_prompt(set())
    entry = CacheEntry([["x"]], None, value_key="v", by_value=True)
    cache.set("s1", entry)
    assert cache.get_by_value("v") is entry
    cache.set("s2", entry)  # reused under a new structural key
    cache.end_prompt()
    cache.begin_prompt({"s2"})  # s1 is not in the prompt and was not used: only s2 is kept
    cache.end_prompt()
    assert cache.keys() == {"s2"} and cache.get_by_value("v") is entry
    cache.begin_prompt(set())  # s2 was not used in the last prompt either: dropped
    assert cache.get_by_value("v") is None and cache.keys() == set()


def test_tokens_keep_types_and_refuse_what_has_no_identity():
    assert element_token(1) != element_token(True) != element_token(1.0)
    assert element_token(0.0) != element_token(-0.0)
    assert element_token(float("nan")) is None
    assert element_token({"samples": 1}) is None and element_token([1]) is None
    assert element_token(Handle(None)) is None
    assert element_token(Handle(("m",))) == element_token(Handle(("m",)))
    assert value_token([1, Handle(("m",))]) is not None and value_token([1, object()]) is None
    assert holds_handles([[1], [Handle(None)]]) and not holds_handles([[1, "a"], [{"samples": 1}]])


async def test_a_raising_signature_only_costs_the_hit(calls, caplog):
    class Broken(Handle):
        def cache_signature(self):
            raise RuntimeError("no")

    assert element_token(Broken(1)) is None
    assert "RuntimeError" in caplog.text


def test_classic_carries_smallest_entries_first_within_its_budget():
    cache = OutputCache(carry_budget=250)
    cache.begin_prompt(set())
    for name, size in (("big", 200), ("small", 40), ("mid", 100)):
        cache.set(name, CacheEntry([[b"x" * size]], None, value_key=f"v-{name}", by_value=True))
    cache.set("handle", CacheEntry([[Handle(("m",))]], None, value_key="v-handle", by_value=True,
                                   holds_handles=True))
    cache.end_prompt()
    cache.begin_prompt(set())  # nothing is in the new prompt: only carried entries stay
    assert cache.keys() == {"small", "mid"}  # 40 + 100 fit in 250; with 200 more they would not
    assert cache.get_by_value("v-big") is None and cache.get_by_value("v-handle") is None


def _with_a_custom_in_place_node(registry: Registry) -> Registry:
    """A pack's node (not built in) that changes the model in place and returns the same handle,
    its signature unchanged (LTXTricks' ModifyLTXModel pattern)."""

    @node("PackInPlace", inputs=[Input("model", "MODEL"), Int("scale")], outputs=[Output("MODEL")])
    def pack_in_place(model, scale):
        model.changed_in_place = scale  # what the signature cannot see
        return (model,)

    registry.add_native(pack_in_place, builtin=False)
    return registry


def _through_the_pack(scale: int = 0, strength: int = 0) -> dict:
    graph = workflow(strength=strength)
    graph["8"] = {"class_type": "PackInPlace", "inputs": {"model": ["1", 0], "scale": scale}}
    graph["2"]["inputs"]["model"] = ["8", 0]
    return graph


async def test_values_below_a_custom_node_are_keyed_by_their_producers(calls):
    executor = Executor(_with_a_custom_in_place_node(build_registry()), cache=CacheConfig("classic"),
                        before_node_call=[calls.hook])
    await run_prompt(executor, workflow())
    calls.clear()
    # The pack node returns the very handle it got (same signature): below it nothing may be taken
    # from the run without it, through built-in nodes too (Patch at strength 0 passes it on).
    await run_prompt(executor, _through_the_pack())
    assert calls == Counter({"8": 1, "2": 1, "5": 1, "6": 1, "7": 1})
    calls.clear()
    await run_prompt(executor, _through_the_pack(scale=1))  # the pack's own input changed
    assert calls == Counter({"8": 1, "2": 1, "5": 1, "6": 1, "7": 1})
    calls.clear()
    await run_prompt(executor, _through_the_pack(scale=1, strength=0))  # the same prompt: all cached
    assert calls == Counter()

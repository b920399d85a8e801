"""UI outputs reach clients as ComfyUI sends them: per key, each call's value `list.extend`ed."""
from __future__ import annotations

from graph.executor import Executor
from graph.registry import Registry
from tests.graph.conftest import Recorder
from tests.graph.helpers import node, run_prompt


class Ints:
    """Outputs the list 0..count-1, so the next node is called once per element."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"count": ("INT", {"default": 2})}}

    RETURN_TYPES = ("INT",)
    OUTPUT_IS_LIST = (True,)
    FUNCTION = "run"

    def run(self, count):
        return (list(range(count)),)


class ShowAny:
    """Like a utility pack's "display any" node: puts the value's text in the UI, as a string."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("*",)}}

    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "show"

    def show(self, value):
        return {"ui": {"text": str(value)}}


class ShowPerCall:
    """A UI whose keys differ between calls; tuples as values."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"i": ("INT",)}}

    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "show"

    def show(self, i):
        ui = {"pair": (f"a{i}", f"b{i}"), "n": [i]}
        if i > 0:
            ui["later_only"] = [i]  # not among the first call's keys: dropped, as in ComfyUI
        return {"ui": ui}


class DropsKey:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"i": ("INT",)}}

    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "show"

    def show(self, i):
        return {"ui": {"n": [i]} if i == 0 else {"other": [i]}}


def _registry() -> Registry:
    registry = Registry()
    for cls in (Ints, ShowAny, ShowPerCall, DropsKey):
        registry.add_v1(cls.__name__, cls)
    return registry


async def test_a_string_ui_value_is_spread_into_characters_as_on_comfyui():
    executor = Executor(_registry())
    prompt = {"1": node("ShowAny", value=18.5)}
    sink = Recorder()
    outcome = await run_prompt(executor, prompt, sink=sink)
    assert outcome.status == "success"
    [executed] = sink.of("executed")
    assert executed["output"] == {"text": ["1", "8", ".", "5"]}
    assert outcome.ui_outputs["1"] == {"text": ["1", "8", ".", "5"]}  # what history stores
    # a cached run replays the same record
    again = Recorder()
    await run_prompt(executor, prompt, "p2", sink=again)
    assert again.of("executed")[0]["output"] == {"text": ["1", "8", ".", "5"]}


async def test_list_mapped_calls_merge_by_the_first_calls_keys():
    sink = Recorder()
    prompt = {"1": node("Ints", count=3), "2": node("ShowPerCall", i=["1", 0])}
    outcome = await run_prompt(Executor(_registry()), prompt, sink=sink)
    assert outcome.status == "success"
    expected = {"pair": ["a0", "b0", "a1", "b1", "a2", "b2"], "n": [0, 1, 2]}
    assert sink.of("executed")[0]["output"] == expected and outcome.ui_outputs["2"] == expected


async def test_a_later_call_without_a_first_call_key_fails_the_node_as_on_comfyui():
    sink = Recorder()
    prompt = {"1": node("Ints", count=2), "2": node("DropsKey", i=["1", 0])}
    outcome = await run_prompt(Executor(_registry()), prompt, sink=sink)
    assert outcome.status == "error"
    [error] = sink.of("execution_error")
    assert error["node_id"] == "2" and "'n'" in error["exception_message"]
    assert sink.of("executed") == []

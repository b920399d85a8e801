"""graph/v3_schema.py without torch: growing and dynamic-combo inputs arrive nested, a
MatchType socket links any type, a frontend-only widget needs no value, and the node renders with
V3's NodeInfoV1 fields."""
from __future__ import annotations

from graph.executor import Executor
from graph.object_info import node_info
from graph.native import spec_of
from graph.v3_schema import (Autogrow, ComboOption, DynamicCombo, Int, MatchType, MatchTypeOutput, Socket, String,
                             Widget, v3_node)
from tests.graph.helpers import node, run_prompt

SEEN: list = []


@v3_node("ToyV3", display_name="Toy", category="test", search_aliases=["toy"],
         inputs=[MatchType("anything", "t"), Autogrow("nums", Socket("n", "INT", optional=True), names=("x", "y"), min=1),
                 DynamicCombo("mode", options=(ComboOption("plain"),
                                               ComboOption("scaled", (Int("by", default=2, min=1, max=9),)))),
                 Widget("view", "IMAGECOMPARE")],
         outputs=[MatchTypeOutput("t")])
def toy(anything, nums, mode, view=None):
    SEEN.append((nums, mode))
    factor = mode.get("by", 1)
    return (sum(nums.values()) * factor + anything,)


@v3_node("ToyText", category="test", inputs=[String("text", multiline=True)], outputs=[])
def toy_text(text):
    return {"ui": {"text": [text]}}


def test_rendering_has_v3_fields_and_one_entry_per_group():
    info = node_info(spec_of(toy))
    assert list(info["input"]["required"]) == ["anything", "nums", "mode", "view"]
    assert info["input"]["required"]["nums"][0] == "COMFY_AUTOGROW_V3"
    assert info["input"]["required"]["mode"][1]["options"][1] == {
        "key": "scaled", "inputs": {"required": {"by": ["INT", {"default": 2, "min": 1, "max": 9}]}}}
    assert info["output"] == ["COMFY_MATCHTYPE_V3"] and info["output_name"] == ["MATCHTYPE"]
    assert info["output_matchtypes"] == ["t"] and info["search_aliases"] == ["toy"]
    assert info["input"]["required"]["view"] == ["IMAGECOMPARE", {"socketless": True}]
    assert node_info(spec_of(toy_text))["input"]["required"]["text"] == ["STRING", {"multiline": True}]


async def test_nested_values_reach_the_function(registry):
    registry.add_native(toy)
    SEEN.clear()
    prompt = {"a": node("IntConst", value=3), "b": node("IntConst", value=4),
              "t": node("ToyV3", anything=["a", 0], mode="scaled", **{"nums.x": ["a", 0], "nums.y": ["b", 0],
                                                                      "mode.by": 5}),
              "o": node("FloatSink", value=["t", 0])}
    out = await run_prompt(Executor(registry), prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["o"] == {"value": [38]}
    assert SEEN == [({"x": 3, "y": 4}, {"mode": "scaled", "by": 5})]

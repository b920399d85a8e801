"""ComfyNumberConvert, ColorToRGBInt and SeedNode (ComfyUI's 2026 utility nodes)."""
from __future__ import annotations

import pytest

from nodes.color import color_to_rgb_int
from nodes.errors import NodeInputError
from nodes.number_convert import number_convert
from nodes.seed import seed_node
from tests.nodes.workflow_2026 import Runner, node


@pytest.mark.parametrize("value, result", [
    (True, (1.0, 1)), (False, (0.0, 0)), (7, (7.0, 7)), (-2.7, (-2.7, -2)), (" 12 ", (12.0, 12)),
    ("3.9", (3.9, 3)), ("1e3", (1000.0, 1000)), (10**20, (1e20, 10**20)),
])
def test_number_convert(value, result):
    assert number_convert(value) == result


@pytest.mark.parametrize("value", ["", "  ", "abc", "inf", "nan", float("inf"), None, [1]])
def test_number_convert_refuses(value):
    with pytest.raises(NodeInputError):
        number_convert(value)


@pytest.mark.parametrize("color, result", [
    ("#ffffff", (0xFFFFFF, "#ffffff", 1.0)), ("#010203", (0x010203, "#010203", 1.0)),
    ("#FF000080", (0xFF0000, "#FF0000", 128 / 255)),
])
def test_color(color, result):
    assert color_to_rgb_int(color) == result


@pytest.mark.parametrize("color", ["ffffff", "#fff", "#gggggg", "#ffffff0", 255])
def test_color_refuses(color):
    with pytest.raises(NodeInputError):
        color_to_rgb_int(color)


async def test_in_a_workflow(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"s": node("PrimitiveString", value="42.5"), "n": node("ComfyNumberConvert", value=["s", 0]),
              "c": node("ColorToRGBInt", color="#000102"), "seed": node("SeedNode", seed=123),
              "o1": node("PreviewAny", source=["n", 1]), "o2": node("PreviewAny", source=["c", 0]),
              "o3": node("PreviewAny", source=["seed", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert [out.ui_outputs[k]["text"] for k in ("o1", "o2", "o3")] == [["42"], ["258"], ["123"]]
    assert seed_node(5) == (5,)

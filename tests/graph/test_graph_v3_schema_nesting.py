"""graph/v3_schema.py, what the second batch of 2026 nodes needed (without torch): a dynamic combo
inside a dynamic combo's option, a combo shared by options with different choices, the nested
values of an `input_is_list` node, an optional growing group, hidden and dev-only nodes."""
from __future__ import annotations

import pytest

from graph.native import spec_of
from graph.object_info import node_info
from graph.spec import OPTIONAL
from graph.v3_schema import (Autogrow, Combo, ComboOption, DynamicCombo, DynamicInputError, Float, Socket, v3_node)

INNER = DynamicCombo("save_mode", display_name="save mode", options=(
    ComboOption("still"), ComboOption("animated", (Float("fps", default=6.0),))))
OUTER = DynamicCombo("format", options=(
    ComboOption("png", (Combo("depth", ["8", "16"], default="8"),)),
    ComboOption("exr", (Combo("depth", ["32"], default="32"),)),
    ComboOption("avif", (Combo("depth", ["auto"], default="auto"), INNER)),
))


def test_nested_combo_renders_inside_its_option():
    _, entry = OUTER.render()
    avif = entry[1]["options"][2]["inputs"]["required"]
    assert avif["save_mode"][0] == "COMFY_DYNAMICCOMBO_V3" and avif["save_mode"][1]["display_name"] == "save mode"
    assert avif["save_mode"][1]["options"][1]["inputs"] == {"required": {"fps": ["FLOAT", {"default": 6.0}]}}


def test_flat_inputs_name_both_levels_and_merge_shared_combo_choices():
    flat = {spec.name: spec for spec in OUTER.flat()}
    assert set(flat) == {"format", "format.depth", "format.save_mode", "format.save_mode.fps"}
    assert flat["format.depth"].type == ["8", "16", "32", "auto"] and flat["format.depth"].section == OPTIONAL
    assert flat["format.save_mode"].type == ["still", "animated"]


def test_nesting_and_the_chosen_options_choices():
    given = {"format": "avif", "format.depth": "auto", "format.save_mode": "animated", "format.save_mode.fps": 2.0}
    assert OUTER.nest(dict(given)) == {"format": "avif", "depth": "auto", "save_mode": {"save_mode": "animated",
                                                                                         "fps": 2.0}}
    with pytest.raises(DynamicInputError, match="format.depth"):
        OUTER.nest({"format": "exr", "format.depth": "16"})  # 16 is a png depth
    with pytest.raises(DynamicInputError, match="save_mode"):
        OUTER.nest({"format": "avif", "format.depth": "auto"})


def test_input_lists_keep_lists_and_choose_by_the_first():
    listed = OUTER.nest({"format": ["png"], "format.depth": ["16"]}, listed=True)
    assert listed == {"format": ["png"], "depth": ["16"]}


@v3_node("ToyListNode", category="test", input_is_list=True, dev_only=True,
         inputs=[Autogrow("extra", Socket("item", "*"), prefix="item", min=0, max=3, optional=True)],
         outputs=[], hidden=[("uid", "UNIQUE_ID")])
def toy_list(extra=None, uid=None):
    return ()


def test_input_list_hidden_dev_only_and_an_optional_group_render():
    info = node_info(spec_of(toy_list))
    assert info["is_input_list"] is True and info["dev_only"] is True
    assert info["input"]["optional"]["extra"][0] == "COMFY_AUTOGROW_V3"
    assert info["input"]["hidden"] == {"uid": ["UNIQUE_ID"]} and info["input_order"]["hidden"] == ["uid"]
    spec = spec_of(toy_list)
    assert spec.input_is_list and all(i.section == OPTIONAL for i in spec.inputs if i.name.startswith("extra."))

"""Registry, V1 adapter and /object_info rendering."""
from __future__ import annotations

import pytest

from graph.errors import DuplicateNodeTypeError, NodeDefinitionError, UnknownNodeTypeError
from graph.native import Combo, Hidden, Input, Int, NodeDeclarationError, Output, node
from graph.registry import Registry
from tests.graph.packs.testing_pack.nodes_basic import Add, Collect, IntConst


@node("NativeScale", category="testing", description="Scales an int.",
      inputs=[Input("value", "INT"), Int("factor", default=2, min=1, max=10),
              Combo("mode", lambda env: ["a", "b", env] if env else ["a", "b"], default="a"),
              Hidden("uid", "UNIQUE_ID")],
      outputs=[Output("INT", "scaled", tooltip="value times factor")])
def native_scale(value: int, factor: int, mode: str, uid: str = ""):
    return (value * factor,)


def test_v1_spec_reads_the_class_contract(registry):
    spec = registry.get("Add")
    assert [i.name for i in spec.inputs] == ["a", "b"]
    assert [(o.type, o.name, o.tooltip) for o in spec.outputs] == [("INT", "sum", "a + b")]
    assert spec.category == "testing/math" and spec.description == "Adds two integers."
    assert spec.display_name == "Add integers"
    assert registry.get("Collect").output_node and registry.get("Counter").not_idempotent
    assert registry.get("SumList").input_is_list
    assert registry.get("MakeList").outputs[0].is_list and not registry.get("MakeList").outputs[1].is_list
    assert registry.get("AsyncWait").behaviour.is_coroutine and not spec.behaviour.is_coroutine
    even = registry.get("Even").behaviour
    assert "value" in even.validate_params and not even.validate_takes_all
    assert registry.get("KwargsValidate").behaviour.validate_takes_all
    assert registry.get("AnyTypeCheck").behaviour.validate_takes_input_types


def test_duplicates_are_rejected_and_builtins_protected():
    reg = Registry()
    reg.add_native(native_scale)
    with pytest.raises(DuplicateNodeTypeError, match="built-in"):
        reg.add_v1("NativeScale", Add)
    reg.add_v1("Add", Add)
    with pytest.raises(DuplicateNodeTypeError, match="'Add'"):
        reg.add_v1("Add", IntConst)
    assert reg.get("Add").source is Add
    assert reg.is_builtin("NativeScale") and not reg.is_builtin("Add")


def test_unknown_type_and_malformed_class():
    reg = Registry()
    with pytest.raises(UnknownNodeTypeError, match="Nope"):
        reg.get("Nope")
    assert "Nope" not in reg and reg.find(["unhashable"]) is None

    class NoFunction:  # a pack's "info" node: listed by ComfyUI, never run (no outputs)
        RETURN_TYPES = ()

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {}}

    spec = reg.add_v1("NoFunction", NoFunction)
    assert "NoFunction" in reg.object_info() and any("FUNCTION" in quirk for quirk in spec.quirks)
    with pytest.raises(NodeDefinitionError, match="cannot run: FUNCTION"):
        spec.behaviour.call(spec.behaviour.make_instance())


def test_native_parameter_names_must_match_inputs():
    with pytest.raises(NodeDeclarationError):
        @node("Broken", inputs=[Int("x")])
        def broken(y: int):
            return (y,)


def test_object_info_v1_shape(registry):
    info = registry.object_info()["Collect"]
    assert info == {
        "input": {"required": {"value": ("*", {})}, "hidden": {"unique_id": "UNIQUE_ID"}},
        "input_order": {"required": ["value"], "hidden": ["unique_id"]},
        "output": [], "output_is_list": [], "output_name": [], "name": "Collect", "display_name": "Collect",
        "description": "", "python_module": "custom_nodes.testing_pack", "category": "testing",
        "output_node": True, "is_input_list": False, "has_intermediate_output": False, "search_aliases": [],
    }
    add = registry.object_info_for("Add")["Add"]
    assert add["output"] == ["INT"] and add["output_name"] == ["sum"] and add["output_tooltips"] == ["a + b"]
    assert add["display_name"] == "Add integers" and add["output_is_list"] == [False]
    assert registry.object_info_for("MakeList")["MakeList"]["output_is_list"] == [True, False]
    assert "deprecated" not in add and "experimental" not in add
    assert registry.object_info_for("Missing") == {}


def test_object_info_rereads_input_types():
    class Dynamic:
        choices = ["x"]

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"pick": (list(cls.choices),)}}

        RETURN_TYPES = ()
        FUNCTION = "run"
        DEPRECATED = True
        EXPERIMENTAL = True

        def run(self, pick):
            return ()

    reg = Registry()
    reg.add_v1("Dynamic", Dynamic)
    Dynamic.choices = ["x", "y"]
    info = reg.object_info()["Dynamic"]
    assert info["input"]["required"]["pick"] == (["x", "y"],)
    assert info["deprecated"] is True and info["experimental"] is True
    assert reg.get("Dynamic").current_inputs()[0].type == ["x", "y"]


def test_object_info_native_and_env_dependent_combo():
    reg = Registry()
    reg.add_native(native_scale)
    info = reg.object_info(env="c")["NativeScale"]
    assert info["input"] == {
        "required": {"value": ["INT"], "factor": ["INT", {"default": 2, "min": 1, "max": 10}],
                     "mode": [["a", "b", "c"], {"default": "a"}]},
        "hidden": {"uid": "UNIQUE_ID"}}
    assert info["input_order"] == {"required": ["value", "factor", "mode"], "hidden": ["uid"]}
    assert info["output_name"] == ["scaled"] and info["output_tooltips"] == ["value times factor"]
    assert info["python_module"] == "nodes" and info["category"] == "testing"
    assert reg.object_info()["NativeScale"]["input"]["required"]["mode"][0] == ["a", "b"]


def test_broken_input_types_only_drops_that_node(registry):
    info = registry.object_info()
    assert "BrokenInputTypes" not in info and "Add" in info
    assert registry.object_info_for("BrokenInputTypes") == {}

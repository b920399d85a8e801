"""Pack V3 nodes with today's dynamic inputs: `io.MatchType`, `io.Autogrow`, `io.DynamicCombo`,
rendered in /object_info as ComfyUI's `Schema.get_v1_info` renders them (comfy_api/latest/_io.py
@58a8a96c, Comfy-Org/ComfyUI) and passed to `execute` / `check_lazy_status` as ComfyUI's
`build_nested_inputs` passes them."""
from __future__ import annotations

import pytest

from graph.errors import NodeDefinitionError
from graph.executor import Executor
from graph.object_info import node_info
from graph.registry import Registry
from graph.validation import validate_prompt


def _nodes(seen: list):
    from comfy_api.latest import io, ui

    class Gather(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            template = io.MatchType.Template("T", allowed_types=[io.Int, io.Float])
            return io.Schema(
                node_id="PackGather", category="pack", is_output_node=True, search_aliases=["collect"],
                inputs=[
                    io.Autogrow.Input("values", template=io.Autogrow.TemplatePrefix(
                        io.Int.Input("v", min=0, tooltip="a number"), prefix="v", min=1, max=3)),
                    io.Autogrow.Input("tags", optional=True, template=io.Autogrow.TemplateNames(
                        io.String.Input("tag", optional=True), names=["first", "second"], min=0)),
                    io.DynamicCombo.Input("mode", tooltip="how", options=[
                        io.DynamicCombo.Option("scale", [io.Float.Input("factor", default=2.0)]),
                        io.DynamicCombo.Option("size", [
                            io.Int.Input("width", default=64),
                            io.Int.Input("height", default=64, optional=True),
                            io.DynamicCombo.Input("fit", options=[
                                io.DynamicCombo.Option("crop", []),
                                io.DynamicCombo.Option("pad", [io.Int.Input("border", default=0)])])])]),
                    io.MatchType.Input("same", template=template, optional=True),
                ],
                outputs=[io.MatchType.Output(template), io.Int.Output("count", tooltip="how many")])

        @classmethod
        def execute(cls, values, mode, tags=None, same=None):
            seen.append({"values": values, "tags": tags, "mode": mode, "same": same})
            return io.NodeOutput(same, len(values), ui=ui.PreviewText(str(sum(values.values()))))

    class Pick(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="PackPick", inputs=[
                io.Autogrow.Input("slots", template=io.Autogrow.TemplateNames(
                    io.Int.Input("slot", lazy=True, optional=True), names=["a", "b", "c"], min=0))],
                outputs=[io.Int.Output()])

        @classmethod
        def check_lazy_status(cls, slots):
            seen.append(("lazy", slots))
            # ComfyUI's (value, flat name) pairs: ask for the first linked slot not evaluated yet
            if isinstance(slots, tuple):  # nothing linked: ({}, "slots")
                return []
            for value, key in slots.values():
                if value is None:
                    return [key]
            return []

        @classmethod
        def execute(cls, slots):
            seen.append(("run", slots))
            return io.NodeOutput(sum(slots.values()))

    class Const(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="PackConst", inputs=[io.Int.Input("value")], outputs=[io.Int.Output()])

        @classmethod
        def execute(cls, value):
            seen.append(("const", value))
            return io.NodeOutput(value)

    return Gather, Pick, Const


def _registry(seen: list) -> Registry:
    from compat.v3.adapter import spec_from_v3

    registry = Registry()
    for cls in _nodes(seen):
        registry.add_spec(spec_from_v3(cls, python_module="custom_nodes.pack"))
    return registry


def test_object_info_renders_each_dynamic_input_as_comfyui_does(session):
    info = node_info(_registry([]).get("PackGather"))
    required, optional = info["input"]["required"], info["input"]["optional"]
    assert required["values"] == ["COMFY_AUTOGROW_V3", {"template": {
        "input": {"required": {"v": ["INT", {"tooltip": "a number", "min": 0, "forceInput": True}]}},
        "prefix": "v", "min": 1, "max": 3}}]
    assert optional["tags"] == ["COMFY_AUTOGROW_V3", {"template": {
        "input": {"required": {}, "optional": {"tag": ["STRING", {"forceInput": True}]}},
        "names": ["first", "second"], "min": 0}}]
    assert required["mode"] == ["COMFY_DYNAMICCOMBO_V3", {"tooltip": "how", "options": [
        {"key": "scale", "inputs": {"required": {"factor": ["FLOAT", {"default": 2.0}]}}},
        {"key": "size", "inputs": {
            "required": {"width": ["INT", {"default": 64}],
                         "fit": ["COMFY_DYNAMICCOMBO_V3", {"options": [
                             {"key": "crop", "inputs": {"required": {}}},
                             {"key": "pad", "inputs": {"required": {"border": ["INT", {"default": 0}]}}}]}]},
            "optional": {"height": ["INT", {"default": 64}]}}}]}]
    assert optional["same"] == ["COMFY_MATCHTYPE_V3", {"template": {"template_id": "T", "allowed_types": "INT,FLOAT"}}]
    assert info["input"]["hidden"] == {"prompt": ["PROMPT"], "extra_pnginfo": ["EXTRA_PNGINFO"]}
    assert info["input_order"] == {"required": ["values", "mode"], "optional": ["tags", "same"],
                                   "hidden": ["prompt", "extra_pnginfo"]}
    assert info["output"] == ["COMFY_MATCHTYPE_V3", "INT"] and info["output_name"] == ["MATCHTYPE", "count"]
    assert info["output_matchtypes"] == ["T", None] and info["output_tooltips"] == [None, "how many"]
    assert info["search_aliases"] == ["collect"] and info["is_input_list"] is False
    assert info["dev_only"] is False and info["has_intermediate_output"] is False
    assert info["python_module"] == "custom_nodes.pack"


def test_the_v1_face_of_a_dynamic_node_has_the_same_entries(session):
    from compat.v3.io import v1_input_types

    gather = _nodes([])[0]
    rendered = v1_input_types(gather)
    assert rendered["required"]["values"][0] == "COMFY_AUTOGROW_V3"
    assert rendered["required"]["values"][1]["template"]["prefix"] == "v"


async def test_execute_gets_the_nested_values_comfyui_passes(session):
    seen: list = []
    registry = _registry(seen)
    prompt = {"1": {"class_type": "PackConst", "inputs": {"value": 5}},
              "2": {"class_type": "PackGather", "inputs": {
                  "values.v0": ["1", 0], "values.v1": 7, "mode": "size", "mode.width": 32,
                  "mode.fit": "pad", "mode.fit.border": 3, "mode.factor": 9.0, "same": ["1", 0]}}}
    checked = await validate_prompt(prompt, registry)
    assert checked.ok, checked.node_errors
    outcome = await Executor(registry, before_node_call=[session.before_node_call]).execute(prompt, "p", outputs=["2"])
    assert outcome.status == "success", outcome
    call = next(s for s in seen if isinstance(s, dict))
    assert call["values"] == {"v0": 5, "v1": 7}
    # every input of the chosen option (height: None, it was not given); other options' inputs dropped
    assert call["mode"] == {"mode": "size", "width": 32, "height": None, "fit": {"fit": "pad", "border": 3}}
    assert call["tags"] == {}  # an empty optional Autogrow is an empty dict, as in ComfyUI
    assert call["same"] == 5
    assert outcome.ui_outputs["2"] == {"text": ["12"]}


async def test_a_required_sub_input_of_the_chosen_option_is_a_node_error(session):
    seen: list = []
    registry = _registry(seen)
    prompt = {"2": {"class_type": "PackGather", "inputs": {"values.v0": 1, "mode": "scale"}}}
    assert (await validate_prompt(prompt, registry)).ok  # which sub-inputs are needed depends on the choice
    outcome = await Executor(registry, before_node_call=[session.before_node_call]).execute(prompt, "p", outputs=["2"])
    assert outcome.status == "error" and "mode.factor" in str(outcome.error)
    bad = await validate_prompt({"2": {"class_type": "PackGather", "inputs": {"values.v0": 1, "mode": "zoom"}}},
                                registry)
    assert not bad.ok  # the key must be one of the options
    missing = await validate_prompt({"2": {"class_type": "PackGather", "inputs": {"mode": "scale",
                                                                                   "mode.factor": 1.0}}}, registry)
    assert not missing.ok  # the first `min` grown inputs are required


async def test_check_lazy_status_gets_value_and_flat_name_pairs(session):
    seen: list = []
    registry = _registry(seen)
    prompt = {"1": {"class_type": "PackConst", "inputs": {"value": 4}},
              "3": {"class_type": "PackConst", "inputs": {"value": 6}},
              "2": {"class_type": "PackPick", "inputs": {"slots.a": ["1", 0], "slots.c": ["3", 0]}}}
    outcome = await Executor(registry, before_node_call=[session.before_node_call]).execute(prompt, "p", outputs=["2"])
    assert outcome.status == "success", outcome
    lazy = [s[1] for s in seen if isinstance(s, tuple) and s[0] == "lazy"]
    assert lazy[0] == {"a": (None, "slots.a"), "c": (None, "slots.c")}
    assert lazy[-1] == {"a": (4, "slots.a"), "c": (6, "slots.c")}
    assert [s for s in seen if isinstance(s, tuple) and s[0] == "run"] == [("run", {"a": 4, "c": 6})]


async def test_an_empty_lazy_autogrow_is_an_empty_dict_pair(session):
    seen: list = []
    registry = _registry(seen)
    outcome = await Executor(registry, before_node_call=[session.before_node_call]).execute(
        {"2": {"class_type": "PackPick", "inputs": {}}}, "p", outputs=["2"])
    assert outcome.status == "success", outcome
    lazy = [s[1] for s in seen if isinstance(s, tuple) and s[0] == "lazy"]
    assert lazy == [({}, "slots")]
    assert ("run", {}) in seen


def test_malformed_dynamic_declarations_raise_typed_errors(session):
    from comfy_api.latest import io

    with pytest.raises(io.SchemaError):
        io.Autogrow.TemplatePrefix(io.Int.Input("v"), prefix="v", max=101)
    with pytest.raises(io.SchemaError):
        io.Autogrow.TemplateNames(io.Int.Input("v"), names="abc")
    with pytest.raises(io.SchemaError):
        io.Autogrow.Input("x", template=io.Int.Input("v"))
    with pytest.raises(io.SchemaError):
        io.DynamicCombo.Input("m", options=[io.DynamicCombo.Option("a", []), io.DynamicCombo.Option("a", [])])
    with pytest.raises(io.SchemaError):
        io.DynamicCombo.Option("a", [io.Autogrow.Input("g", template=io.Autogrow.TemplateNames(
            io.Int.Input("v"), names=["x"]))])
    with pytest.raises(io.SchemaError):
        io.MatchType.Template("T", allowed_types=[object()])
    with pytest.raises(io.SchemaError):
        io.MatchType.Output(template="nope")
    # the 0.3.64 order of MatchType.Output still reads
    legacy = io.MatchType.Output("out", io.MatchType.Template("T"))
    assert legacy.id == "out" and legacy.template.template_id == "T"


def _slot_node(seen: list):
    from comfy_api.latest import io

    class Slot(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="PackSlot", is_output_node=True, inputs=[
                io.DynamicSlot.Input(io.Int.Input("number"), inputs=[
                    io.Float.Input("strength", default=1.0), io.Boolean.Input("invert", optional=True)])],
                outputs=[io.Int.Output()])

        @classmethod
        def execute(cls, **kwargs):
            seen.append(kwargs)
            return io.NodeOutput(0)

    return Slot


def test_a_dynamic_slot_renders_as_comfyui_does(session):
    from compat.v3.adapter import spec_from_v3

    info = node_info(spec_from_v3(_slot_node([])))
    assert info["input"]["required"] == {}
    assert info["input"]["optional"] == {"number": ["COMFY_DYNAMICSLOT_V3", {
        "slotType": "INT",
        "inputs": {"required": {"strength": ["FLOAT", {"default": 1.0}]}, "optional": {"invert": ["BOOLEAN", {}]}},
        "forceInput": True}]}


async def test_a_dynamic_slot_brings_its_inputs_only_when_linked(session):
    from compat.v3.adapter import spec_from_v3

    seen: list = []
    registry = _registry(seen)
    registry.add_spec(spec_from_v3(_slot_node(seen)))
    run = Executor(registry, before_node_call=[session.before_node_call]).execute
    linked = {"1": {"class_type": "PackConst", "inputs": {"value": 5}},
              "2": {"class_type": "PackSlot", "inputs": {"number": ["1", 0], "number.strength": 0.5}}}
    assert (await validate_prompt(linked, registry)).ok
    assert (await run(linked, "p1", outputs=["2"])).status == "success"
    assert seen[-1] == {"number": {"number": 5, "strength": 0.5, "invert": None}}
    assert (await run({"2": {"class_type": "PackSlot", "inputs": {}}}, "p2", outputs=["2"])).status == "success"
    assert seen[-1] == {}  # not linked: the node gets nothing for it
    missing = {"1": {"class_type": "PackConst", "inputs": {"value": 5}},
               "2": {"class_type": "PackSlot", "inputs": {"number": ["1", 0]}}}
    outcome = await run(missing, "p3", outputs=["2"])
    assert outcome.status == "error" and "number.strength" in str(outcome.error)


async def test_accept_all_inputs_passes_the_undeclared_constant_inputs(session):
    from comfy_api.latest import io

    from compat.v3.adapter import spec_from_v3

    seen: list = []

    class Widgets(io.ComfyNode):
        @classmethod
        def define_schema(cls):
            return io.Schema(node_id="PackWidgets", is_output_node=True, accept_all_inputs=True,
                             inputs=[io.String.Input("choice")], outputs=[])

        @classmethod
        def execute(cls, **kwargs):
            seen.append(kwargs)
            return io.NodeOutput()

    registry = _registry(seen)
    spec = spec_from_v3(Widgets)
    registry.add_spec(spec)
    assert "hidden" in node_info(spec)["input"] and all(
        not k.startswith("__") for k in node_info(spec)["input"]["hidden"])  # the helper inputs are not shown
    prompt = {"1": {"class_type": "PackConst", "inputs": {"value": 2}},
              "2": {"class_type": "PackWidgets", "inputs": {"choice": "b", "option0": "a", "option1": "b",
                                                            "linked": ["1", 0]}}}
    outcome = await Executor(registry, before_node_call=[session.before_node_call]).execute(prompt, "p", outputs=["2"])
    assert outcome.status == "success", outcome
    assert seen[-1] == {"choice": "b", "option0": "a", "option1": "b", "linked": 2}  # all of them, as ComfyUI


def test_a_price_badge_renders_with_its_widgets_types(session):
    from comfy_api.latest import io

    from compat.v3.adapter import spec_from_v3

    def node(badge):
        class Priced(io.ComfyNode):
            @classmethod
            def define_schema(cls):
                return io.Schema(node_id="PackPriced", is_api_node=True, price_badge=badge, inputs=[
                    io.Int.Input("count", default=1),
                    io.DynamicCombo.Input("model", options=[
                        io.DynamicCombo.Option("pro", [io.Combo.Input("quality", options=["hd", "sd"])])])],
                    outputs=[])

            @classmethod
            def execute(cls, **kwargs):
                return io.NodeOutput()
        return Priced

    badge = io.PriceBadge(expr="count * 0.05", depends_on=io.PriceBadgeDepends(
        widgets=["count", "model.quality"], input_groups=["model"]))
    info = node_info(spec_from_v3(node(badge)))
    assert info["price_badge"] == {"engine": "jsonata", "expr": "count * 0.05", "depends_on": {
        "widgets": [{"name": "count", "type": "INT"}, {"name": "model.quality", "type": "COMBO"}],
        "inputs": [], "input_groups": ["model"]}}
    assert info["api_node"] is True
    assert set(info["input"]["hidden"]) == {"auth_token_comfy_org", "api_key_comfy_org"}  # Schema.finalize's
    for bad in (io.PriceBadge(expr=""), io.PriceBadge(expr="1", engine="js"),
                io.PriceBadge(expr="1", depends_on=io.PriceBadgeDepends(widgets=["nope"]))):
        with pytest.raises(NodeDefinitionError):
            spec_from_v3(node(bad))

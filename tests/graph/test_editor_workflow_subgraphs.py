"""Saved workflows with subgraphs become the flat prompt the editor would queue, with compound
ids ("54:73", "54:62:174") (graph.editor_workflow)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from graph.editor_workflow import EditorWorkflowError, editor_to_prompt, unknown_types

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def defs() -> dict:
    return json.loads((DATA / "comfyui_0.3.64_object_info.json").read_text())


def _node(node_id, node_type, widgets=None, inputs=(), outputs=(), mode=0, **extra):  # noqa: ANN001, ANN202
    node = {"id": node_id, "type": node_type, "mode": mode, "inputs": [dict(i) for i in inputs],
            "outputs": [dict(o) for o in outputs], **extra}
    if widgets is not None:
        node["widgets_values"] = widgets
    return node


def _in(name, kind, link, widget=False):  # noqa: ANN001, ANN202
    entry = {"name": name, "type": kind, "link": link}
    if widget:
        entry["widget"] = {"name": name}
    return entry


def _link(link_id, origin, origin_slot, target, target_slot, kind):  # noqa: ANN001, ANN202
    return {"id": link_id, "origin_id": origin, "origin_slot": origin_slot, "target_id": target,
            "target_slot": target_slot, "type": kind}


FLIP = "flip-sg"


def _flip_definition(inner_mode: int = 0) -> dict:
    """A subgraph: LATENT in -> LatentFlip (its flip_method promoted as input "method") -> out."""
    return {
        "id": FLIP, "name": "Flip", "inputNode": {"id": -10}, "outputNode": {"id": -20},
        "inputs": [{"name": "samples", "type": "LATENT", "linkIds": [1]},
                   {"name": "method", "type": "COMBO", "linkIds": [2]}],
        "outputs": [{"name": "LATENT", "type": "LATENT", "linkIds": [3]}],
        "nodes": [_node(5, "LatentFlip", ["y-axis: horizontally"],
                        [_in("samples", "LATENT", 1), _in("flip_method", "COMBO", 2, widget=True)],
                        [{"name": "LATENT", "type": "LATENT"}], mode=inner_mode)],
        "links": [_link(1, -10, 0, 5, 0, "LATENT"), _link(2, -10, 1, 5, 1, "COMBO"), _link(3, 5, 0, -20, 0, "LATENT")],
    }


def _flip_workflow(host_widgets=None, host_mode=0, inner_mode=0, **host_extra) -> dict:  # noqa: ANN001
    host = _node(10, FLIP, host_widgets, [_in("samples", "LATENT", 11), _in("method", "COMBO", None, widget=True)],
                 [{"name": "LATENT", "type": "LATENT"}], mode=host_mode, **host_extra)
    nodes = [_node(1, "EmptyLatentImage", [64, 64, 1], outputs=[{"name": "LATENT", "type": "LATENT"}]), host,
             _node(2, "LatentFlip", ["x-axis: vertically"], [_in("samples", "LATENT", 12)])]
    links = [[11, 1, 0, 10, 0, "LATENT"], [12, 10, 0, 2, 0, "LATENT"]]
    return {"nodes": nodes, "links": links, "definitions": {"subgraphs": [_flip_definition(inner_mode)]}}


def test_inner_nodes_get_compound_ids_and_links_go_through_inputs_and_outputs(defs) -> None:
    prompt = editor_to_prompt(_flip_workflow(), defs)
    assert set(prompt) == {"1", "10:5", "2"}
    assert prompt["10:5"]["inputs"] == {"samples": ["1", 0], "flip_method": "y-axis: horizontally"}
    assert prompt["10:5"]["class_type"] == "LatentFlip"
    assert prompt["2"]["inputs"]["samples"] == ["10:5", 0]


def test_promoted_widget_takes_the_instances_value_else_the_inner_one(defs) -> None:
    prompt = editor_to_prompt(_flip_workflow(["x-axis: vertically"]), defs)
    assert prompt["10:5"]["inputs"]["flip_method"] == "x-axis: vertically"
    prompt = editor_to_prompt(_flip_workflow([None]), defs)
    assert prompt["10:5"]["inputs"]["flip_method"] == "y-axis: horizontally"


def test_promoted_input_linked_outside_takes_the_link_or_the_primitive(defs) -> None:
    workflow = _flip_workflow(["x-axis: vertically"])
    workflow["nodes"][1]["inputs"][1]["link"] = 13
    workflow["nodes"].append(_node(3, "PrimitiveNode", ["y-axis: horizontally"], outputs=[{"name": "COMBO"}]))
    workflow["links"].append([13, 3, 0, 10, 1, "COMBO"])
    assert editor_to_prompt(workflow, defs)["10:5"]["inputs"]["flip_method"] == "y-axis: horizontally"


def test_legacy_proxy_widgets_hold_one_value_per_entry(defs) -> None:
    definition = _flip_definition()
    # the inner LatentFlip's flip_method is promoted directly (not through a subgraph input)
    definition["inputs"] = definition["inputs"][:1]
    definition["links"] = [link for link in definition["links"] if link["id"] != 2]
    definition["nodes"][0]["inputs"][1]["link"] = None
    workflow = _flip_workflow(["x-axis: vertically"], properties={"proxyWidgets": [["5", "flip_method"]]})
    workflow["nodes"][1]["inputs"] = workflow["nodes"][1]["inputs"][:1]
    workflow["definitions"]["subgraphs"] = [definition]
    assert editor_to_prompt(workflow, defs)["10:5"]["inputs"]["flip_method"] == "x-axis: vertically"
    workflow["nodes"][1]["widgets_values"] = []  # no saved value: the inner widget's own
    assert editor_to_prompt(workflow, defs)["10:5"]["inputs"]["flip_method"] == "y-axis: horizontally"
    # an entry for a widget fed by a subgraph input sets that input
    workflow = _flip_workflow([None, "x-axis: vertically"],
                              properties={"proxyWidgets": [["5", "samples"], ["5", "flip_method"]]})
    assert editor_to_prompt(workflow, defs)["10:5"]["inputs"]["flip_method"] == "x-axis: vertically"


def test_bypassed_and_muted_nodes_inside_a_subgraph(defs) -> None:
    bypassed = editor_to_prompt(_flip_workflow(inner_mode=4), defs)
    assert set(bypassed) == {"1", "2"}
    assert bypassed["2"]["inputs"]["samples"] == ["1", 0]  # through the bypassed node to the outer producer
    muted = editor_to_prompt(_flip_workflow(inner_mode=2), defs)
    assert set(muted) == {"1", "2"} and "samples" not in muted["2"]["inputs"]


def test_bypassed_and_muted_instances(defs) -> None:
    bypassed = editor_to_prompt(_flip_workflow(host_mode=4), defs)
    assert set(bypassed) == {"1", "2"} and bypassed["2"]["inputs"]["samples"] == ["1", 0]
    muted = editor_to_prompt(_flip_workflow(host_mode=2), defs)
    assert set(muted) == {"1", "2"} and "samples" not in muted["2"]["inputs"]


def test_bypass_passes_the_first_input_of_the_wanted_type(defs) -> None:
    lora = {
        "id": "lora-sg", "inputNode": {"id": -10}, "outputNode": {"id": -20},
        "inputs": [{"name": "model", "type": "MODEL", "linkIds": [1]},
                   {"name": "clip", "type": "CLIP", "linkIds": [2]}],
        "outputs": [{"name": "CLIP", "type": "CLIP", "linkIds": [3]}],
        "nodes": [_node(7, "LoraLoader", ["l.safetensors", 1, 1], [_in("model", "MODEL", 1), _in("clip", "CLIP", 2)],
                        [{"name": "MODEL", "type": "MODEL"}, {"name": "CLIP", "type": "CLIP"}], mode=4)],
        "links": [_link(1, -10, 0, 7, 0, "MODEL"), _link(2, -10, 1, 7, 1, "CLIP"), _link(3, 7, 1, -20, 0, "CLIP")],
    }
    workflow = {
        "nodes": [_node(4, "CheckpointLoaderSimple", ["m.safetensors"]),
                  _node(20, "lora-sg", None, [_in("model", "MODEL", 1), _in("clip", "CLIP", 2)]),
                  _node(6, "CLIPTextEncode", ["a cat"], [_in("clip", "CLIP", 3)])],
        "links": [[1, 4, 0, 20, 0, "MODEL"], [2, 4, 1, 20, 1, "CLIP"], [3, 20, 0, 6, 0, "CLIP"]],
        "definitions": {"subgraphs": [lora]},
    }
    assert editor_to_prompt(workflow, defs)["6"]["inputs"]["clip"] == ["4", 1]


def _nested_workflow(inner_widget_value="y-axis: horizontally", host_values=None) -> dict:  # noqa: ANN001
    """54 (outer def) holds 73 (LatentUpscaleBy) and 62, an instance of the flip subgraph whose
    inner node is 174; the outer def promotes the flip method of the nested instance."""
    inner = _flip_definition()
    inner["nodes"][0]["id"] = 174
    inner["nodes"][0]["widgets_values"] = [inner_widget_value]
    for link in inner["links"]:
        link["origin_id"] = 174 if link["origin_id"] == 5 else link["origin_id"]
        link["target_id"] = 174 if link["target_id"] == 5 else link["target_id"]
    outer = {
        "id": "outer-sg", "inputNode": {"id": -10}, "outputNode": {"id": -20},
        "inputs": [{"name": "latent", "type": "LATENT", "linkIds": [21]},
                   {"name": "method", "type": "COMBO", "linkIds": [22]}],
        "outputs": [{"name": "LATENT", "type": "LATENT", "linkIds": [24]}],
        "nodes": [
            _node(73, "LatentUpscaleBy", ["nearest-exact", 2], [_in("samples", "LATENT", 21)],
                  [{"name": "LATENT", "type": "LATENT"}], title="Upscale"),
            _node(62, FLIP, None, [_in("samples", "LATENT", 23), _in("method", "COMBO", 22, widget=True)],
                  [{"name": "LATENT", "type": "LATENT"}]),
            _node(80, "Reroute", None, [_in("", "*", 25)], [{"name": "", "type": "*"}]),
        ],
        "links": [_link(21, -10, 0, 73, 0, "LATENT"), _link(22, -10, 1, 62, 1, "COMBO"),
                  _link(23, 73, 0, 80, 0, "LATENT"), _link(25, 73, 0, 80, 0, "LATENT"),
                  _link(24, 62, 0, -20, 0, "LATENT")],
    }
    outer["nodes"][1]["inputs"][0]["link"] = 26
    outer["links"].append(_link(26, 80, 0, 62, 0, "LATENT"))
    outer["nodes"][2]["inputs"][0]["link"] = 23
    workflow = {
        "nodes": [_node(1, "EmptyLatentImage", [64, 64, 1]),
                  _node(54, "outer-sg", host_values,
                        [_in("latent", "LATENT", 31), _in("method", "COMBO", None, widget=True)]),
                  _node(9, "LatentFlip", ["x-axis: vertically"], [_in("samples", "LATENT", 32)])],
        "links": [[31, 1, 0, 54, 0, "LATENT"], [32, 54, 0, 9, 0, "LATENT"]],
        "definitions": {"subgraphs": [outer, inner]},
    }
    return workflow


def test_nested_subgraphs_flatten_to_path_ids(defs) -> None:
    prompt = editor_to_prompt(_nested_workflow(), defs)
    assert set(prompt) == {"1", "54:73", "54:62:174", "9"}
    assert prompt["54:73"]["inputs"]["samples"] == ["1", 0]
    assert prompt["54:73"]["_meta"]["title"] == "Upscale"
    # through a Reroute inside the outer subgraph and into the nested one
    assert prompt["54:62:174"]["inputs"] == {"samples": ["54:73", 0], "flip_method": "y-axis: horizontally"}
    assert prompt["9"]["inputs"]["samples"] == ["54:62:174", 0]


def test_nested_promoted_widget_value_comes_from_the_outermost_instance(defs) -> None:
    prompt = editor_to_prompt(_nested_workflow(host_values=["x-axis: vertically"]), defs)
    assert prompt["54:62:174"]["inputs"]["flip_method"] == "x-axis: vertically"
    prompt = editor_to_prompt(_nested_workflow(inner_widget_value="x-axis: vertically"), defs)
    assert prompt["54:62:174"]["inputs"]["flip_method"] == "x-axis: vertically"


def test_two_instances_of_one_definition_are_separate(defs) -> None:
    workflow = _flip_workflow(["x-axis: vertically"])
    second = copy.deepcopy(workflow["nodes"][1])
    second.update(id=11, widgets_values=[None])
    second["inputs"][0]["link"] = 14
    workflow["nodes"].append(second)
    workflow["links"].append([14, 10, 0, 11, 0, "LATENT"])
    prompt = editor_to_prompt(workflow, defs)
    assert prompt["10:5"]["inputs"]["flip_method"] == "x-axis: vertically"
    assert prompt["11:5"]["inputs"] == {"samples": ["10:5", 0], "flip_method": "y-axis: horizontally"}


def test_unknown_types_inside_subgraphs_are_named(defs) -> None:
    workflow = _flip_workflow()
    workflow["definitions"]["subgraphs"][0]["nodes"].append(_node(6, "NoSuchInnerNode", []))
    assert unknown_types(workflow, defs) == ["NoSuchInnerNode"]
    with pytest.raises(EditorWorkflowError, match="NoSuchInnerNode"):
        editor_to_prompt(workflow, defs)


def test_official_template_with_one_subgraph(defs) -> None:
    workflow = json.loads((DATA / "templates" / "flux_dev_checkpoint_example.json").read_text())
    prompt = editor_to_prompt(workflow, defs)
    assert set(prompt) == {"9", *(f"56:{n}" for n in range(47, 55))}
    assert prompt["9"]["inputs"]["images"] == ["56:53", 0]
    assert prompt["56:52"]["inputs"]["negative"] == ["56:54", 0]
    assert prompt["56:50"]["inputs"] == {"width": 1024, "height": 1024, "batch_size": 1}  # inner values
    assert prompt["56:51"]["inputs"]["clip"] == ["56:49", 0]
    assert prompt["56:51"]["inputs"]["text"].startswith("Beautiful photography")


def test_official_template_with_a_nested_subgraph(defs) -> None:
    workflow = json.loads((DATA / "templates" / "image_netayume_lumina_t2i.json").read_text())
    multiline = {"input": {"required": {"value": ["STRING", {"multiline": True}]}},
                 "input_order": {"required": ["value"]}}
    defs = {**defs, "PrimitiveStringMultiline": multiline,
            "StringConcatenate": {"input": {"required": {"string_a": ["STRING"], "string_b": ["STRING"],
                                                         "delimiter": ["STRING", {"default": ""}]}},
                                  "input_order": {"required": ["string_a", "string_b", "delimiter"]}}}
    prompt = editor_to_prompt(workflow, defs)
    assert prompt["48:35:43"]["inputs"] == {"text": ["48:35:40", 0], "clip": ["48:34", 1]}
    assert prompt["48:33"]["inputs"]["negative"] == ["48:35:43", 0]
    assert prompt["9"]["inputs"]["images"] == ["48:36", 0]
    assert all(":" in node_id for node_id in prompt if node_id != "9")


def test_inner_ids_taken_by_the_root_are_renumbered_as_the_editor_loads_them(defs) -> None:
    workflow = _flip_workflow()
    workflow["nodes"][0]["id"] = 5  # the root EmptyLatentImage takes the inner LatentFlip's id
    workflow["links"][0][1] = 5
    workflow["last_node_id"] = 30
    prompt = editor_to_prompt(workflow, defs)
    assert set(prompt) == {"5", "10:31", "2"}  # the next id after the graph's last one
    assert prompt["10:31"]["inputs"]["samples"] == ["5", 0] and prompt["2"]["inputs"]["samples"] == ["10:31", 0]
    # legacy proxy widgets follow the renumbered node
    workflow["nodes"][1]["properties"] = {"proxyWidgets": [["5", "samples"], ["5", "flip_method"]]}
    workflow["nodes"][1]["widgets_values"] = [None, "x-axis: vertically"]
    assert editor_to_prompt(workflow, defs)["10:31"]["inputs"]["flip_method"] == "x-axis: vertically"


def test_definitions_nested_in_a_definition_are_found(defs) -> None:
    workflow = _nested_workflow()
    outer, inner = workflow["definitions"]["subgraphs"]
    outer["definitions"] = {"subgraphs": [inner]}
    workflow["definitions"]["subgraphs"] = [outer]
    assert set(editor_to_prompt(workflow, defs)) == {"1", "54:73", "54:62:174", "9"}
    assert unknown_types(workflow, defs) == []


def test_dynamic_combo_and_socketless_widgets() -> None:
    node_defs = {
        "Resize": {"input": {"required": {
            "image": ["IMAGE"],
            "mode": ["COMFY_DYNAMICCOMBO_V3", {"options": [
                {"key": "by size", "inputs": {"required": {"width": ["INT", {"default": 512}],
                                                           "height": ["INT", {"default": 512}]}}},
                {"key": "by factor", "inputs": {"required": {"factor": ["FLOAT", {"default": 1.0}]}}}]}],
            "method": [["nearest", "area"]]}},
            "input_order": {"required": ["image", "mode", "method"]}},
        "Color": {"input": {"required": {"color": ["COLOR", {"socketless": True, "default": "#000000"}],
                                         "view": ["IMAGECOMPARE", {"socketless": True}],
                                         "strength": ["FLOAT", {"default": 1.0}]}}},
    }
    from graph.editor_workflow import widget_inputs

    assert widget_inputs({"widgets_values": ["by factor", 2.5, "area"]}, node_defs["Resize"]) == {
        "mode": "by factor", "mode.factor": 2.5, "method": "area"}
    assert widget_inputs({"widgets_values": ["by size", 64, 32, "nearest"]}, node_defs["Resize"]) == {
        "mode": "by size", "mode.width": 64, "mode.height": 32, "method": "nearest"}
    # an older save (fewer values) shifts as the editor restores it, defaults for the rest
    assert widget_inputs({"widgets_values": ["by size", 64]}, node_defs["Resize"]) == {
        "mode": "by size", "mode.width": 64, "mode.height": 512, "method": "nearest"}
    assert widget_inputs({"widgets_values": ["#ffffff", {"before": "a"}, 0.5]}, node_defs["Color"]) == {
        "color": "#ffffff", "strength": 0.5}


@pytest.mark.parametrize("mangle", [
    lambda w: w["definitions"]["subgraphs"][0].update(nodes=7),
    lambda w: w["definitions"]["subgraphs"][0].update(inputs=[{"name": "samples", "linkIds": True}]),
    lambda w: w["nodes"][1].update(properties="x"),
    lambda w: w["nodes"][1].update(inputs=[{"name": ["x"], "link": 11}]),
    lambda w: w["definitions"]["subgraphs"][0]["links"].append(True),
])
def test_malformed_files_are_refused_cleanly(defs, mangle) -> None:
    workflow = _flip_workflow()
    mangle(workflow)
    try:
        unknown_types(workflow, defs)
        editor_to_prompt(workflow, defs)
    except EditorWorkflowError as exc:
        assert "malformed" in str(exc)


def _nested_proxy_workflow() -> dict:
    """The outer instance promotes the nested instance's input directly (legacy proxyWidgets),
    the nested instance first in the outer definition."""
    workflow = _nested_workflow()
    outer = workflow["definitions"]["subgraphs"][0]
    outer["inputs"] = outer["inputs"][:1]
    outer["links"] = [link for link in outer["links"] if link["id"] != 22]
    outer["nodes"][1]["inputs"][1]["link"] = None
    outer["nodes"] = [outer["nodes"][1], outer["nodes"][0], outer["nodes"][2]]
    host = workflow["nodes"][1]
    host["inputs"] = host["inputs"][:1]
    host["properties"] = {"proxyWidgets": [["62", "method"]]}
    host["widgets_values"] = ["x-axis: vertically"]
    return workflow


def test_proxy_widget_of_an_outer_instance_sets_a_nested_instances_input(defs) -> None:
    prompt = editor_to_prompt(_nested_proxy_workflow(), defs)
    assert prompt["54:62:174"]["inputs"] == {"flip_method": "x-axis: vertically", "samples": ["54:73", 0]}


def test_nested_dynamic_combo_widgets_are_sent_flat() -> None:
    """SaveImageAdvanced's `format` holds `save_mode` in its avif option: the saved values (as
    the editor wrote them, checked in tests/browser/test_editor_workflow_oracle.py) become the
    flat `format.save_mode.fps` the prompt carries; the other options' widgets are not sent."""
    from graph.editor_workflow import widget_inputs

    data = Path(__file__).resolve().parents[1] / "data" / "object_info_2026" / "SaveImageAdvanced.json"
    definition = json.loads(data.read_text())
    animated = ["shot", "avif", "auto", "sRGB", 30, "animated", 12.5, 3]
    assert widget_inputs({"widgets_values": animated}, definition) == {
        "filename_prefix": "shot", "format": "avif", "format.bit_depth": "auto",
        "format.input_color_space": "sRGB", "format.crf": 30, "format.save_mode": "animated",
        "format.save_mode.fps": 12.5, "format.save_mode.loop_count": 3}
    still = ["shot", "avif", "10-bit YUV420", "sRGB", 18, "still images"]
    assert widget_inputs({"widgets_values": still}, definition) == {
        "filename_prefix": "shot", "format": "avif", "format.bit_depth": "10-bit YUV420",
        "format.input_color_space": "sRGB", "format.crf": 18, "format.save_mode": "still images"}
    assert widget_inputs({"widgets_values": ["shot", "png", "16-bit", "sRGB"]}, definition) == {
        "filename_prefix": "shot", "format": "png", "format.bit_depth": "16-bit",
        "format.input_color_space": "sRGB"}
    # a file that names its widgets (some savers) expands the same way
    named = {"filename_prefix": "shot", "format": "avif", "format.save_mode": "animated", "format.save_mode.fps": 2.0}
    sent = widget_inputs({"widgets_values": named}, definition)
    assert sent["format.save_mode.fps"] == 2.0 and sent["format.save_mode.loop_count"] == 0
    assert sent["format.crf"] == 18

"""The editor's saved workflow becomes the prompt the editor would queue (graph.editor_workflow)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph.editor_workflow import EditorWorkflowError, editor_to_prompt, widget_inputs, widget_slots

DATA = Path(__file__).resolve().parents[1] / "data" / "comfyui_0.3.64_object_info.json"


@pytest.fixture(scope="module")
def defs() -> dict:
    return json.loads(DATA.read_text())


def _node(node_id, node_type, widgets=None, inputs=(), mode=0, title=None):  # noqa: ANN001, ANN202
    node = {"id": node_id, "type": node_type, "mode": mode, "inputs": [dict(i) for i in inputs]}
    if widgets is not None:
        node["widgets_values"] = widgets
    if title:
        node["title"] = title
    return node


def test_widget_slots_follow_input_order_with_the_editors_own_widgets(defs) -> None:
    names = [s.name for s in widget_slots(defs["KSampler"])]
    # seed is followed by its control_after_generate widget; sockets are not widgets
    assert names == ["seed", None, "steps", "cfg", "sampler_name", "scheduler", "denoise"]
    assert [s.name for s in widget_slots(defs["LoadImage"])] == ["image", None]
    assert [s.name for s in widget_slots(defs["KSamplerAdvanced"])][:3] == ["add_noise", "noise_seed", None]


def test_widget_values_map_to_names_and_editor_only_values_are_dropped(defs) -> None:
    ks = _node(3, "KSampler", [42, "randomize", 20, 7.5, "euler", "normal", 1.0])
    assert widget_inputs(ks, defs["KSampler"]) == {
        "seed": 42, "steps": 20, "cfg": 7.5, "sampler_name": "euler", "scheduler": "normal", "denoise": 1.0}
    # some saves leave the upload button's value out
    assert widget_inputs(_node(1, "LoadImage", ["a.png"]), defs["LoadImage"]) == {"image": "a.png"}
    assert widget_inputs(_node(1, "LoadImage", ["a.png", "image"]), defs["LoadImage"]) == {"image": "a.png"}
    assert widget_inputs(_node(1, "LoadImage", {"image": "b.png", "junk": 1}), defs["LoadImage"]) == {"image": "b.png"}


def _sd_workflow() -> dict:
    nodes = [
        _node(4, "CheckpointLoaderSimple", ["m.safetensors"]),
        _node(6, "CLIPTextEncode", ["a cat"], [{"name": "clip", "type": "CLIP", "link": 3}]),
        _node(10, "LoraLoader", ["l.safetensors", 1.0, 1.0],
              [{"name": "model", "type": "MODEL", "link": 1}, {"name": "clip", "type": "CLIP", "link": 2}], mode=4),
        _node(5, "EmptyLatentImage", [512, 512, 1]),
        _node(12, "PrimitiveNode", [77, "fixed"]),
        _node(3, "KSampler", [1, "randomize", 20, 8, "euler", "normal", 1],
              [{"name": "model", "type": "MODEL", "link": 4}, {"name": "positive", "type": "CONDITIONING", "link": 5},
               {"name": "negative", "type": "CONDITIONING", "link": 6},
               {"name": "latent_image", "type": "LATENT", "link": 7},
               {"name": "seed", "type": "INT", "widget": {"name": "seed"}, "link": 8}], title="Sampler"),
        _node(13, "VAEDecode", [], [{"name": "samples", "type": "LATENT", "link": 9},
                                    {"name": "vae", "type": "VAE", "link": 10}], mode=2),
        _node(14, "MarkdownNote", ["# hello"]),
    ]
    links = [[1, 4, 0, 10, 0, "MODEL"], [2, 4, 1, 10, 1, "CLIP"], [3, 10, 1, 6, 0, "CLIP"],
             [4, 10, 0, 3, 0, "MODEL"], [5, 6, 0, 3, 1, "CONDITIONING"], [6, 6, 0, 3, 2, "CONDITIONING"],
             [7, 5, 0, 3, 3, "LATENT"], [8, 12, 0, 3, 4, "INT"], [9, 3, 0, 13, 0, "LATENT"],
             [10, 4, 2, 13, 1, "VAE"]]
    return {"nodes": nodes, "links": links}


def test_prompt_follows_bypass_primitives_and_drops_muted_and_virtual_nodes(defs) -> None:
    prompt = editor_to_prompt(_sd_workflow(), defs)
    assert sorted(prompt) == ["3", "4", "5", "6"]  # LoRA bypassed, VAEDecode muted, notes virtual
    assert prompt["6"]["inputs"] == {"text": "a cat", "clip": ["4", 1]}  # through the bypassed LoRA, same type
    ks = prompt["3"]
    assert ks["inputs"]["model"] == ["4", 0]
    assert ks["inputs"]["seed"] == 77  # the primitive's value, not the widget's saved one
    assert ks["inputs"]["latent_image"] == ["5", 0]
    assert ks["class_type"] == "KSampler" and ks["_meta"] == {"title": "Sampler"}
    assert prompt["4"]["_meta"] == {"title": "Load Checkpoint"}


def test_list_values_are_wrapped_and_links_to_unsent_nodes_are_dropped(defs) -> None:
    workflow = {"nodes": [
        _node(1, "CheckpointLoaderSimple", ["m.safetensors"], mode=2),
        _node(2, "CLIPTextEncode", [["not", "a", "string"]], [{"name": "clip", "type": "CLIP", "link": 1}]),
    ], "links": [[1, 1, 1, 2, 0, "CLIP"]]}
    prompt = editor_to_prompt(workflow, defs)
    assert prompt == {"2": {"inputs": {"text": {"__value__": ["not", "a", "string"]}}, "class_type": "CLIPTextEncode",
                            "_meta": {"title": "CLIP Text Encode (Prompt)"}}}


def test_dict_links_and_unknown_types_and_subgraphs(defs) -> None:
    workflow = {"nodes": [_node(1, "EmptyLatentImage", [64, 64, 2]),
                          _node(2, "LatentFlip", ["y-axis"], [{"name": "samples", "type": "LATENT", "link": 5}])],
                "links": [{"id": 5, "origin_id": 1, "origin_slot": 0, "target_id": 2, "target_slot": 0, "type": "LATENT"}]}
    assert editor_to_prompt(workflow, defs)["2"]["inputs"] == {"flip_method": "y-axis", "samples": ["1", 0]}
    workflow["nodes"].append(_node(3, "NoSuchNode", []))
    with pytest.raises(EditorWorkflowError, match="NoSuchNode"):
        editor_to_prompt(workflow, defs)
    # subgraphs are flattened (tests/graph/test_editor_workflow_subgraphs.py); one that holds
    # an instance of itself is refused
    looped = {"id": "x", "nodes": [{"id": 1, "type": "x", "mode": 0}], "links": []}
    with pytest.raises(EditorWorkflowError, match="contains itself"):
        editor_to_prompt({"nodes": [{"id": 7, "type": "x", "mode": 0}], "links": [],
                          "definitions": {"subgraphs": [looped]}}, defs)


def test_widgets_without_saved_values_take_the_editors_defaults(defs) -> None:
    assert widget_inputs(_node(9, "SaveImage"), defs["SaveImage"]) == {"filename_prefix": "ComfyUI"}
    # a short list (an input added since the file was saved) keeps the default for the rest
    assert widget_inputs(_node(1, "EmptyLatentImage", [64]), defs["EmptyLatentImage"]) == {
        "width": 64, "height": 512, "batch_size": 1}
    assert widget_inputs(_node(1, "KSampler"), defs["KSampler"])["sampler_name"] == "euler"

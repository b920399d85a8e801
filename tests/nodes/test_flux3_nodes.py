"""CreateBoundingBoxes (ComfyUI's nodes_bounding_boxes.py) and Flux3LayoutPrompt: the editor's
boxes as prompt elements, pixel frames and a preview; upstream boxes replacing the canvas only
when they changed; the layout table appended to a FLUX 3 prompt; bad input as node errors; and
the FLUX 3 templates' wiring (editor widget values through a prompt, PreviewAny of the layout)."""
from __future__ import annotations

import json

import pytest
import torch

from nodes import flux3_nodes as f3
from nodes.errors import NodeInputError
from tests.nodes.workflow_2026 import Runner, node

# the box of the image_flux3_klein_image_edit template's canvas (896 x 1152)
DRESS = {"x": 128, "y": 192, "width": 736, "height": 896,
         "metadata": {"type": "obj", "text": "", "desc": "dress", "palette": []}}
TITLE = {"x": 0, "y": 0, "width": 448, "height": 115,
         "metadata": {"type": "text", "text": "SALE", "desc": "bold red letters",
                      "palette": ["#ff0000", "", "#00aa00"]}}


def _run(width=896, height=1152, editor_state=None, **kwargs):
    out = f3.create_bounding_boxes(width, height, editor_state=editor_state, **kwargs)
    return out["result"], out["ui"]


def test_editor_boxes_become_elements_frames_and_a_preview():
    (preview, frame, elements), ui = _run(editor_state=[DRESS, TITLE])
    assert elements == [
        {"type": "obj", "bbox": [167, 143, 944, 964], "desc": "dress"},
        {"type": "text", "bbox": [0, 0, 100, 500], "text": "SALE", "desc": "bold red letters",
         "color_palette": ["#FF0000", "#00AA00"]}]
    assert frame == [[{k: b[k] for k in ("x", "y", "width", "height")} for b in (DRESS, TITLE)]]
    assert preview.shape == (1, 1024, 796, 3)  # the long edge scaled to 1024
    assert ui == {"dims": [896, 1152]}
    # the grey canvas shows through where no box is, the first palette colour outlines the title
    assert preview[0, 600, 20].tolist() == pytest.approx([32 / 255] * 3)
    assert preview[0, 50, 398].tolist() == pytest.approx([1.0, 0.0, 0.0])


def test_no_boxes_give_empty_outputs():
    (preview, frame, elements), _ = _run(64, 64, editor_state=[])
    assert frame == [] and elements == [] and preview.shape == (1, 64, 64, 3)


def test_upstream_boxes_replace_the_canvas_only_when_they_changed():
    upstream = [[{"x": 10, "y": 20, "width": 30, "height": 40}]]  # a BOUNDING_BOX frame
    (_, frame, elements), ui = _run(100, 200, editor_state=[DRESS], bboxes=upstream)
    assert frame == upstream and elements == [{"type": "obj", "bbox": [100, 100, 300, 400], "desc": ""}]
    assert ui["input_bboxes"] == upstream[0]
    applied = [{"x": 10, "y": 20, "width": 30, "height": 40}]
    (_, frame, _), ui = _run(100, 200, editor_state=[DRESS], bboxes=upstream, last_incoming=applied)
    assert frame[0][0]["width"] == DRESS["width"]  # the canvas's edits are kept
    assert ui["input_bboxes"] == applied


def test_upstream_elements_and_json_strings_are_read():
    element = {"type": "text", "bbox": [100, 250, 300, 750], "text": "HI", "desc": "sign",
               "color_palette": ["#123456"]}
    for value in ([element], element, json.dumps([element])):
        (_, frame, elements), _ = _run(200, 100, bboxes=value)
        assert frame == [[{"x": 50, "y": 10, "width": 100, "height": 20}]]
        assert elements == [{"type": "text", "bbox": [100, 250, 300, 750], "text": "HI", "desc": "sign",
                             "color_palette": ["#123456"]}]
    for bad in ("{not json", [{"label": "no box"}], 3, [{"bbox": [1, 2, "x", 4]}]):
        with pytest.raises(NodeInputError, match="bboxes"):
            _run(200, 100, bboxes=bad)
    with pytest.raises(NodeInputError, match="width"):
        _run(32, 100)


def test_layout_prompt_appends_bfls_box_table():
    elements = [{"type": "obj", "bbox": [167, 143, 944, 964], "desc": "dress"},
                {"type": "text", "bbox": [0, 0, 100, 500], "text": "SALE", "desc": "bold red letters",
                 "color_palette": ["#FF0000"]}]
    (text,) = f3.flux3_layout_prompt("In <ref_image_0>, change the dress color <obj_1> to red", elements)
    assert text == ('In <ref_image_0>, change the dress color <obj_1> to red '
                    '[{"id":"obj_1","bbox":[167,143,944,964],"desc":"dress"},'
                    '{"id":"obj_2","bbox":[0,0,100,500],"desc":"\\"SALE\\" bold red letters"}]')
    assert f3.flux3_layout_prompt("a fox", []) == ("a fox",)
    assert f3.flux3_layout_prompt("", elements[:1])[0].startswith('[{"id":"obj_1"')
    for bad in ("not a list", [{"desc": "no bbox"}], [{"bbox": [1, 2, 3]}]):
        with pytest.raises(NodeInputError, match="element"):
            f3.flux3_layout_prompt("p", bad)


async def test_template_wiring_runs_headless(tmp_path):
    # the edit templates: the editor's boxes (sent as {"__value__": [...]}) and a background image,
    # the elements into Flux3LayoutPrompt, shown by PreviewAny
    runner = Runner(tmp_path)
    prompt = {"img": node("EmptyImage", width=96, height=64, batch_size=1, color=0x336699),
              "boxes": node("CreateBoundingBoxes", width=96, height=64, background=["img", 0],
                            editor_state={"__value__": [{"x": 24, "y": 16, "width": 48, "height": 32,
                                                         "metadata": {"type": "obj", "text": "", "desc": "cup",
                                                                      "palette": []}}]},
                            last_incoming={"__value__": []}),
              "layout": node("Flux3LayoutPrompt", prompt="a <obj_1> on a table", element=["boxes", 2]),
              "show": node("PreviewAny", source=["layout", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["show"]["text"] == ['a <obj_1> on a table [{"id":"obj_1","bbox":[250,250,750,750],'
                                              '"desc":"cup"}]']
    ui = out.ui_outputs["boxes"]
    assert ui["dims"] == [96, 64]
    (saved,) = ui["background_images"]
    assert saved["filename"].startswith(f3.BACKGROUND_PREFIX) and saved["type"] == "temp"
    assert (runner.env.temp_dir / saved["subfolder"] / saved["filename"]).is_file()


def test_preview_dims_the_background():
    background = torch.ones(1, 40, 60, 3)
    preview = f3.render_preview([], 60, 40, background)
    assert preview.shape == (1, 40, 60, 3)
    assert preview[0, 5, 5].tolist() == pytest.approx([64 / 255] * 3, abs=1 / 255)  # white at 25 %


def test_editor_workflow_sends_the_box_canvas_as_a_widget(tmp_path):
    # as the FLUX 3 templates save the node: widgets [width, height, editor_state, last_incoming]
    import tempfile

    from graph.editor_workflow import editor_to_prompt
    from graph.registry import Registry
    from nodes import register_builtin_nodes
    from nodes.environment import Environment

    registry = Registry()
    register_builtin_nodes(registry)
    defs = json.loads(json.dumps(registry.object_info(Environment.rooted_at(tempfile.mkdtemp()))))
    workflow = {"nodes": [
        {"id": 1, "type": "CreateBoundingBoxes", "mode": 0,
         "inputs": [{"name": "background", "type": "IMAGE", "link": None},
                    {"name": "bboxes", "type": "BOUNDING_BOX,ARRAY,STRING", "link": None}],
         "outputs": [{"name": "elements", "type": "ARRAY", "links": [1]}],
         "widgets_values": [896, 1152, [DRESS], []]},
        {"id": 2, "type": "Flux3LayoutPrompt", "mode": 0,
         "inputs": [{"name": "element", "type": "ARRAY", "link": 1}],
         "outputs": [{"name": "prompt", "type": "STRING", "links": [2]}], "widgets_values": ["a <obj_1>"]},
        {"id": 3, "type": "PreviewAny", "mode": 0, "inputs": [{"name": "source", "type": "*", "link": 2}],
         "outputs": [], "widgets_values": []}],
        "links": [[1, 1, 2, 2, 0, "ARRAY"], [2, 2, 0, 3, 0, "STRING"]]}
    prompt = editor_to_prompt(workflow, defs)
    assert prompt["1"]["inputs"] == {"width": 896, "height": 1152, "editor_state": {"__value__": [DRESS]},
                                     "last_incoming": {"__value__": []}}
    assert prompt["2"]["inputs"] == {"prompt": "a <obj_1>", "element": ["1", 2]}

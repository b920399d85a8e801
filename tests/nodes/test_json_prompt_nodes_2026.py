"""ConvertDictionaryToString and ConvertArrayToString (today's ComfyUI, comfy_extras/nodes_string.py)
and BuildJsonPromptIdeogram (comfy_extras/nodes_json_prompt.py): JSON text of DICT / ARRAY values and
Ideogram 4's caption dict, called with ComfyUI's parameter names and run in workflows as the editor
sends them (the style option's input as `style.photo`, the palette widget as `{"__value__": [...]}`)."""
from __future__ import annotations

import json

import pytest
import torch

from nodes.errors import NodeInputError
from nodes.json_prompt import build_json_prompt_ideogram
from nodes.string_format import convert_array_to_string, convert_dictionary_to_string
from tests.nodes.workflow_2026 import Runner, node

# -- Convert Dictionary / Array to String ----------------------------------------------------------

VALUE = {"a": [1, 2], "é": None, "t": True}


@pytest.mark.parametrize("indent, text", [
    (0, '{"a": [1, 2], "é": null, "t": true}'),  # one line, ", " and ": ", non-ASCII kept
    (2, '{\n  "a": [\n    1,\n    2\n  ],\n  "é": null,\n  "t": true\n}'),
    (1, '{\n "a": [\n  1,\n  2\n ],\n "é": null,\n "t": true\n}'),
])
def test_dictionary_as_json_text(indent, text):
    assert convert_dictionary_to_string(dictionary=VALUE, indent=indent) == (text,)


def test_array_as_json_text_and_the_default_indent():
    assert convert_array_to_string(array=["x", {"k": 1.5}], indent=0) == ('["x", {"k": 1.5}]',)
    assert convert_array_to_string(["日本"]) == ('[\n  "日本"\n]',)
    assert convert_array_to_string(array=[], indent=8) == ("[]",)


def test_what_json_cannot_hold_and_bad_indents_are_refused_by_name():
    with pytest.raises(NodeInputError, match="'array'"):
        convert_array_to_string([torch.zeros(2)], 2)
    with pytest.raises(NodeInputError, match="'dictionary'"):
        convert_dictionary_to_string({"s": {1, 2}}, 2)
    for bad in (9, -1, 2.0, True):
        with pytest.raises(NodeInputError, match="'indent'"):
            convert_dictionary_to_string({}, bad)


# -- Build JSON Prompt (Ideogram) ------------------------------------------------------------------

ELEMENTS = [{"type": "obj", "bbox": [100, 200, 500, 600], "desc": "a red kite"}]


def test_photo_caption_keys_and_order():
    (caption,) = build_json_prompt_ideogram(
        element=ELEMENTS, style={"style": "photo", "photo": "35mm, f/1.4"}, high_level_description="A kite.",
        background="blue sky", aesthetics="airy", lighting="noon sun", medium="photograph",
        color_palette=["#ff0000", "", "#00AA00", 7])
    assert caption == {
        "high_level_description": "A kite.",
        "style_description": {"aesthetics": "airy", "lighting": "noon sun", "photo": "35mm, f/1.4",
                              "medium": "photograph", "color_palette": ["#FF0000", "#00AA00"]},
        "compositional_deconstruction": {"background": "blue sky", "elements": ELEMENTS}}
    assert list(caption) == ["high_level_description", "style_description", "compositional_deconstruction"]
    assert list(caption["style_description"]) == ["aesthetics", "lighting", "photo", "medium", "color_palette"]
    assert caption["compositional_deconstruction"]["elements"] is ELEMENTS  # passed through as given


def test_art_style_caption_puts_medium_before_the_art_style_and_sends_blanks():
    (caption,) = build_json_prompt_ideogram(ELEMENTS, {"style": "art_style"}, color_palette={"0": "#abcdef"})
    assert caption == {
        "style_description": {"aesthetics": "", "lighting": "", "medium": "", "art_style": "",
                              "color_palette": ["#ABCDEF"]},
        "compositional_deconstruction": {"background": "", "elements": ELEMENTS}}
    assert list(caption["style_description"]) == ["aesthetics", "lighting", "medium", "art_style", "color_palette"]


def test_no_style_blank_overview_and_no_elements():
    (caption,) = build_json_prompt_ideogram("not a list", {"style": "none"}, high_level_description="  \n ",
                                            background="a field", aesthetics="ignored", color_palette=["#000000"])
    assert caption == {"compositional_deconstruction": {"background": "a field", "elements": []}}
    (caption,) = build_json_prompt_ideogram(ELEMENTS, {"style": "photo"}, color_palette=[])
    assert caption["style_description"] == {"aesthetics": "", "lighting": "", "photo": "", "medium": ""}


def test_non_text_fields_are_refused_by_name():
    with pytest.raises(NodeInputError, match="'background'"):
        build_json_prompt_ideogram(ELEMENTS, {"style": "none"}, background=3)
    with pytest.raises(NodeInputError, match="'style.photo'"):
        build_json_prompt_ideogram(ELEMENTS, {"style": "photo", "photo": None})
    with pytest.raises(NodeInputError, match="'color_palette'"):
        build_json_prompt_ideogram(ELEMENTS, {"style": "none"}, color_palette="#fff")


async def test_boxes_to_caption_to_text_in_a_workflow(tmp_path):
    runner = Runner(tmp_path)
    box = {"x": 24, "y": 16, "width": 48, "height": 32,
           "metadata": {"type": "obj", "text": "", "desc": "cup", "palette": ["#112233"]}}
    prompt = {"boxes": node("CreateBoundingBoxes", width=96, height=64, editor_state={"__value__": [box]},
                            last_incoming={"__value__": []}),
              "cap": node("BuildJsonPromptIdeogram", element=["boxes", 2], high_level_description="A cup.",
                          background="a table", style="photo", **{"style.photo": "50mm"}, aesthetics="calm",
                          lighting="soft", medium="photograph", color_palette={"__value__": ["#ffeedd", ""]}),
              "text": node("ConvertDictionaryToString", dictionary=["cap", 0], indent=0),
              "elements": node("ConvertArrayToString", array=["boxes", 2], indent=0),
              "show": node("PreviewAny", source=["text", 0]), "show2": node("PreviewAny", source=["elements", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    element = {"type": "obj", "bbox": [250, 250, 750, 750], "desc": "cup", "color_palette": ["#112233"]}
    assert out.ui_outputs["show2"]["text"] == [json.dumps([element])]
    (text,) = out.ui_outputs["show"]["text"]
    assert text == ('{"high_level_description": "A cup.", "style_description": {"aesthetics": "calm", '
                    '"lighting": "soft", "photo": "50mm", "medium": "photograph", "color_palette": ["#FFEEDD"]}, '
                    '"compositional_deconstruction": {"background": "a table", "elements": [' + json.dumps(element)
                    + ']}}')


async def test_validation_keeps_the_indent_in_range_and_the_style_among_its_options(tmp_path):
    runner = Runner(tmp_path)
    checked = await runner.validate({"t": node("ConvertArrayToString", array=["b", 2], indent=9),
                                     "b": node("CreateBoundingBoxes", width=64, height=64,
                                               editor_state={"__value__": []}),
                                     "o": node("PreviewAny", source=["t", 0])})
    # CreateBoundingBoxes is an output node of its own: it still runs, the rejected branch does not
    assert checked.outputs == ["b"]
    (error,) = checked.node_errors["t"]["errors"]
    assert error["type"] == "value_bigger_than_max" and error["extra_info"]["input_name"] == "indent"
    checked = await runner.validate({"c": node("BuildJsonPromptIdeogram", element=["b", 2], style="cartoon",
                                                    high_level_description="", background="", aesthetics="",
                                                    lighting="", medium=""),
                                     "b": node("CreateBoundingBoxes", width=64, height=64,
                                               editor_state={"__value__": []}),
                                     "t": node("ConvertDictionaryToString", dictionary=["c", 0], indent=2),
                                     "o": node("PreviewAny", source=["t", 0])})
    assert checked.outputs == ["b"]
    (error,) = checked.node_errors["c"]["errors"]
    assert error["type"] == "value_not_in_list" and error["extra_info"]["input_name"] == "style"

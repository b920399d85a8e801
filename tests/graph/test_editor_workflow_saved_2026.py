"""Saved workflows older than today's node schemas, restored as today's editor restores them
(frontend 1.58.1: `LGraphNode.configure` sets `widgets_values` by position over the node's widgets
as they stand, a dynamic combo's option widgets inserted right after it once its value is set;
widgets past the saved values keep their defaults). The same saves go through the editor itself in
tests/browser/test_editor_workflow_oracle.py, whose prompts equal these. The node definitions are
today's ComfyUI's records (tests/data/object_info_2026), which ours equal."""
from __future__ import annotations

import json
from pathlib import Path

from graph.editor_workflow import widget_inputs

RECORDS = Path(__file__).resolve().parents[1] / "data" / "object_info_2026"


def _record(name: str) -> dict:
    return json.loads((RECORDS / f"{name}.json").read_text(encoding="utf-8"))


# ResizeImageMaskNode as frontend 0.12.3 saved it (image_qwen_Image_2512_controlnet), before "scale total
# pixels" gained `multiple`; ContextWindowsManual / WanContextWindowsManual as 0.3.64's schemas saved them.
RESIZE_0123 = ["scale total pixels", 1.6, "area"]
CONTEXT_0364 = [21, 8, "standard_static", 1, False, "pyramid", 2]
WAN_CONTEXT_0364 = [81, 30, "standard_static", 1, False, "pyramid"]


def older_saves() -> dict[str, dict]:
    """The saves above as small editor workflows (the oracle loads them into the editor)."""
    def node(node_id: int, kind: str, values: list, inputs: list | None = None, outputs: list | None = None) -> dict:
        return {"id": node_id, "type": kind, "inputs": inputs or [], "outputs": outputs or [], "widgets_values": values}

    image = node(1, "EmptyImage", [64, 48, 1, 0], outputs=[{"name": "IMAGE", "type": "IMAGE", "links": [1]}])
    resize = node(2, "ResizeImageMaskNode", RESIZE_0123, [{"name": "input", "type": "IMAGE,MASK", "link": 1}],
                  [{"name": "resized", "type": "*", "links": [2]}])
    preview = node(3, "PreviewImage", [], [{"name": "images", "type": "IMAGE", "link": 2}])
    windows = [node(4, "ContextWindowsManual", CONTEXT_0364, [{"name": "model", "type": "MODEL", "link": None}],
                    [{"name": "MODEL", "type": "MODEL", "links": []}]),
               node(5, "WanContextWindowsManual", WAN_CONTEXT_0364, [{"name": "model", "type": "MODEL", "link": None}],
                    [{"name": "MODEL", "type": "MODEL", "links": []}])]
    return {"ResizeImageMaskNode saved at 0.12.3": {"nodes": [image, resize, preview],
                                                    "links": [[1, 1, 0, 2, 0, "IMAGE"], [2, 2, 0, 3, 0, "IMAGE"]]},
            "context windows saved at 0.3.64": {"nodes": [*windows, node(6, "PreviewImage", [])], "links": []}}


def test_a_dynamic_combo_saved_before_its_option_grew_shifts_as_the_editor_shifts_it():
    # The option's widgets are megapixels, multiple: the third saved value ('area', then scale_method) lands in
    # `multiple` and scale_method keeps its default; ComfyUI's validation then refuses int('area').
    assert widget_inputs({"widgets_values": RESIZE_0123}, _record("ResizeImageMaskNode")) == {
        "resize_type": "scale total pixels", "resize_type.megapixels": 1.6, "resize_type.multiple": "area",
        "scale_method": "area"}
    # saved today (four values) nothing shifts
    assert widget_inputs({"widgets_values": ["scale total pixels", 1.6, 16, "lanczos"]},
                         _record("ResizeImageMaskNode")) == {
        "resize_type": "scale total pixels", "resize_type.megapixels": 1.6, "resize_type.multiple": 16,
        "scale_method": "lanczos"}


def test_inputs_added_after_the_saved_ones_take_their_defaults():
    assert widget_inputs({"widgets_values": CONTEXT_0364}, _record("ContextWindowsManual")) == {
        "context_length": 21, "context_overlap": 8, "context_schedule": "standard_static", "context_stride": 1,
        "closed_loop": False, "fuse_method": "pyramid", "dim": 2, "freenoise": False, "cond_retain_index_list": "",
        "split_conds_to_windows": False, "latent_retain_index_list": "", "causal_window_fix": True}
    assert widget_inputs({"widgets_values": WAN_CONTEXT_0364}, _record("WanContextWindowsManual")) == {
        "context_length": 81, "context_overlap": 30, "context_schedule": "standard_static", "context_stride": 1,
        "closed_loop": False, "fuse_method": "pyramid", "freenoise": True, "retain_first_frame": False,
        "split_conds_to_windows": False}


def test_a_load_video_saved_before_its_edit_widget_keeps_the_default_edit():
    """Templates save LoadVideo as `[file, "image"]` (the upload button's value); today's LoadVideo has
    the VIDEO_EDIT widget `edit` after the button, which such a save leaves at its default (the
    editor restores by position over file, upload button, edit); a save without the button's value
    still gives the file."""
    record = _record("LoadVideo")
    default = record["input"]["optional"]["edit"][1]["default"]
    assert widget_inputs({"widgets_values": ["clip.mp4", "image"]}, record) == {"file": "clip.mp4", "edit": default}
    assert widget_inputs({"widgets_values": ["clip.mp4"]}, record) == {"file": "clip.mp4", "edit": default}
    edit = {"trim": {"start_time": 1.0, "duration": 2.0}, "crop": {"x": 0, "y": 0, "width": 0, "height": 0}}
    assert widget_inputs({"widgets_values": ["clip.mp4", "image", edit]}, record) == {"file": "clip.mp4", "edit": edit}

"""Packs import today's built-in nodes by ComfyUI's *class* name, which for nodes newer than
ComfyUI 0.3.64 often differs from the node id: `from comfy_extras.nodes_images import BoundingBox`
(node PrimitiveBoundingBox), `from comfy_extras.nodes_logic import NotNode` (ComfyNotNode),
`from comfy_extras.nodes_dataset import TextToUppercaseNode` (TextToUppercase). Those names are
recorded as "class" in compat/comfy_node_functions_2026.json (read from today's ComfyUI files at the
commits listed under its "sources") and `compat.node_facades.comfy_class_names` falls back to them
where compat/comfy_node_classes.json (0.3.64) has none."""
from __future__ import annotations

import importlib
import keyword

import torch


def test_bounding_box_by_its_comfyui_class_name(session):
    from comfy_extras import nodes_images
    from comfy_extras.nodes_images import BoundingBox

    assert BoundingBox is nodes_images.NODE_CLASS_MAPPINGS["PrimitiveBoundingBox"]
    assert BoundingBox is nodes_images.PrimitiveBoundingBox
    assert BoundingBox.define_schema().node_id == "PrimitiveBoundingBox"
    # behaviour of ComfyUI's BoundingBox.execute: the box as a dict
    assert BoundingBox.execute(x=1, y=2, width=3, height=4)[0] == {"x": 1, "y": 2, "width": 3, "height": 4}
    assert BoundingBox.execute(5, 6, 7, 8)[0] == {"x": 5, "y": 6, "width": 7, "height": 8}


def test_logic_nodes_by_their_comfyui_class_names(session):
    from comfy_extras import nodes_logic
    from comfy_extras.nodes_logic import AndNode, CustomComboNode, NotNode, OrNode, PassOrNoneNode, SwitchNode

    mappings = nodes_logic.NODE_CLASS_MAPPINGS
    assert NotNode is mappings["ComfyNotNode"] and AndNode is mappings["ComfyAndNode"]
    assert OrNode is mappings["ComfyOrNode"] and SwitchNode is mappings["ComfySwitchNode"]
    assert PassOrNoneNode is mappings["ComfyPassOrNoneNode"] and CustomComboNode is mappings["CustomCombo"]
    # behaviour of ComfyUI's comfy_extras/nodes_logic.py: Python truthiness
    assert NotNode.execute(value=0)[0] is True
    assert NotNode.execute("x")[0] is False
    assert AndNode.execute({"value0": 1, "value1": 0})[0] is False
    assert AndNode.execute({"value0": 1, "value1": "a"})[0] is True
    assert OrNode.execute({"value0": 0, "value1": "a"})[0] is True
    assert OrNode.execute({"value0": 0, "value1": ""})[0] is False
    assert SwitchNode.execute(True, on_true="a", on_false="b")[0] == "a"
    assert SwitchNode.execute(False, on_true="a", on_false="b")[0] == "b"
    assert tuple(PassOrNoneNode.execute(None, 5)) == (5, False)  # the default, and "is none" of the default
    assert tuple(PassOrNoneNode.execute(3, 5)) == (3, False)
    assert tuple(PassOrNoneNode.execute()) == (None, True)
    assert tuple(CustomComboNode.execute("x", 2)) == ("x", 2)


def test_dataset_nodes_by_their_comfyui_class_names(session):
    from comfy_extras import nodes_dataset
    from comfy_extras.nodes_dataset import AdjustBrightnessNode, AdjustContrastNode, TextToUppercaseNode

    assert TextToUppercaseNode is nodes_dataset.NODE_CLASS_MAPPINGS["TextToUppercase"]
    assert TextToUppercaseNode.define_schema().node_id == "TextToUppercase"
    assert AdjustBrightnessNode is nodes_dataset.NODE_CLASS_MAPPINGS["AdjustBrightness"]
    torch.manual_seed(0)
    images = torch.rand(2, 3, 4, 3)
    # ComfyUI's ImageProcessingNode.execute(images, **widgets): brightness scales and clamps,
    # contrast scales around mid-grey and clamps
    bright = AdjustBrightnessNode.execute(images, factor=1.5)[0]
    assert torch.allclose(bright, torch.minimum(images * 1.5, torch.ones_like(images)))
    contrast = AdjustContrastNode.execute(images, factor=2.0)[0]
    assert torch.allclose(contrast, torch.clamp((images - 0.5) * 2.0 + 0.5, 0.0, 1.0))


def test_math_and_video_nodes_whose_ids_are_not_their_class_names(session):
    from comfy_extras import nodes_math, nodes_video
    from comfy_extras.nodes_math import MathExpressionNode
    from comfy_extras.nodes_video import VideoSlice

    assert MathExpressionNode is nodes_math.NODE_CLASS_MAPPINGS["ComfyMathExpression"]
    assert tuple(MathExpressionNode.execute("a * b + 1", {"a": 2, "b": 3})) == (7.0, 7, True)
    assert VideoSlice is nodes_video.NODE_CLASS_MAPPINGS["Video Slice"]  # a node id with a space


def test_comfy_class_names_falls_back_to_todays_record():
    from compat.node_facades import comfy_class_names

    a, b, c, d = object(), object(), object(), object()
    # 0.3.64's record first (PrimitiveInt is Int, ImageBlend is Blend), then today's
    # (PrimitiveBoundingBox is BoundingBox); a class named as its node id adds nothing
    names = comfy_class_names({"PrimitiveInt": a, "ImageBlend": b, "PrimitiveBoundingBox": c, "ImageCropV2": d})
    assert names == {"Int": a, "Blend": b, "BoundingBox": c}


def test_every_recorded_class_is_a_name_its_module_exports(session):
    from compat.node_facades import comfy_node_classes, comfy_nodes_today
    from nodes import builtin_node_functions

    ours = {fn.__node_spec__.node_id for fn in builtin_node_functions()}
    old = comfy_node_classes()
    checked = 0
    for node_id, record in comfy_nodes_today().items():
        class_name = record.get("class")
        if class_name is None:
            continue
        assert class_name.isidentifier() and not keyword.iskeyword(class_name), node_id
        assert class_name != node_id and node_id not in old, node_id  # only where 0.3.64 has none
        if node_id not in ours:  # a node we do not have yet: no facade to export
            continue
        module = importlib.import_module(record["module"])
        assert getattr(module, class_name) is module.NODE_CLASS_MAPPINGS[node_id], node_id
        checked += 1
    assert checked >= 30

"""CLIPTextEncode, CLIPSetLastLayer, ConditioningCombine, ConditioningSetArea: ComfyUI's names,
inputs, outputs and semantics, called directly and through the executor."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families import encoder_set_for, encoder_sets
from comfy_core.text_encoders import ClipTokenizer, build_clip, detect_text_encoders
from graph.native import Input, Output, node, spec_of
from nodes.conditioning import (
    clip_set_last_layer,
    clip_text_encode,
    conditioning_combine,
    conditioning_set_area,
)
from nodes.errors import NodeInputError
from tests.fixtures.checkpoints import tiny_state_dict


class _Info:
    def __init__(self, t):
        self.shape, self.dtype = tuple(t.shape), "F32"


@pytest.fixture(scope="module")
def clips():
    tokenizer = ClipTokenizer.from_file()
    out = {}
    for family in ("sd1", "sdxl"):
        sd = tiny_state_dict(family)
        configs = detect_text_encoders({k: _Info(v) for k, v in sd.items()}, encoder_sets())
        out[family] = build_clip(configs, sd, clip_tokenizer=tokenizer, spec=encoder_set_for(configs))
    return out


def test_specs_match_comfyui():
    spec = spec_of(clip_text_encode)
    assert spec.node_id == "CLIPTextEncode" and spec.category == "conditioning"
    assert [(i.name, i.type) for i in spec.inputs] == [("text", "STRING"), ("clip", "CLIP")]
    assert spec.input("text").options["multiline"] and spec.input("text").options["dynamicPrompts"]
    assert [o.type for o in spec.outputs] == ["CONDITIONING"]
    spec = spec_of(clip_set_last_layer)
    layer = spec.input("stop_at_clip_layer")
    assert (layer.type, layer.options["default"], layer.options["min"], layer.options["max"]) == ("INT", -1, -24, -1)
    assert [o.type for o in spec.outputs] == ["CLIP"]
    spec = spec_of(conditioning_combine)
    assert [i.name for i in spec.inputs] == ["conditioning_1", "conditioning_2"]
    spec = spec_of(conditioning_set_area)
    assert [i.name for i in spec.inputs] == ["conditioning", "width", "height", "x", "y", "strength"]
    assert spec.input("width").options == {"default": 64, "min": 64, "max": 16384, "step": 8}
    assert spec.input("strength").options == {"default": 1.0, "min": 0.0, "max": 10.0, "step": 0.01}


def test_clip_text_encode(clips):
    (conditioning,) = clip_text_encode("a (photo:1.2) of a cat", clips["sdxl"])
    assert len(conditioning) == 1
    cond, options = conditioning[0]
    expected, pooled = clips["sdxl"].encode_from_tokens(clips["sdxl"].tokenize("a (photo:1.2) of a cat"),
                                                          return_pooled=True)
    torch.testing.assert_close(cond, expected)
    torch.testing.assert_close(options["pooled_output"], pooled)


def test_clip_text_encode_refuses_missing_clip():
    with pytest.raises(NodeInputError, match="no text encoder"):
        clip_text_encode("a cat", None)
    with pytest.raises(NodeInputError, match="CLIP object"):
        clip_text_encode("a cat", "not a clip")


def test_clip_set_last_layer_returns_a_clone(clips):
    clip = clips["sd1"]
    (skipped,) = clip_set_last_layer(clip, -2)
    assert skipped is not clip and skipped.layer_idx == -2 and clip.layer_idx is None
    a = clip_text_encode("a cat", clip)[0][0][0]
    b = clip_text_encode("a cat", skipped)[0][0][0]
    assert not torch.allclose(a, b)
    with pytest.raises(NodeInputError, match="stop_at_clip_layer"):
        clip_set_last_layer(clip, 0)


def _cond(value):
    return [[torch.full((1, 77, 8), float(value)), {"pooled_output": torch.zeros(1, 8)}]]


def test_conditioning_combine():
    a, b = _cond(1), _cond(2)
    (out,) = conditioning_combine(a, b)
    assert len(out) == 2 and out[0] is a[0] and out[1] is b[0]
    assert len(a) == 1 and len(b) == 1
    with pytest.raises(NodeInputError, match="conditioning_2"):
        conditioning_combine(a, "nope")


def test_conditioning_set_area():
    source = _cond(1)
    (out,) = conditioning_set_area(source, 132, 64, 20, 8, 0.5)
    cond, options = out[0]
    assert cond is source[0][0]
    assert options["area"] == (8, 16, 1, 2)  # (h // 8, w // 8, y // 8, x // 8)
    assert options["strength"] == 0.5 and options["set_area_to_bounds"] is False
    assert "area" not in source[0][1]  # the input is not mutated
    with pytest.raises(NodeInputError, match="entry 0"):
        conditioning_set_area([[1, 2]], 64, 64, 0, 0, 1.0)


async def test_nodes_through_the_executor(clips):
    from graph.executor import Executor
    from graph.registry import Registry

    captured = []

    @node("TestClipSource", inputs=[], outputs=[Output("CLIP")])
    def clip_source():
        return (clips["sd1"],)

    @node("TestCapture", inputs=[Input("conditioning", "CONDITIONING")], outputs=[], output_node=True)
    def capture(conditioning):
        captured.append(conditioning)
        return ()

    registry = Registry()
    for fn in (clip_source, capture, clip_text_encode, clip_set_last_layer, conditioning_combine,
               conditioning_set_area):
        registry.add_native(fn)
    prompt = {
        "1": {"class_type": "TestClipSource", "inputs": {}},
        "2": {"class_type": "CLIPSetLastLayer", "inputs": {"clip": ["1", 0], "stop_at_clip_layer": -2}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["2", 0]}},
        "4": {"class_type": "CLIPTextEncode", "inputs": {"text": "a dog", "clip": ["1", 0]}},
        "5": {"class_type": "ConditioningSetArea", "inputs": {"conditioning": ["4", 0], "width": 64, "height": 128,
                                                              "x": 0, "y": 64, "strength": 1.0}},
        "6": {"class_type": "ConditioningCombine", "inputs": {"conditioning_1": ["3", 0], "conditioning_2": ["5", 0]}},
        "7": {"class_type": "TestCapture", "inputs": {"conditioning": ["6", 0]}},
    }
    outcome = await Executor(registry).execute(prompt, "p1", outputs=["7"])
    assert outcome.status == "success", outcome.messages
    (conditioning,) = captured
    assert len(conditioning) == 2
    assert conditioning[1][1]["area"] == (16, 8, 8, 0) and "area" not in conditioning[0][1]
    skipped = clips["sd1"].clone()
    skipped.clip_layer(-2)
    torch.testing.assert_close(conditioning[0][0], skipped.encode("a cat"))
    assert clips["sd1"].layer_idx is None

"""ConditioningSetMask, ConditioningConcat, ConditioningAverage, ConditioningZeroOut,
ConditioningSetTimestepRange, ConditioningSetAreaPercentage, ConditioningSetAreaStrength:
ComfyUI's sockets and semantics, typed errors, the options the sampler resolves, and a workflow
using all of them validated and run through the executor on a tiny SD1 checkpoint."""
from __future__ import annotations

import shutil

import pytest
import torch

from comfy_core.sampling.conditioning import convert_cond, resolve_area_and_mask
from graph.executor import Executor
from graph.native import Input, Int, Output, node, spec_of
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.conditioning_ops import (
    conditioning_average,
    conditioning_concat,
    conditioning_set_area_percentage,
    conditioning_set_area_strength,
    conditioning_set_mask,
    conditioning_set_timestep_range,
    conditioning_zero_out,
)
from nodes.environment import Environment
from nodes.errors import NodeInputError

STRENGTH = {"default": 1.0, "min": 0.0, "max": 10.0, "step": 0.01}


def _cond(value: float, tokens: int = 77, width: int = 8, pooled: float | None = 0.0, **options) -> list:
    extra = {} if pooled is None else {"pooled_output": torch.full((1, width), float(pooled))}
    return [[torch.full((1, tokens, width), float(value)), {**extra, **options}]]


def _spec(fn) -> tuple:
    spec = spec_of(fn)
    return (spec.node_id, spec.category, spec.display_name, [(i.name, i.type) for i in spec.inputs],
            [o.type for o in spec.outputs])


def test_specs_match_comfyui():
    c = ("conditioning", "CONDITIONING")
    assert _spec(conditioning_set_mask) == (
        "ConditioningSetMask", "conditioning", "Conditioning (Set Mask)",
        [c, ("mask", "MASK"), ("strength", "FLOAT"), ("set_cond_area", ["default", "mask bounds"])], ["CONDITIONING"])
    assert spec_of(conditioning_set_mask).input("strength").options == STRENGTH
    assert spec_of(conditioning_set_mask).input("set_cond_area").options == {}  # first choice is the default
    pair = [("conditioning_to", "CONDITIONING"), ("conditioning_from", "CONDITIONING")]
    assert _spec(conditioning_concat) == ("ConditioningConcat", "conditioning", "Conditioning (Concat)", pair,
                                          ["CONDITIONING"])
    # ComfyUI's display-name key for it has a trailing space, so the frontend shows the node name.
    assert _spec(conditioning_average) == ("ConditioningAverage", "conditioning", "ConditioningAverage",
                                           pair + [("conditioning_to_strength", "FLOAT")], ["CONDITIONING"])
    assert spec_of(conditioning_average).input("conditioning_to_strength").options == {
        "default": 1.0, "min": 0.0, "max": 1.0, "step": 0.01}
    assert _spec(conditioning_zero_out) == ("ConditioningZeroOut", "advanced/conditioning", "ConditioningZeroOut",
                                            [c], ["CONDITIONING"])
    assert _spec(conditioning_set_timestep_range) == (
        "ConditioningSetTimestepRange", "advanced/conditioning", "ConditioningSetTimestepRange",
        [c, ("start", "FLOAT"), ("end", "FLOAT")], ["CONDITIONING"])
    spec = spec_of(conditioning_set_timestep_range)
    assert spec.input("start").options == {"default": 0.0, "min": 0.0, "max": 1.0, "step": 0.001}
    assert spec.input("end").options == {"default": 1.0, "min": 0.0, "max": 1.0, "step": 0.001}
    assert _spec(conditioning_set_area_percentage) == (
        "ConditioningSetAreaPercentage", "conditioning", "Conditioning (Set Area with Percentage)",
        [c, ("width", "FLOAT"), ("height", "FLOAT"), ("x", "FLOAT"), ("y", "FLOAT"), ("strength", "FLOAT")],
        ["CONDITIONING"])
    spec = spec_of(conditioning_set_area_percentage)
    assert spec.input("width").options == {"default": 1.0, "min": 0, "max": 1.0, "step": 0.01}
    assert spec.input("x").options == {"default": 0, "min": 0, "max": 1.0, "step": 0.01}
    assert spec.input("strength").options == STRENGTH
    assert _spec(conditioning_set_area_strength) == (
        "ConditioningSetAreaStrength", "conditioning", "ConditioningSetAreaStrength", [c, ("strength", "FLOAT")],
        ["CONDITIONING"])


def test_set_mask_options_and_mask_bounds():
    source = _cond(1.0) + _cond(2.0)
    mask = torch.zeros(64, 64)
    mask[8:24, 16:48] = 1.0
    (out,) = conditioning_set_mask(source, mask, "default", 0.7)
    assert len(out) == 2
    for (cond, options), (original, _) in zip(out, source):
        assert cond is original
        assert options["mask"].shape == (1, 64, 64) and torch.equal(options["mask"][0], mask)
        assert options["mask_strength"] == 0.7 and options["set_area_to_bounds"] is False
    assert "mask" not in source[0][1]  # the input is not mutated
    (out,) = conditioning_set_mask(source, mask.unsqueeze(0).repeat(2, 1, 1), "mask bounds", 1.0)
    assert out[0][1]["set_area_to_bounds"] is True and out[0][1]["mask"].shape == (2, 64, 64)
    # What the sampler makes of it on an 8x8 latent: the mask resized, the area its bounding box.
    entry = resolve_area_and_mask(convert_cond(out, "positive")[0], (8, 8), torch.device("cpu"))
    assert entry["mask"].shape == (2, 8, 8)
    assert entry["area"] == (8, 8, 1, 2)  # (h, w, y, x), at least 8x8 as ComfyUI


def test_set_mask_refuses_bad_inputs(in_node):
    with in_node("ConditioningSetMask", "12"), pytest.raises(NodeInputError) as info:
        conditioning_set_mask(_cond(1.0), torch.zeros(1, 1, 8, 8), "default", 1.0)
    assert str(info.value).startswith("ConditioningSetMask (node 12): input 'mask' expected a MASK")
    assert (info.value.node_type, info.value.node_id, info.value.input_name) == ("ConditioningSetMask", "12", "mask")
    with pytest.raises(NodeInputError, match="'set_cond_area'"):
        conditioning_set_mask(_cond(1.0), torch.zeros(8, 8), "bounds", 1.0)
    with pytest.raises(NodeInputError, match="'strength'"):
        conditioning_set_mask(_cond(1.0), torch.zeros(8, 8), "default", -0.5)
    with pytest.raises(NodeInputError, match="'conditioning'.*entry 0"):
        conditioning_set_mask([[torch.zeros(77, 8), {}]], torch.zeros(8, 8), "default", 1.0)


def test_packs_call_the_nodes_with_comfyuis_method_and_argument_order(comfy_nodes):
    nodes = comfy_nodes

    mask = torch.ones(8, 8)
    (out,) = nodes.ConditioningSetMask().append(_cond(1.0), mask, "mask bounds", 0.5)
    assert out[0][1]["set_area_to_bounds"] is True and out[0][1]["mask_strength"] == 0.5
    (out,) = nodes.ConditioningAverage().addWeighted(_cond(1.0), _cond(3.0), 0.5)
    assert (out[0][0] == 2.0).all()
    (out,) = nodes.ConditioningSetTimestepRange().set_range(_cond(1.0), 0.1, 0.9)
    assert (out[0][1]["start_percent"], out[0][1]["end_percent"]) == (0.1, 0.9)
    (out,) = nodes.ConditioningSetAreaPercentage().append(_cond(1.0), 0.5, 0.25, 0.0, 0.5, 1.0)
    assert out[0][1]["area"] == ("percentage", 0.25, 0.5, 0.5, 0.0)
    assert nodes.ConditioningZeroOut.FUNCTION == "zero_out" and nodes.ConditioningConcat.FUNCTION == "concat"


def test_area_percentage_is_resolved_against_the_latent():
    (out,) = conditioning_set_area_percentage(_cond(1.0), 0.5, 0.25, 0.5, 0.75, 2.0)
    options = out[0][1]
    assert options["area"] == ("percentage", 0.25, 0.5, 0.75, 0.5)  # (h, w, y, x), as ComfyUI
    assert options["strength"] == 2.0 and options["set_area_to_bounds"] is False
    entry = resolve_area_and_mask(convert_cond(out, "positive")[0], (16, 32), torch.device("cpu"))
    assert entry["area"] == (4, 16, 12, 16)
    with pytest.raises(NodeInputError, match="input 'x'"):
        conditioning_set_area_percentage(_cond(1.0), 0.5, 0.5, 1.5, 0.0, 1.0)


def test_area_strength_and_timestep_range_set_only_their_keys():
    source = _cond(1.0, area=(2, 2, 0, 0), strength=1.0)
    (out,) = conditioning_set_area_strength(source, 3.5)
    assert out[0][1]["strength"] == 3.5 and out[0][1]["area"] == (2, 2, 0, 0)
    assert source[0][1]["strength"] == 1.0
    (out,) = conditioning_set_timestep_range(source, 0.2, 0.8)
    assert (out[0][1]["start_percent"], out[0][1]["end_percent"]) == (0.2, 0.8)
    assert set(out[0][1]) == set(source[0][1]) | {"start_percent", "end_percent"}
    with pytest.raises(NodeInputError, match="input 'end'"):
        conditioning_set_timestep_range(source, 0.0, 1.5)
    with pytest.raises(NodeInputError, match="input 'conditioning'"):
        conditioning_set_area_strength("nope", 1.0)


def test_concat_appends_the_first_from_tokens():
    to = _cond(1.0, tokens=77, area=(1, 1, 0, 0)) + _cond(2.0, tokens=154)
    source = _cond(5.0, tokens=77, pooled=9.0) + _cond(7.0)
    (out,) = conditioning_concat(to, source)
    assert [c.shape for c, _ in out] == [(1, 154, 8), (1, 231, 8)]
    assert torch.equal(out[0][0][:, :77], to[0][0]) and (out[0][0][:, 77:] == 5.0).all()
    assert (out[1][0][:, 154:] == 5.0).all()  # only the first from entry is applied
    assert out[0][1] == to[0][1] and out[0][1] is not to[0][1]  # to's options (pooled too), copied
    with pytest.raises(NodeInputError, match="input 'conditioning_from' expected width 8"):
        conditioning_concat(to, _cond(1.0, width=16))
    with pytest.raises(NodeInputError, match="'conditioning_from' expected at least one"):
        conditioning_concat(to, [])


def test_average_blends_tokens_and_pooled_outputs():
    to = _cond(1.0, tokens=154, pooled=2.0)
    source = _cond(5.0, tokens=77, pooled=6.0)
    (out,) = conditioning_average(to, source, 0.25)
    cond, options = out[0]
    assert cond.shape == (1, 154, 8)
    torch.testing.assert_close(cond[:, :77], torch.full((1, 77, 8), 0.25 * 1.0 + 0.75 * 5.0))
    torch.testing.assert_close(cond[:, 77:], torch.full((1, 77, 8), 0.25 * 1.0))  # from padded with zeros
    torch.testing.assert_close(options["pooled_output"], torch.full((1, 8), 0.25 * 2.0 + 0.75 * 6.0))
    assert torch.equal(to[0][0], torch.full((1, 154, 8), 1.0))  # input untouched
    # A longer from is cut to to's tokens.
    (out,) = conditioning_average(_cond(1.0, tokens=77), _cond(3.0, tokens=154), 0.5)
    assert out[0][0].shape == (1, 77, 8) and (out[0][0] == 2.0).all()
    # to without a pooled output blends from's with itself (ComfyUI); from without one leaves to's.
    (out,) = conditioning_average(_cond(1.0, pooled=None), source, 0.5)
    torch.testing.assert_close(out[0][1]["pooled_output"], source[0][1]["pooled_output"])
    (out,) = conditioning_average(_cond(1.0, pooled=None, pooled_output=None), source, 0.5)
    assert out[0][1]["pooled_output"] is source[0][1]["pooled_output"]
    (out,) = conditioning_average(to, _cond(5.0, pooled=None), 0.5)
    assert out[0][1]["pooled_output"] is to[0][1]["pooled_output"]
    (out,) = conditioning_average(to, source, 1.0)
    assert torch.equal(out[0][0], to[0][0])
    with pytest.raises(NodeInputError, match="input 'conditioning_to_strength'"):
        conditioning_average(to, source, 1.5)
    with pytest.raises(NodeInputError, match="input 'conditioning_from' expected width"):
        conditioning_average(to, _cond(1.0, width=4), 0.5)


def test_zero_out_keeps_shapes_and_options():
    source = _cond(3.0, pooled=4.0, width_hint=512)
    (out,) = conditioning_zero_out(source)
    cond, options = out[0]
    assert cond.shape == (1, 77, 8) and not cond.any()
    assert options["pooled_output"].shape == (1, 8) and not options["pooled_output"].any()
    assert options["width_hint"] == 512
    assert (source[0][0] == 3.0).all() and (source[0][1]["pooled_output"] == 4.0).all()
    (out,) = conditioning_zero_out(_cond(3.0, pooled=None))
    assert "pooled_output" not in out[0][1]
    with pytest.raises(NodeInputError, match="input 'conditioning'"):
        conditioning_zero_out([torch.zeros(1, 77, 8)])


CAPTURED: dict[str, object] = {}


@node("TestHalfMask", inputs=[Int("size", default=64)], outputs=[Output("MASK")])
def half_mask(size):
    mask = torch.zeros(1, size, size)
    mask[:, :, : size // 2] = 1.0
    return (mask,)


@node("TestCaptureOps", inputs=[Input("samples", "LATENT"), Input("conditioning", "CONDITIONING")],
      output_node=True)
def capture(samples, conditioning):
    CAPTURED["samples"], CAPTURED["conditioning"] = samples["samples"], conditioning
    return {}


async def test_workflow_with_every_node_through_the_executor(tmp_path, tiny_sd1_ckpt):
    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    (tmp_path / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(half_mask)
    registry.add_native(capture)

    def text(t):
        return {"class_type": "CLIPTextEncode", "inputs": {"text": t, "clip": ["4", 1]}}

    prompt = {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
        "10": text("a lighthouse"), "11": text("a storm"), "12": text("oil painting"),
        "20": {"class_type": "TestHalfMask", "inputs": {"size": 64}},
        "21": {"class_type": "ConditioningSetMask", "inputs": {"conditioning": ["11", 0], "mask": ["20", 0],
                                                               "strength": 0.8, "set_cond_area": "mask bounds"}},
        "22": {"class_type": "ConditioningConcat", "inputs": {"conditioning_to": ["10", 0],
                                                              "conditioning_from": ["12", 0]}},
        "23": {"class_type": "ConditioningAverage", "inputs": {"conditioning_to": ["22", 0],
                                                               "conditioning_from": ["11", 0],
                                                               "conditioning_to_strength": 0.75}},
        "24": {"class_type": "ConditioningSetAreaPercentage",
               "inputs": {"conditioning": ["12", 0], "width": 0.5, "height": 1.0, "x": 0.5, "y": 0, "strength": 1.0}},
        "25": {"class_type": "ConditioningSetAreaStrength", "inputs": {"conditioning": ["24", 0], "strength": 0.5}},
        "26": {"class_type": "ConditioningSetTimestepRange", "inputs": {"conditioning": ["25", 0],
                                                                        "start": 0.0, "end": 0.5}},
        "27": {"class_type": "ConditioningCombine",
               "inputs": {"conditioning_1": ["23", 0], "conditioning_2": ["21", 0]}},
        "28": {"class_type": "ConditioningCombine",
               "inputs": {"conditioning_1": ["27", 0], "conditioning_2": ["26", 0]}},
        "29": {"class_type": "ConditioningZeroOut", "inputs": {"conditioning": ["10", 0]}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "3": {"class_type": "KSampler", "inputs": {"model": ["4", 0], "seed": 1, "steps": 2, "cfg": 5.0,
                                                   "sampler_name": "euler", "scheduler": "normal",
                                                   "positive": ["28", 0], "negative": ["29", 0],
                                                   "latent_image": ["5", 0], "denoise": 1.0}},
        "9": {"class_type": "TestCaptureOps", "inputs": {"samples": ["3", 0], "conditioning": ["28", 0]}},
    }
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    outcome = await Executor(registry, env=env).execute(prompt, "ops1", outputs=checked.outputs)
    assert outcome.status == "success", outcome.error
    samples = CAPTURED["samples"]
    assert samples.shape == (1, 4, 8, 8) and torch.isfinite(samples).all()
    averaged, masked, area = CAPTURED["conditioning"]
    assert averaged[0].shape == (1, 154, averaged[0].shape[2])  # concat doubled the tokens
    assert masked[1]["set_area_to_bounds"] is True and masked[1]["mask_strength"] == 0.8
    assert area[1]["area"] == ("percentage", 1.0, 0.5, 0, 0.5) and area[1]["strength"] == 0.5
    assert (area[1]["start_percent"], area[1]["end_percent"]) == (0.0, 0.5)

    bad = {**prompt, "26": {**prompt["26"], "inputs": {**prompt["26"]["inputs"], "end": 2.0}}}
    checked = await validate_prompt(bad, registry, env=env)
    assert not checked.ok and "26" in checked.node_errors

"""LatentUpscaleBy, LatentComposite, LatentBlend, LatentFromBatch, RepeatLatentBatch, LatentFlip,
LatentRotate, LatentCrop, SetLatentNoiseMask: ComfyUI's sockets and semantics (batch_index and
noise_mask carried as there), typed errors, and a workflow through the executor on a tiny SD1
checkpoint in which KSampler keeps the region a noise mask protects."""
from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from comfy_core.models.latent_resize import bislerp
from comfy_core.sampling.noise import prepare_noise
from graph.executor import Executor
from graph.native import Input, Output, String, node, spec_of
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.latent_ops import (
    latent_blend,
    latent_composite,
    latent_crop,
    latent_flip,
    latent_from_batch,
    latent_rotate,
    latent_upscale_by,
    repeat_latent_batch,
    set_latent_noise_mask,
)


def _spec(fn) -> tuple:
    spec = spec_of(fn)
    return (spec.node_id, spec.category, spec.display_name, [i.name for i in spec.inputs],
            [o.type for o in spec.outputs])


def _ramp(*shape: int) -> torch.Tensor:
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape)


def test_specs_match_comfyui():
    latent = ["LATENT"]
    assert _spec(latent_upscale_by) == ("LatentUpscaleBy", "latent", "Upscale Latent By",
                                        ["samples", "upscale_method", "scale_by"], latent)
    assert spec_of(latent_upscale_by).input("upscale_method").type == [
        "nearest-exact", "bilinear", "area", "bicubic", "bislerp"]
    assert spec_of(latent_upscale_by).input("scale_by").options == {"default": 1.5, "min": 0.01, "max": 8.0,
                                                                     "step": 0.01}
    assert _spec(latent_composite) == ("LatentComposite", "latent", "Latent Composite",
                                       ["samples_to", "samples_from", "x", "y", "feather"], latent)
    assert spec_of(latent_composite).input("feather").options == {"default": 0, "min": 0, "max": 16384, "step": 8}
    assert _spec(latent_blend) == ("LatentBlend", "_for_testing", "Latent Blend",
                                   ["samples1", "samples2", "blend_factor"], latent)
    assert spec_of(latent_blend).input("blend_factor").options == {"default": 0.5, "min": 0, "max": 1, "step": 0.01}
    assert _spec(latent_from_batch) == ("LatentFromBatch", "latent/batch", "Latent From Batch",
                                        ["samples", "batch_index", "length"], latent)
    assert spec_of(latent_from_batch).input("batch_index").options == {"default": 0, "min": 0, "max": 63}
    assert spec_of(latent_from_batch).input("length").options == {"default": 1, "min": 1, "max": 64}
    assert _spec(repeat_latent_batch) == ("RepeatLatentBatch", "latent/batch", "Repeat Latent Batch",
                                          ["samples", "amount"], latent)
    assert _spec(latent_flip) == ("LatentFlip", "latent/transform", "Flip Latent", ["samples", "flip_method"], latent)
    assert spec_of(latent_flip).input("flip_method").type == ["x-axis: vertically", "y-axis: horizontally"]
    assert _spec(latent_rotate) == ("LatentRotate", "latent/transform", "Rotate Latent", ["samples", "rotation"],
                                    latent)
    assert spec_of(latent_rotate).input("rotation").type == ["none", "90 degrees", "180 degrees", "270 degrees"]
    assert _spec(latent_crop) == ("LatentCrop", "latent/transform", "Crop Latent",
                                  ["samples", "width", "height", "x", "y"], latent)
    assert spec_of(latent_crop).input("width").options == {"default": 512, "min": 64, "max": 16384, "step": 8}
    assert _spec(set_latent_noise_mask) == ("SetLatentNoiseMask", "latent/inpaint", "Set Latent Noise Mask",
                                            ["samples", "mask"], latent)
    assert spec_of(set_latent_noise_mask).input("mask").type == "MASK"


def test_latent_upscale_by_rounds_each_side_and_keeps_the_other_keys():
    mask = torch.ones(1, 1, 40, 48)
    samples = {"samples": torch.randn(2, 4, 5, 6), "batch_index": [3, 4], "noise_mask": mask}
    (out,) = latent_upscale_by(samples, "bilinear", 1.5)
    # round(7.5) = 8 and round(9.0) = 9: Python's rounding, as ComfyUI.
    assert out["samples"].shape == (2, 4, 8, 9)
    assert torch.equal(out["samples"], F.interpolate(samples["samples"], size=(8, 9), mode="bilinear"))
    assert out["batch_index"] == [3, 4] and out["noise_mask"] is mask
    (out,) = latent_upscale_by(samples, "bislerp", 2.0)
    assert torch.equal(out["samples"], bislerp(samples["samples"], 12, 10))
    (out,) = latent_upscale_by(samples, "nearest-exact", 0.5)
    assert out["samples"].shape == (2, 4, 2, 3)
    assert samples["samples"].shape == (2, 4, 5, 6)  # the input is not changed


def test_latent_upscale_by_rejects_bad_input():
    with pytest.raises(NodeInputError, match="input 'upscale_method'"):
        latent_upscale_by({"samples": torch.zeros(1, 4, 4, 4)}, "lanczos", 2.0)
    with pytest.raises(NodeInputError, match="input 'scale_by'"):
        latent_upscale_by({"samples": torch.zeros(1, 4, 4, 4)}, "bilinear", 0.1)
    with pytest.raises(NodeInputError, match="input 'samples'"):
        latent_upscale_by(torch.zeros(1, 4, 4, 4), "bilinear", 2.0)


def test_latent_composite_pastes_at_pixel_offsets_and_cuts_at_the_edge():
    target = {"samples": torch.zeros(1, 4, 8, 8), "batch_index": [7]}
    source = {"samples": torch.ones(1, 4, 4, 4)}
    (out,) = latent_composite(target, source, 16, 8, 0)  # (2, 1) latent pixels
    expected = torch.zeros(1, 4, 8, 8)
    expected[:, :, 1:5, 2:6] = 1
    assert torch.equal(out["samples"], expected) and out["batch_index"] == [7]
    assert not target["samples"].any()  # the input is not changed
    (out,) = latent_composite(target, source, 48, 0, 0)  # only 2 columns fit
    assert out["samples"][0, 0, :4].sum() == 8 and out["samples"][0, 0, :4, 6:].eq(1).all()
    (out,) = latent_composite(target, source, 64, 0, 0)  # entirely outside: nothing pasted
    assert not out["samples"].any()
    (out,) = latent_composite({"samples": torch.zeros(3, 4, 8, 8)}, source, 0, 0, 0)  # one item onto each
    assert out["samples"][:, :, :4, :4].eq(1).all() and out["samples"].sum() == 3 * 4 * 16


def test_latent_composite_feathers_only_inner_edges():
    target = {"samples": torch.zeros(1, 4, 8, 8)}
    source = {"samples": torch.ones(1, 4, 4, 4)}
    # Inside on every side, feather 16 px = 2 latent pixels: ramps 1/2, 1 from each edge.
    (out,) = latent_composite(target, source, 16, 16, 16)
    ramp = torch.tensor([0.5, 1.0, 1.0, 0.5])
    assert torch.allclose(out["samples"][0, 0, 2:6, 2:6], ramp[:, None] * ramp[None, :])
    assert out["samples"][0, 0, 2:6, 2:6].sum() == pytest.approx(9.0)
    assert out["samples"][0, 0].sum() == pytest.approx(9.0)  # nothing outside the block
    # At the top-left corner the block's top and left edges lie on the border: they stay hard.
    (out,) = latent_composite(target, source, 0, 0, 16)
    hard = torch.tensor([1.0, 1.0, 1.0, 0.5])
    assert torch.allclose(out["samples"][0, 0, :4, :4], hard[:, None] * hard[None, :])
    # The feathered block blends with what is below it.
    (out,) = latent_composite({"samples": torch.full((1, 4, 8, 8), 2.0)}, source, 16, 16, 16)
    assert out["samples"][0, 0, 2, 2] == pytest.approx(0.25 * 1 + 0.75 * 2)


def test_latent_composite_rejects_mismatched_latents():
    with pytest.raises(NodeInputError, match="input 'samples_from'"):
        latent_composite({"samples": torch.zeros(1, 4, 8, 8)}, {"samples": torch.zeros(1, 16, 4, 4)}, 0, 0, 0)
    with pytest.raises(NodeInputError, match="input 'samples_from'"):
        latent_composite({"samples": torch.zeros(2, 4, 8, 8)}, {"samples": torch.zeros(3, 4, 4, 4)}, 0, 0, 0)
    with pytest.raises(NodeInputError, match="input 'samples_to'"):
        latent_composite({"latent": 1}, {"samples": torch.zeros(1, 4, 4, 4)}, 0, 0, 0)


def test_latent_blend_weights_and_resizes_the_second():
    first = {"samples": torch.full((1, 4, 8, 8), 2.0), "noise_mask": torch.ones(1, 1, 64, 64)}
    (out,) = latent_blend(first, {"samples": torch.zeros(1, 4, 8, 8)}, 0.25)
    assert torch.allclose(out["samples"], torch.full((1, 4, 8, 8), 0.5))
    assert out["noise_mask"] is first["noise_mask"]
    # A smaller second latent is resized to the first's size (bicubic, centre crop).
    (out,) = latent_blend(first, {"samples": torch.ones(1, 4, 4, 4)}, 0.5)
    assert out["samples"].shape == (1, 4, 8, 8) and torch.allclose(out["samples"], torch.full((1, 4, 8, 8), 1.5))
    # A wider one is centre-cropped to the first's aspect ratio before resizing.
    second = torch.zeros(1, 4, 8, 16)
    second[..., 4:12] = 1.0
    (out,) = latent_blend(first, {"samples": second}, 0.0)
    assert torch.allclose(out["samples"], torch.ones(1, 4, 8, 8))
    # One item blends into every item of the other batch.
    (out,) = latent_blend({"samples": torch.zeros(3, 4, 8, 8)}, {"samples": torch.ones(1, 4, 8, 8)}, 0.5)
    assert out["samples"].shape == (3, 4, 8, 8) and torch.allclose(out["samples"], torch.full((3, 4, 8, 8), 0.5))


def test_latent_blend_rejects_mismatched_latents():
    with pytest.raises(NodeInputError, match="input 'samples2'"):
        latent_blend({"samples": torch.zeros(1, 4, 8, 8)}, {"samples": torch.zeros(1, 16, 8, 8)}, 0.5)
    with pytest.raises(NodeInputError, match="input 'samples2'"):
        latent_blend({"samples": torch.zeros(2, 4, 8, 8)}, {"samples": torch.zeros(3, 4, 8, 8)}, 0.5)


def test_latent_from_batch_picks_items_and_their_noise_indices():
    samples = {"samples": _ramp(4, 1, 2, 2)}
    (out,) = latent_from_batch(samples, 1, 2)
    assert torch.equal(out["samples"], samples["samples"][1:3]) and out["batch_index"] == [1, 2]
    out["samples"].add_(100)
    assert samples["samples"].max() < 100  # a copy, not a view of the input
    (out,) = latent_from_batch(samples, 10, 5)  # clamped to the last item
    assert torch.equal(out["samples"], samples["samples"][3:]) and out["batch_index"] == [3]
    (out,) = latent_from_batch({**samples, "batch_index": [5, 6, 7, 8]}, 1, 2)
    assert out["batch_index"] == [6, 7]
    # Sampling the picked item draws the noise that item has in the indexed full batch.
    (picked,) = latent_from_batch(samples, 2, 1)
    assert torch.equal(prepare_noise(picked["samples"], 42, picked["batch_index"]),
                       prepare_noise(samples["samples"], 42, [0, 1, 2, 3])[2:3])


def test_batch_nodes_take_video_latents_on_their_batch_axis():
    video = {"samples": torch.randn(3, 16, 5, 2, 2)}  # [B, C, T, h, w]
    (picked,) = latent_from_batch(video, 1, 1)
    assert torch.equal(picked["samples"], video["samples"][1:2]) and picked["batch_index"] == [1]
    (repeated,) = repeat_latent_batch(video, 2)
    assert repeated["samples"].shape == (6, 16, 5, 2, 2)
    assert torch.equal(repeated["samples"][3:], video["samples"])


def test_latent_from_batch_cuts_the_noise_mask_with_the_batch():
    single = torch.rand(1, 1, 16, 16)
    (out,) = latent_from_batch({"samples": torch.zeros(4, 4, 2, 2), "noise_mask": single}, 2, 1)
    assert torch.equal(out["noise_mask"], single) and out["noise_mask"] is not single
    pair = torch.stack([torch.zeros(1, 16, 16), torch.ones(1, 16, 16)])  # [2, 1, 16, 16]
    # Two masks for four items are tiled (m0, m1, m0, m1) before cutting.
    (out,) = latent_from_batch({"samples": torch.zeros(4, 4, 2, 2), "noise_mask": pair}, 1, 2)
    assert torch.equal(out["noise_mask"], torch.stack([pair[1], pair[0]]))


def test_latent_from_batch_rejects_negative_index():
    with pytest.raises(NodeInputError, match="input 'batch_index'"):
        latent_from_batch({"samples": torch.zeros(2, 4, 2, 2)}, -1, 1)
    with pytest.raises(NodeInputError, match="input 'length'"):
        latent_from_batch({"samples": torch.zeros(2, 4, 2, 2)}, 0, 0)


def test_repeat_latent_batch_repeats_items_and_shifts_noise_indices():
    samples = {"samples": _ramp(2, 1, 2, 2)}
    (out,) = repeat_latent_batch(samples, 3)
    assert torch.equal(out["samples"], torch.cat([samples["samples"]] * 3)) and "batch_index" not in out
    assert repeat_latent_batch({**samples, "batch_index": [0, 1]}, 3)[0]["batch_index"] == [0, 1, 2, 3, 4, 5]
    assert repeat_latent_batch({"samples": _ramp(1, 1, 2, 2), "batch_index": [3]}, 3)[0]["batch_index"] == [3, 4, 5]
    assert repeat_latent_batch({**samples, "batch_index": [2, 5]}, 3)[0]["batch_index"] == [2, 5, 6, 9, 10, 13]
    # Every copy gets its own noise: the indices continue past the first copy's.
    (picked,) = latent_from_batch(repeat_latent_batch(samples, 3)[0], 4, 1)
    assert picked["batch_index"] == [4]


def test_repeat_latent_batch_noise_masks():
    single = torch.rand(1, 1, 16, 16)
    (out,) = repeat_latent_batch({"samples": torch.zeros(2, 4, 2, 2), "noise_mask": single}, 3)
    assert out["noise_mask"] is single  # one mask serves every item
    pair = torch.rand(2, 1, 16, 16)
    (out,) = repeat_latent_batch({"samples": torch.zeros(2, 4, 2, 2), "noise_mask": pair}, 3)
    assert torch.equal(out["noise_mask"], torch.cat([pair] * 3))
    with pytest.raises(NodeInputError, match="input 'amount'"):
        repeat_latent_batch({"samples": torch.zeros(2, 4, 2, 2)}, 0)


def test_latent_flip():
    samples = {"samples": _ramp(1, 2, 3, 4), "batch_index": [1]}
    (out,) = latent_flip(samples, "x-axis: vertically")
    assert torch.equal(out["samples"][:, :, 0], samples["samples"][:, :, 2]) and out["batch_index"] == [1]
    (out,) = latent_flip(samples, "y-axis: horizontally")
    assert torch.equal(out["samples"][..., 0], samples["samples"][..., 3])
    with pytest.raises(NodeInputError, match="input 'flip_method'"):
        latent_flip(samples, "diagonal")


def test_latent_rotate_turns_clockwise():
    samples = {"samples": torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])[None, None]}
    assert torch.equal(latent_rotate(samples, "none")[0]["samples"], samples["samples"])
    assert latent_rotate(samples, "90 degrees")[0]["samples"][0, 0].tolist() == [[4, 1], [5, 2], [6, 3]]
    assert latent_rotate(samples, "180 degrees")[0]["samples"][0, 0].tolist() == [[6, 5, 4], [3, 2, 1]]
    assert latent_rotate(samples, "270 degrees")[0]["samples"][0, 0].tolist() == [[3, 6], [2, 5], [1, 4]]
    with pytest.raises(NodeInputError, match="input 'rotation'"):
        latent_rotate(samples, "45 degrees")


def test_latent_crop_regions_and_the_minimum_size():
    samples = {"samples": _ramp(1, 4, 16, 16), "noise_mask": torch.ones(1, 1, 128, 128)}
    (out,) = latent_crop(samples, 64, 64, 16, 8)
    assert torch.equal(out["samples"], samples["samples"][:, :, 1:9, 2:10])
    assert out["noise_mask"] is samples["noise_mask"]  # carried unchanged, as ComfyUI
    # The origin moves back so that 8 latent pixels (64 px) remain after it.
    (out,) = latent_crop(samples, 64, 64, 120, 0)
    assert torch.equal(out["samples"], samples["samples"][:, :, 0:8, 8:16])
    (out,) = latent_crop(samples, 128, 64, 64, 0)  # cut at the right edge
    assert out["samples"].shape == (1, 4, 8, 8)
    (out,) = latent_crop({"samples": _ramp(1, 4, 4, 4)}, 64, 64, 0, 0)  # under 64 px: the whole latent
    assert out["samples"].shape == (1, 4, 4, 4)


def test_set_latent_noise_mask_shapes_and_keys():
    samples = {"samples": torch.zeros(2, 4, 8, 8), "batch_index": [0, 1]}
    (out,) = set_latent_noise_mask(samples, torch.ones(64, 64))
    assert out["noise_mask"].shape == (1, 1, 64, 64) and out["batch_index"] == [0, 1]
    assert "noise_mask" not in samples  # the input dict is not changed
    (out,) = set_latent_noise_mask(samples, torch.rand(2, 32, 48))
    assert out["noise_mask"].shape == (2, 1, 32, 48)
    (out,) = set_latent_noise_mask({"samples": torch.zeros(1, 16, 1, 8, 8)}, torch.ones(64, 64))  # Qwen-Image's 5-D
    assert out["noise_mask"].shape == (1, 1, 64, 64)
    with pytest.raises(NodeInputError, match="input 'mask'"):
        set_latent_noise_mask(samples, torch.ones(64))
    with pytest.raises(NodeInputError, match="input 'mask'"):
        set_latent_noise_mask(samples, "mask")


# --- a workflow through the executor --------------------------------------------------------

CAPTURED: dict[str, object] = {}


@node("TestCaptureLatentOps", inputs=[Input("value", "*"), String("tag")], output_node=True)
def capture(value, tag):
    CAPTURED[tag] = value
    return {"ui": {"tag": [tag]}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_sd1_ckpt):
    root = tmp_path_factory.mktemp("latent_ops")
    env = Environment.rooted_at(root)
    env.ensure_dirs()
    (root / "models" / "checkpoints").mkdir(parents=True)
    shutil.copyfile(tiny_sd1_ckpt, root / "models" / "checkpoints" / "tiny.safetensors")
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(capture)
    return env, registry


def outpaint_workflow() -> dict:
    """Pad a 64 px square on the right, encode it, mask the padding, pick item 1 of a repeated
    batch and sample: only the right half may change."""
    return {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a lighthouse", "clip": ["1", 1]}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["1", 1]}},
        "4": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0x336699}},
        "5": {"class_type": "ImagePadForOutpaint", "inputs": {"image": ["4", 0], "left": 0, "top": 0, "right": 64,
                                                               "bottom": 0, "feathering": 0}},
        "6": {"class_type": "VAEEncode", "inputs": {"pixels": ["5", 0], "vae": ["1", 2]}},
        "7": {"class_type": "SetLatentNoiseMask", "inputs": {"samples": ["6", 0], "mask": ["5", 1]}},
        "8": {"class_type": "RepeatLatentBatch", "inputs": {"samples": ["7", 0], "amount": 2}},
        "9": {"class_type": "LatentFromBatch", "inputs": {"samples": ["8", 0], "batch_index": 1, "length": 1}},
        "10": {"class_type": "KSampler", "inputs": {"model": ["1", 0], "seed": 3, "steps": 2, "cfg": 5.0,
                                                    "sampler_name": "euler", "scheduler": "normal",
                                                    "positive": ["2", 0], "negative": ["3", 0],
                                                    "latent_image": ["9", 0], "denoise": 1.0}},
        "11": {"class_type": "LatentFlip", "inputs": {"samples": ["10", 0], "flip_method": "y-axis: horizontally"}},
        "12": {"class_type": "VAEDecode", "inputs": {"samples": ["10", 0], "vae": ["1", 2]}},
        "13": {"class_type": "ImageInvert", "inputs": {"image": ["12", 0]}},
        "14": {"class_type": "ImageScaleBy", "inputs": {"image": ["13", 0], "upscale_method": "bilinear",
                                                        "scale_by": 0.5}},
        "20": {"class_type": "TestCaptureLatentOps", "inputs": {"value": ["6", 0], "tag": "encoded"}},
        "21": {"class_type": "TestCaptureLatentOps", "inputs": {"value": ["10", 0], "tag": "sampled"}},
        "22": {"class_type": "TestCaptureLatentOps", "inputs": {"value": ["11", 0], "tag": "flipped"}},
        "23": {"class_type": "TestCaptureLatentOps", "inputs": {"value": ["12", 0], "tag": "decoded"}},
        "24": {"class_type": "TestCaptureLatentOps", "inputs": {"value": ["14", 0], "tag": "final"}},
    }


async def test_outpaint_workflow_keeps_the_masked_region(setup):
    env, registry = setup
    prompt = outpaint_workflow()
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    out = await Executor(registry, env=env).execute(prompt, "latent-ops", outputs=checked.outputs)
    assert out.status == "success", out.error

    encoded, sampled = CAPTURED["encoded"]["samples"], CAPTURED["sampled"]
    assert sampled["samples"].shape == (1, 4, 8, 16) and sampled["batch_index"] == [1]
    assert sampled["noise_mask"].shape == (1, 1, 64, 128)
    # The mask is 0 over the original 64 px (latent columns 0..7): KSampler kept them.
    assert torch.allclose(sampled["samples"][..., :8], encoded[..., :8], atol=1e-4)
    assert not torch.allclose(sampled["samples"][..., 8:], encoded[..., 8:], atol=1e-2)
    assert torch.equal(CAPTURED["flipped"]["samples"], sampled["samples"].flip(3))
    decoded, final = CAPTURED["decoded"], CAPTURED["final"]
    assert decoded.shape == (1, 64, 128, 3) and final.shape == (1, 32, 64, 3)
    expected = F.interpolate((1.0 - decoded).movedim(-1, 1), size=(32, 64), mode="bilinear").movedim(1, -1)
    assert torch.allclose(final, expected)

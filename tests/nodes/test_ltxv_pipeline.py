"""LTX-Video end to end on tiny files through the executor: UNETLoader + CLIPLoader type "ltxv" +
VAELoader (and CheckpointLoaderSimple on the single file), EmptyLTXVLatentVideo, LTXVConditioning,
a 2-step KSampler of a 9-frame 64 px video, VAEDecode; image-to-video with LTXVImgToVideo and
LTXVScheduler through SamplerCustom; and the T5 conditioning carrying its token mask."""
from __future__ import annotations

import pytest
import torch

from graph.executor import Executor
from graph.native import Input, String, node
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment
from tests.fixtures.ltxv_files import write_ltxv_files

CAPTURED: dict[str, object] = {}


@node("TestLTXVCapture", category="testing", output_node=True,
      inputs=[Input("value", "*"), String("key", default="out")], outputs=[])
def capture(value, key: str) -> tuple:
    CAPTURED[key] = value
    return ()


def _text(clip, text):
    return {"class_type": "CLIPTextEncode", "inputs": {"clip": clip, "text": text}}


def _t2v(loaders: dict) -> dict:
    prompt = dict(loaders)
    prompt.update({
        "p": _text(["clip", 0], "a red fox running"), "n": _text(["clip", 0], ""),
        "lc": {"class_type": "LTXVConditioning", "inputs": {"positive": ["p", 0], "negative": ["n", 0],
                                                             "frame_rate": 24.0}},
        "l": {"class_type": "EmptyLTXVLatentVideo", "inputs": {"width": 64, "height": 64, "length": 9,
                                                               "batch_size": 1}},
        "k": {"class_type": "KSampler", "inputs": {
            "model": ["model", 0], "seed": 3, "steps": 2, "cfg": 3.0, "sampler_name": "euler", "scheduler": "simple",
            "positive": ["lc", 0], "negative": ["lc", 1], "latent_image": ["l", 0], "denoise": 1.0}},
        "d": {"class_type": "VAEDecode", "inputs": {"samples": ["k", 0], "vae": ["vae", 0]}},
        "o": {"class_type": "TestLTXVCapture", "inputs": {"value": ["d", 0], "key": "frames"}},
        "oc": {"class_type": "TestLTXVCapture", "inputs": {"value": ["lc", 0], "key": "positive"}},
    })
    return prompt


async def _run(tmp_path, prompt):
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(capture)
    env = Environment.rooted_at(tmp_path, dtype_policy={"text": "fp32"})
    env.ensure_dirs()
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    outcome = await Executor(registry, env=env).execute(prompt, "p", outputs=checked.outputs)
    assert outcome.status == "success", outcome.messages
    return outcome


@pytest.fixture()
def files(tmp_path):
    return write_ltxv_files(tmp_path / "models")


async def test_split_files_text_to_video(tmp_path, files):
    loaders = {
        "model": {"class_type": "UNETLoader", "inputs": {"unet_name": files["unet"].name, "weight_dtype": "default"}},
        "clip": {"class_type": "CLIPLoader", "inputs": {"clip_name": files["t5xxl"].name, "type": "ltxv",
                                                        "device": "default"}},
        "vae": {"class_type": "VAELoader", "inputs": {"vae_name": files["vae"].name}},
    }
    CAPTURED.clear()
    await _run(tmp_path, _t2v(loaders))
    frames = CAPTURED["frames"]
    assert frames.shape == (9, 64, 64, 3)
    assert torch.isfinite(frames).all() and 0.0 <= float(frames.min()) and float(frames.max()) <= 1.0
    cond, options = CAPTURED["positive"][0]
    assert options["frame_rate"] == 24.0
    assert cond.shape[-1] == 64 and cond.shape[1] >= 128  # T5 padded to ComfyUI's LTXV minimum of 128 tokens
    mask = options["attention_mask"]
    assert mask.shape == (1, cond.shape[1]) and int(mask.sum()) < cond.shape[1]  # pads masked


async def test_single_file_image_to_video_with_ltxv_scheduler(tmp_path, files):
    loaders = {"ckpt": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": files["single"].name}}}
    prompt = dict(loaders)
    prompt.update({
        "p": _text(["ckpt", 1], "a boat"), "n": _text(["ckpt", 1], "blurry"),
        "img": {"class_type": "EmptyImage", "inputs": {"width": 80, "height": 48, "batch_size": 1, "color": 0x3366CC}},
        "i2v": {"class_type": "LTXVImgToVideo", "inputs": {
            "positive": ["p", 0], "negative": ["n", 0], "vae": ["ckpt", 2], "image": ["img", 0], "width": 64,
            "height": 64, "length": 9, "batch_size": 1, "strength": 1.0}},
        "lc": {"class_type": "LTXVConditioning", "inputs": {"positive": ["i2v", 0], "negative": ["i2v", 1],
                                                             "frame_rate": 25.0}},
        "sched": {"class_type": "LTXVScheduler", "inputs": {"steps": 2, "max_shift": 2.05, "base_shift": 0.95,
                                                            "stretch": True, "terminal": 0.1, "latent": ["i2v", 2]}},
        "sel": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "s": {"class_type": "SamplerCustom", "inputs": {
            "model": ["ckpt", 0], "add_noise": True, "noise_seed": 1, "cfg": 3.0, "positive": ["lc", 0],
            "negative": ["lc", 1], "sampler": ["sel", 0], "sigmas": ["sched", 0], "latent_image": ["i2v", 2]}},
        "o": {"class_type": "TestLTXVCapture", "inputs": {"value": ["s", 0], "key": "latent"}},
        "oi": {"class_type": "TestLTXVCapture", "inputs": {"value": ["i2v", 2], "key": "start"}},
    })
    CAPTURED.clear()
    await _run(tmp_path, prompt)
    out, start = CAPTURED["latent"]["samples"], CAPTURED["start"]
    assert out.shape == (1, 128, 2, 2, 2)
    # the first latent frame is the image's, kept by the noise mask (strength 1: mask 0 there)
    assert torch.allclose(out[:, :, :1], start["samples"][:, :, :1], atol=1e-5)
    assert not torch.allclose(out[:, :, 1:], start["samples"][:, :, 1:], atol=1e-3)


async def test_spatio_temporal_guidance_changes_the_sample_only_with_a_scale(tmp_path, files):
    base = {
        "model": {"class_type": "UNETLoader", "inputs": {"unet_name": files["unet"].name, "weight_dtype": "default"}},
        "clip": {"class_type": "CLIPLoader", "inputs": {"clip_name": files["t5xxl"].name, "type": "ltxv",
                                                        "device": "default"}},
        "vae": {"class_type": "VAELoader", "inputs": {"vae_name": files["vae"].name}},
    }
    results = {}
    for key, scale in (("plain", None), ("stg", 1.0), ("zero", 0.0)):
        prompt = _t2v(base)
        if scale is not None:
            prompt["stg"] = {"class_type": "LTXVSpatioTemporalGuidance", "inputs": {
                "model": ["model", 0], "scale": scale, "blocks": "1", "start_percent": 0.0, "end_percent": 1.0}}
            prompt["k"]["inputs"]["model"] = ["stg", 0]
        prompt["o"] = {"class_type": "TestLTXVCapture", "inputs": {"value": ["k", 0], "key": key}}
        del prompt["d"], prompt["oc"]
        CAPTURED.clear()
        await _run(tmp_path, prompt)
        results[key] = CAPTURED[key]["samples"]
    assert torch.equal(results["plain"], results["zero"])
    assert not torch.allclose(results["plain"], results["stg"], atol=1e-4)


def test_template_file_kinds():
    from tests.fixtures.template_models_ltxv import file_kind_ltxv

    assert file_kind_ltxv("checkpoints", "ltx-video-2b-v0.9.safetensors") == "ltxv_checkpoint_090"
    assert file_kind_ltxv("checkpoints", "ltx-video-2b-v0.9.5.safetensors") == "ltxv_checkpoint"
    assert file_kind_ltxv("text_encoders", "t5xxl_fp16.safetensors") is None

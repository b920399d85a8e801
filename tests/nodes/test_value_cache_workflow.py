"""Patcher signatures feed the executor's cache keys, end to end on a tiny SD1 checkpoint: a LoRA
change that leaves the MODEL's patch set equal (strength 0, or only the CLIP strength changed)
does not sample again, and a change of the patch set does."""
from __future__ import annotations

import shutil
from collections import Counter

import pytest
import torch

from comfy_core.loading import load_checkpoint
from graph.executor import Executor
from graph.native import Hidden, Input, node
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment
from tests.fixtures.loras import write_unet_lora

CAPTURED: dict[int, torch.Tensor] = {}


@node("TestCaptureImage", inputs=[Input("images", "IMAGE"), Input("tag", "INT"), Hidden("prompt", "PROMPT")],
      output_node=True)
def capture_image(images, tag, prompt):
    # Reads the prompt, as SaveImage does: runs whenever its structural key changes.
    CAPTURED[tag] = images
    return {"ui": {"tag": [tag]}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_sd1_ckpt):
    root = tmp_path_factory.mktemp("value_cache")
    env = Environment.rooted_at(root)
    env.ensure_dirs()
    (root / "models" / "checkpoints").mkdir(parents=True)
    shutil.copyfile(tiny_sd1_ckpt, root / "models" / "checkpoints" / "tiny.safetensors")
    (root / "models" / "loras").mkdir(parents=True)
    model, _, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False, output_clip=False)
    write_unet_lora(root / "models" / "loras" / "a.safetensors", model, seed=1)
    write_unet_lora(root / "models" / "loras" / "b.safetensors", model, seed=2)
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(capture_image)
    return env, registry


def workflow(tag: int, lora: str, strength_model: float, strength_clip: float) -> dict:
    return {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
        "10": {"class_type": "LoraLoader", "inputs": {"model": ["4", 0], "clip": ["4", 1], "lora_name": lora,
                                                      "strength_model": strength_model,
                                                      "strength_clip": strength_clip}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a lighthouse", "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "3": {"class_type": "KSampler", "inputs": {"model": ["10", 0], "seed": 1, "steps": 2, "cfg": 5.0,
                                                   "sampler_name": "euler", "scheduler": "normal",
                                                   "positive": ["6", 0], "negative": ["7", 0],
                                                   "latent_image": ["5", 0], "denoise": 1.0}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "9": {"class_type": "TestCaptureImage", "inputs": {"images": ["8", 0], "tag": tag}},
    }


async def test_lora_changes_that_keep_the_model_equal_do_not_sample_again(setup):
    env, registry = setup
    calls: Counter = Counter()
    executor = Executor(registry, env=env, before_node_call=[lambda n, _i, _g: calls.update([n])])

    async def run(tag: int, *args) -> Counter:
        calls.clear()
        prompt = workflow(tag, *args)
        checked = await validate_prompt(prompt, registry, env=env)
        assert checked.ok, checked.node_errors
        out = await executor.execute(prompt, f"p{tag}", outputs=checked.outputs)
        assert out.status == "success", out.error
        return Counter(calls)

    assert set(await run(1, "a.safetensors", 0.0, 0.0)) == {"4", "10", "6", "7", "5", "3", "8", "9"}
    # Strength 0: LoraLoader hands its input through, whatever the file; nothing is sampled again.
    assert set(await run(2, "b.safetensors", 0.0, 0.0)) == {"10", "9"}
    assert torch.equal(CAPTURED[2], CAPTURED[1])
    # A real patch: the MODEL's signature changed, so KSampler and VAEDecode run.
    assert set(await run(3, "a.safetensors", 1.0, 0.0)) == {"10", "3", "8", "9"}
    assert not torch.equal(CAPTURED[3], CAPTURED[1])
    # Only the CLIP strength changed: the file is read again, the MODEL's patch set is equal.
    assert set(await run(4, "a.safetensors", 1.0, 0.5)) == {"10", "9"}
    assert torch.equal(CAPTURED[4], CAPTURED[3])
    # Another file at the same strength is another patch set.
    assert set(await run(5, "b.safetensors", 1.0, 0.5)) == {"10", "3", "8", "9"}
    assert not torch.equal(CAPTURED[5], CAPTURED[3])

"""LatentOperationTonemapReinhard, LatentOperationSharpen, LatentApplyOperation,
LatentApplyOperationCFG: the operations against float64 numpy references of ComfyUI's formulas,
the pre-CFG hook's arithmetic and cache identity, and a sampling run on a tiny SD1 checkpoint
in which the hook takes part."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from torch import nn

from comfy_core.latent.operations import OperationOnCFG
from comfy_core.patching.model import ModelPatcher
from graph.executor import Executor
from graph.native import Input, String, node
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.latent_operations import (
    latent_apply_operation,
    latent_apply_operation_cfg,
    latent_operation_sharpen,
    latent_operation_tonemap_reinhard,
)


def _latent(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _tonemap_reference(latent: np.ndarray, multiplier: float) -> np.ndarray:
    length = np.linalg.norm(latent, axis=1, keepdims=True) + 1e-10
    direction = latent / length
    flat = length.reshape(length.shape[0], -1)
    top = (flat.std(axis=1, ddof=1) * 5 + flat.mean(axis=1))[:, None, None, None] * multiplier
    scaled = length / top
    return direction * (scaled / (scaled + 1.0) * top)


def _sharpen_reference(latent: np.ndarray, radius: int, sigma: float, alpha: float) -> np.ndarray:
    size = 2 * radius + 1
    grid = np.linspace(-1, 1, size)
    gauss = np.exp(-(grid[:, None] ** 2 + grid[None, :] ** 2) / (2 * sigma * sigma))
    kernel = gauss / gauss.sum() * (alpha * -10)
    kernel[radius, radius] += 1.0 - kernel.sum()
    length = np.linalg.norm(latent, axis=1, keepdims=True) + 1e-6
    direction = latent / length
    padded = np.pad(direction, ((0, 0), (0, 0), (radius, radius), (radius, radius)), mode="reflect")
    out = np.zeros_like(direction)
    for dy in range(size):
        for dx in range(size):
            out += kernel[dy, dx] * padded[:, :, dy:dy + latent.shape[2], dx:dx + latent.shape[3]]
    return length * out


def test_tonemap_reinhard_matches_the_formula():
    latent = _latent(2, 4, 6, 7) * 3
    op = latent_operation_tonemap_reinhard(1.3)[0]
    out = latent_apply_operation({"samples": latent, "batch_index": [1, 2]}, op)[0]
    assert np.allclose(out["samples"].numpy(), _tonemap_reference(latent.double().numpy(), 1.3), rtol=1e-5, atol=1e-6)
    assert out["batch_index"] == [1, 2]


def test_sharpen_matches_an_unsharp_mask_on_directions():
    latent = _latent(2, 4, 12, 14)
    op = latent_operation_sharpen(3, 1.5, 0.4)[0]
    out = latent_apply_operation({"samples": latent}, op)[0]["samples"]
    assert np.allclose(out.numpy(), _sharpen_reference(latent.double().numpy(), 3, 1.5, 0.4), atol=1e-5)


def test_sharpen_alpha_zero_keeps_the_latent():
    latent = _latent(1, 4, 10, 10)
    assert torch.allclose(latent_operation_sharpen(4, 1.0, 0.0)[0](latent=latent), latent, atol=1e-5)


def test_sharpen_needs_a_latent_wider_than_its_radius():
    with pytest.raises(ValueError, match="sharpen_radius 9"):
        latent_operation_sharpen(9, 1.0, 0.1)[0](latent=_latent(1, 4, 8, 8))
    with pytest.raises(NodeInputError) as info:
        latent_operation_sharpen(0, 1.0, 0.1)
    assert info.value.input_name == "sharpen_radius"


def test_apply_operation_takes_a_packs_plain_function_and_refuses_non_callables():
    latent = _latent(1, 4, 2, 2)
    assert torch.equal(latent_apply_operation({"samples": latent}, lambda latent, **_: latent * 2)[0]["samples"],
                       latent * 2)
    with pytest.raises(NodeInputError) as info:
        latent_apply_operation({"samples": latent}, "sharpen")
    assert info.value.input_name == "operation"


def test_the_cfg_hook_applies_the_operation_to_positive_minus_negative():
    seen = []

    def op(latent, **_):
        seen.append(latent)
        return latent * 3

    positive, negative = _latent(1, 4, 2, 2, seed=1), _latent(1, 4, 2, 2, seed=2)
    out = OperationOnCFG(op)({"conds_out": [positive, negative]})
    assert torch.equal(seen[0], positive - negative)
    assert torch.equal(out[0], (positive - negative) * 3 + negative) and out[1] is negative
    assert torch.equal(OperationOnCFG(op)({"conds_out": [positive]})[0], positive * 3)


def test_apply_operation_cfg_patches_a_clone_whose_identity_is_its_settings():
    model = ModelPatcher(nn.Linear(2, 2))
    first = latent_apply_operation_cfg(model, latent_operation_tonemap_reinhard(1.0)[0])[0]
    again = latent_apply_operation_cfg(model, latent_operation_tonemap_reinhard(1.0)[0])[0]
    other = latent_apply_operation_cfg(model, latent_operation_tonemap_reinhard(2.0)[0])[0]
    assert first is not model and "sampler_pre_cfg_function" not in model.model_options
    assert len(first.model_options["sampler_pre_cfg_function"]) == 1
    assert first.cache_signature() is not None
    assert first.cache_signature() == again.cache_signature() != other.cache_signature()
    with pytest.raises(NodeInputError) as info:
        latent_apply_operation_cfg("model", latent_operation_tonemap_reinhard(1.0)[0])
    assert info.value.input_name == "model"


# --- in a sampling run ---------------------------------------------------------------------------

CAPTURED: dict = {}


@node("TestCaptureLatentOperations", category="testing", output_node=True,
      inputs=[Input("value", "*"), String("tag")])
def capture(value, tag: str) -> dict:
    CAPTURED[tag] = value
    return {"ui": {"tag": [tag]}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_sd1_ckpt):
    root = tmp_path_factory.mktemp("latent_operations")
    env = Environment.rooted_at(root)
    env.ensure_dirs()
    (root / "models" / "checkpoints").mkdir(parents=True)
    shutil.copyfile(tiny_sd1_ckpt, root / "models" / "checkpoints" / "tiny.safetensors")
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(capture)
    return env, registry


def _workflow() -> dict:
    def sampler(model: list, tag: str, node_id: int) -> dict:
        return {
            str(node_id): {"class_type": "KSampler", "inputs": {
                "model": model, "seed": 5, "steps": 2, "cfg": 4.0, "sampler_name": "euler", "scheduler": "normal",
                "positive": ["2", 0], "negative": ["3", 0], "latent_image": ["4", 0], "denoise": 1.0}},
            str(node_id + 1): {"class_type": "TestCaptureLatentOperations",
                               "inputs": {"value": [str(node_id), 0], "tag": tag}},
        }

    return {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a lighthouse", "clip": ["1", 1]}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["1", 1]}},
        "4": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "5": {"class_type": "LatentOperationTonemapReinhard", "inputs": {"multiplier": 0.05}},
        "6": {"class_type": "LatentApplyOperationCFG", "inputs": {"model": ["1", 0], "operation": ["5", 0]}},
        "7": {"class_type": "LatentOperationSharpen", "inputs": {"sharpen_radius": 2, "sigma": 1.0, "alpha": 0.0}},
        "8": {"class_type": "LatentApplyOperationCFG", "inputs": {"model": ["1", 0], "operation": ["7", 0]}},
        **sampler(["1", 0], "plain", 10), **sampler(["6", 0], "tonemapped", 20), **sampler(["8", 0], "identity", 30),
    }


async def test_the_operation_acts_inside_the_sampler(setup):
    env, registry = setup
    prompt = _workflow()
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    out = await Executor(registry, env=env).execute(prompt, "latent-operations", outputs=checked.outputs)
    assert out.status == "success", out.error
    plain, tonemapped, identity = (CAPTURED[t]["samples"] for t in ("plain", "tonemapped", "identity"))
    # Sharpening with alpha 0 is the identity on the guidance direction; the tone map is not.
    assert torch.allclose(identity, plain, atol=1e-4)
    assert not torch.allclose(tonemapped, plain, atol=1e-3)

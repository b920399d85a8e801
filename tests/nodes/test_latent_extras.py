"""LatentOperationBlend (ComfyUI's nodes_latent.py, 2026), BatchMasksNode and BatchLatentsNode (its
nodes_post_processing.py): results checked against computations written here independently
(numpy), and the growing inputs wired in prompts as the editor sends them."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from nodes.errors import NodeInputError
from nodes.latent_extras import batch_latents_node, batch_masks_node, latent_operation_blend
from nodes.latent_operations import latent_apply_operation
from tests.nodes.workflow_2026 import Runner, node


def test_blend_lerps_toward_the_reference():
    latent = torch.randn(2, 4, 6, 6)
    reference = torch.randn(2, 4, 6, 6)
    (op,) = latent_operation_blend({"samples": reference}, 0.25)
    got = op(latent=latent)
    expected = latent.numpy() * 0.75 + reference.numpy() * 0.25
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(latent_operation_blend({"samples": reference}, 1.0)[0](latent=latent).numpy(),
                               reference.numpy())
    (nothing,) = latent_operation_blend({"samples": reference}, 0.0)
    assert nothing(latent=latent) is latent


def test_blend_resizes_the_reference_nearest_and_repeats_its_batch():
    latent = torch.zeros(3, 2, 4, 6)
    reference = torch.arange(2 * 2 * 2 * 3, dtype=torch.float32).reshape(2, 2, 2, 3)
    got = latent_operation_blend({"samples": reference}, 1.0)[0](latent=latent)
    # Nearest 2x upscale: each value repeated over a 2 x 2 block; batch 2 -> 3 tiles item 0 again.
    up = np.repeat(np.repeat(reference.numpy(), 2, axis=2), 2, axis=3)
    np.testing.assert_array_equal(got.numpy(), np.concatenate([up, up[:1]], axis=0))


def test_blend_through_latent_apply_operation_keeps_the_other_keys():
    latent = {"samples": torch.ones(1, 4, 8, 8), "batch_index": [5]}
    (op,) = latent_operation_blend({"samples": torch.zeros(1, 4, 8, 8)}, 0.5)
    (out,) = latent_apply_operation(latent, op)
    assert torch.allclose(out["samples"], torch.full((1, 4, 8, 8), 0.5)) and out["batch_index"] == [5]
    with pytest.raises(NodeInputError, match="reference"):
        latent_operation_blend(torch.zeros(1, 4, 8, 8), 0.5)
    with pytest.raises(NodeInputError, match="strength"):
        latent_operation_blend({"samples": torch.zeros(1, 4, 8, 8)}, 1.5)


def _bilinear_center(plane: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """A half-pixel-centred bilinear resize of `[H, W]` (edges clamped), as torch's
    `align_corners=False`, for the aspect-preserving case (no crop)."""
    h, w = plane.shape
    ys = np.clip((np.arange(out_h) + 0.5) * h / out_h - 0.5, 0, h - 1)
    xs = np.clip((np.arange(out_w) + 0.5) * w / out_w - 0.5, 0, w - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    top = plane[y0][:, x0] * (1 - fx) + plane[y0][:, x1] * fx
    bottom = plane[y1][:, x0] * (1 - fx) + plane[y1][:, x1] * fx
    return top * (1 - fy) + bottom * fy


def test_batch_masks_joins_in_socket_order_at_the_first_size():
    a, b = torch.rand(2, 8, 8), torch.rand(1, 4, 4)
    (out,) = batch_masks_node({"mask0": a, "mask1": b})
    assert out.shape == (3, 8, 8)
    np.testing.assert_array_equal(out[:2].numpy(), a.numpy())
    np.testing.assert_allclose(out[2].numpy(), _bilinear_center(b[0].numpy().astype(np.float64), 8, 8), atol=1e-6)
    (single,) = batch_masks_node({"mask0": b})
    assert torch.equal(single, b)
    with pytest.raises(NodeInputError, match="masks.mask1"):
        batch_masks_node({"mask0": a, "mask1": torch.rand(1, 1, 8, 8)})


def test_batch_latents_keeps_each_items_batch_index_and_the_first_latents_keys():
    first = {"samples": torch.randn(2, 4, 8, 8), "noise_mask": torch.ones(1, 8, 8)}
    second = {"samples": torch.randn(1, 4, 8, 8), "batch_index": [7]}
    third = {"samples": torch.randn(1, 4, 4, 4)}
    (out,) = batch_latents_node({"latent0": first, "latent1": second, "latent2": third})
    assert out["batch_index"] == [0, 1, 7, 0]
    assert out["noise_mask"] is first["noise_mask"]
    assert out["samples"].shape == (4, 4, 8, 8)
    np.testing.assert_array_equal(out["samples"][:3].numpy(),
                                  np.concatenate([first["samples"].numpy(), second["samples"].numpy()]))
    for c in range(4):
        np.testing.assert_allclose(out["samples"][3, c].numpy(),
                                   _bilinear_center(third["samples"][0, c].numpy().astype(np.float64), 8, 8),
                                   atol=1e-5)
    assert "batch_index" not in first  # the inputs are not modified
    with pytest.raises(NodeInputError, match="latents.latent1"):
        batch_latents_node({"latent0": first, "latent1": torch.zeros(1, 4, 8, 8)})


async def test_batch_masks_in_a_prompt(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"m0": node("SolidMask", value=1.0, width=32, height=16),
              "m1": node("SolidMask", value=0.5, width=64, height=32),
              "batch": node("BatchMasksNode", **{"masks.mask0": ["m0", 0], "masks.mask1": ["m1", 0]}),
              "img": node("MaskToImage", mask=["batch", 0]),
              "size": node("GetImageSize", image=["img", 0]),
              "out": node("PreviewAny", source=["size", 2]),
              "width": node("PreviewAny", source=["size", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["2"]} and out.ui_outputs["width"] == {"text": ["32"]}


async def test_batch_latents_and_blend_in_a_prompt(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"a": node("EmptyLatentImage", width=64, height=64, batch_size=1),
              "b": node("EmptyLatentImage", width=64, height=64, batch_size=2),
              "batch": node("BatchLatentsNode", **{"latents.latent0": ["a", 0], "latents.latent1": ["b", 0]}),
              "ref": node("LatentMultiply", samples=["a", 0], multiplier=1.0),
              "blend": node("LatentOperationBlend", reference=["ref", 0], strength=0.5),
              "apply": node("LatentApplyOperation", samples=["batch", 0], operation=["blend", 0]),
              "save": node("SaveLatent", samples=["apply", 0], filename_prefix="latents/blend")}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    saved = out.ui_outputs["save"]["latents"][0]
    tensors = load_file(str(runner.env.output_dir / saved["subfolder"] / saved["filename"]))
    assert tensors["latent_tensor"].shape == (3, 4, 8, 8)  # 1 + 2 items, blended toward zeros: zeros
    assert float(tensors["latent_tensor"].abs().sum()) == 0.0


def test_packs_call_the_blend_as_comfyuis_v3_class(comfy_nodes):
    from comfy_extras.nodes_latent import LatentOperationBlend

    op = LatentOperationBlend.execute({"samples": torch.zeros(1, 4, 2, 2)}, 0.5).result[0]
    assert torch.equal(op(latent=torch.ones(1, 4, 2, 2)), torch.full((1, 4, 2, 2), 0.5))


def test_packs_call_the_batch_nodes_as_comfyuis_v3_classes(comfy_nodes):
    from comfy_extras.nodes_post_processing import BatchLatentsNode, BatchMasksNode

    masks = BatchMasksNode.execute({"mask0": torch.zeros(1, 4, 4), "mask1": torch.ones(2, 4, 4)}).result[0]
    assert masks.shape == (3, 4, 4) and float(masks.sum()) == 32.0
    latents = BatchLatentsNode.execute({"latent0": {"samples": torch.zeros(2, 4, 4, 4)},
                                        "latent1": {"samples": torch.ones(1, 4, 4, 4)}}).result[0]
    assert latents["samples"].shape == (3, 4, 4, 4) and latents["batch_index"] == [0, 1, 0]

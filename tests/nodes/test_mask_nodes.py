"""The mask nodes of comfy_extras.nodes_mask: ComfyUI's /object_info entries, each node's
behaviour against a computation written here, the typed errors, and a mask workflow through the
executor ending in MaskPreview."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from graph.context import NodeContext, reset_current, set_current
from graph.executor import Executor
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import mask as mask_nodes
from nodes import register_builtin_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def env(tmp_path: Path) -> Environment:
    environment = Environment.rooted_at(tmp_path / "base")
    environment.ensure_dirs()
    return environment


@contextmanager
def running_in(env: Environment):
    token = set_current(NodeContext(prompt_id="p", node_id="1", display_node_id="1", list_index=None, env=env))
    try:
        yield
    finally:
        reset_current(token)


# --- composites ---------------------------------------------------------------------------------

def test_latent_composite_masked_pastes_in_latent_pixels_and_keeps_keys():
    destination = {"samples": torch.zeros(2, 4, 8, 8), "batch_index": [5, 6], "noise_mask": torch.ones(1, 1, 8, 8)}
    source = {"samples": torch.ones(1, 4, 3, 3)}
    (out,) = mask_nodes.latent_composite_masked(destination, source, 40, 16, False)
    assert out["batch_index"] == [5, 6] and out["noise_mask"] is destination["noise_mask"]
    expected = torch.zeros(2, 4, 8, 8)
    expected[:, :, 2:5, 5:8] = 1  # x = 40 px -> column 5; the source's last column falls outside
    assert torch.equal(out["samples"], expected)
    assert torch.equal(destination["samples"], torch.zeros(2, 4, 8, 8))  # input untouched


def test_latent_composite_masked_blends_through_a_resized_mask():
    destination, source = {"samples": torch.zeros(1, 4, 4, 4)}, {"samples": torch.ones(1, 4, 2, 2)}
    mask = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    (out,) = mask_nodes.latent_composite_masked(destination, source, 0, 0, True, mask)
    weight = F.interpolate(mask.reshape(1, 1, 2, 2), size=(4, 4), mode="bilinear")
    assert torch.equal(out["samples"], weight.expand(1, 4, 4, 4))


def test_latent_composite_masked_refuses_other_channels_and_video():
    with pytest.raises(NodeInputError, match="'source' expected a LATENT with 4 channels"):
        mask_nodes.latent_composite_masked({"samples": torch.zeros(1, 4, 8, 8)}, {"samples": torch.zeros(1, 16, 8, 8)},
                                           0, 0, False)
    with pytest.raises(NodeInputError, match="'destination'"):
        video = {"samples": torch.zeros(1, 4, 2, 8, 8)}
        mask_nodes.latent_composite_masked(video, {"samples": torch.zeros(1, 4, 8, 8)}, 0, 0, False)


def test_image_composite_masked_places_the_source_at_pixels():
    destination, source = torch.zeros(1, 6, 8, 3), _rand(2, 3, 3, 3)
    (out,) = mask_nodes.image_composite_masked(destination, source, 6, 1, False)
    expected = torch.zeros(1, 6, 8, 3)
    expected[:, 1:4, 6:8] = source[:1, :, :2]  # the destination's batch of 1: the source is cut to it
    assert torch.equal(out, expected)
    (out,) = mask_nodes.image_composite_masked(torch.zeros(3, 6, 8, 3), source, 0, 0, False)
    assert torch.equal(out[:, :3, :3], source[[0, 1, 0]])  # and tiled to a larger one


def test_image_composite_masked_channels_as_comfyui():
    rgb, rgba = _rand(1, 4, 4, 3), _rand(1, 2, 2, 4, seed=1)
    (out,) = mask_nodes.image_composite_masked(rgb, rgba, 0, 0, False)
    assert out.shape == (1, 4, 4, 3) and torch.equal(out[:, :2, :2], rgba[:, :, :, :3])  # alpha dropped
    grey = _rand(1, 2, 2, 1, seed=2)
    (out,) = mask_nodes.image_composite_masked(rgb, grey, 1, 1, False)
    assert out.shape == (1, 4, 4, 4)  # ComfyUI gives the RGB destination an alpha, and the grey broadcasts
    assert torch.equal(out[:, 1:3, 1:3], grey.expand(1, 2, 2, 4)) and torch.all(out[0, 0, :, 3] == 1)
    with pytest.raises(NodeInputError, match="'source' expected an IMAGE with at least 4 channels"):
        mask_nodes.image_composite_masked(rgba, rgb, 0, 0, False)


def test_image_composite_masked_with_mask():
    destination, source = torch.zeros(1, 4, 4, 3), torch.ones(1, 4, 4, 3)
    mask = torch.zeros(1, 4, 4)
    mask[0, :, 2:] = 0.25
    (out,) = mask_nodes.image_composite_masked(destination, source, 0, 0, False, mask)
    assert torch.equal(out, mask[..., None].expand(1, 4, 4, 3))


# --- conversions --------------------------------------------------------------------------------

def test_mask_to_image_and_back():
    mask = _rand(2, 3, 5)
    (image,) = mask_nodes.mask_to_image(mask)
    assert image.shape == (2, 3, 5, 3) and all(torch.equal(image[..., c], mask) for c in range(3))
    assert mask_nodes.mask_to_image(mask[0])[0].shape == (1, 3, 5, 3)
    for index, channel in enumerate(mask_nodes.IMAGE_CHANNELS):
        image = _rand(2, 3, 5, 4, seed=index)
        assert torch.equal(mask_nodes.image_to_mask(image, channel)[0], image[..., index])
    with pytest.raises(NodeInputError, match="'image' expected an IMAGE with a alpha channel"):
        mask_nodes.image_to_mask(_rand(1, 2, 2, 3), "alpha")
    with pytest.raises(NodeInputError, match="'channel'"):
        mask_nodes.image_to_mask(_rand(1, 2, 2, 3), "luma")


def test_image_color_to_mask():
    image = torch.zeros(1, 2, 3, 3)
    image[0, 0, 1] = torch.tensor([0x12, 0x34, 0x56]) / 255.0
    (mask,) = mask_nodes.image_color_to_mask(image, 0x123456)
    assert mask.tolist() == [[[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]]
    assert mask_nodes.image_color_to_mask(image, 0)[0].sum() == 5
    with pytest.raises(NodeInputError, match="'image'"):
        mask_nodes.image_color_to_mask(torch.zeros(1, 2, 2, 1), 0)


def test_solid_invert_threshold():
    (solid,) = mask_nodes.solid_mask(0.25, 7, 3)
    assert solid.shape == (1, 3, 7) and solid.dtype == torch.float32 and torch.all(solid == 0.25)
    mask = _rand(2, 3, 4)
    assert torch.equal(mask_nodes.invert_mask(mask)[0], 1.0 - mask)
    assert torch.equal(mask_nodes.threshold_mask(mask, 0.5)[0], (mask > 0.5).float())
    with pytest.raises(NodeInputError, match="'width'"):
        mask_nodes.solid_mask(1.0, 0, 4)
    with pytest.raises(NodeInputError, match="'mask'"):
        mask_nodes.invert_mask(torch.zeros(3))


def test_crop_mask_cuts_the_region_inside_the_mask():
    mask = torch.arange(2 * 5 * 6.0).reshape(2, 5, 6)
    assert torch.equal(mask_nodes.crop_mask(mask, 2, 1, 3, 2)[0], mask[:, 1:3, 2:5])
    assert mask_nodes.crop_mask(mask, 4, 3, 512, 512)[0].shape == (2, 2, 2)
    assert mask_nodes.crop_mask(mask, 9, 0, 4, 4)[0].shape == (2, 4, 0)
    with pytest.raises(NodeInputError, match="'y'"):
        mask_nodes.crop_mask(mask, 0, -1, 2, 2)


# --- edits --------------------------------------------------------------------------------------

def test_mask_composite_operations_and_batch_rule():
    destination, source = torch.full((2, 4, 4), 0.5), torch.ones(1, 2, 2)
    (out,) = mask_nodes.mask_composite(destination, source, 1, 1, "add")
    expected = torch.full((2, 4, 4), 0.5)
    expected[:, 1:3, 1:3] = 1.0  # 1.5 clamped
    assert torch.equal(out, expected)
    (out,) = mask_nodes.mask_composite(destination, source, 3, 3, "subtract")
    assert out[:, 3, 3].tolist() == [0.0, 0.0] and out.sum() == 0.5 * 30
    with pytest.raises(NodeInputError, match="'source' expected a MASK batch of 1 or 2"):
        mask_nodes.mask_composite(destination, torch.ones(3, 2, 2), 0, 0, "add")
    with pytest.raises(NodeInputError, match="'operation'"):
        mask_nodes.mask_composite(destination, source, 0, 0, "max")


def test_feather_mask_ramps_each_side():
    (out,) = mask_nodes.feather_mask(torch.ones(1, 4, 4), 2, 0, 0, 0)
    assert out[0, 0].tolist() == [0.5, 1.0, 1.0, 1.0]
    (out,) = mask_nodes.feather_mask(torch.ones(4, 4), 0, 4, 0, 0)
    assert out[0, :, 0].tolist() == [0.25, 0.5, 0.75, 1.0]
    with pytest.raises(NodeInputError, match="'bottom'"):
        mask_nodes.feather_mask(torch.ones(1, 4, 4), 0, 0, 0, -2)


def test_grow_mask_grows_and_shrinks():
    mask = torch.zeros(1, 9, 9)
    mask[0, 3:6, 3:6] = 1
    (grown,) = mask_nodes.grow_mask(mask, 1, False)
    assert grown.sum() == 25 and torch.all(grown[0, 2:7, 2:7] == 1)
    (tapered,) = mask_nodes.grow_mask(mask, 1, True)
    assert tapered.sum() == 21 and tapered[0, 2, 2] == 0  # corners cut
    (shrunk,) = mask_nodes.grow_mask(mask, -1, True)
    assert shrunk.sum() == 1 and shrunk[0, 4, 4] == 1
    assert torch.equal(mask_nodes.grow_mask(mask, 0, True)[0], mask)


# --- preview and a workflow ---------------------------------------------------------------------

def test_mask_preview_writes_a_grey_png_to_temp(env):
    mask = torch.zeros(1, 4, 6)
    mask[0, 1, 2] = 1.0
    with running_in(env):
        ui = mask_nodes.mask_preview(mask)["ui"]["images"]
    assert len(ui) == 1 and ui[0]["type"] == "temp" and ui[0]["filename"].startswith("ComfyUI_temp_")
    pixels = np.array(Image.open(env.temp_dir / ui[0]["subfolder"] / ui[0]["filename"]))
    assert pixels.shape == (4, 6, 3) and pixels[1, 2].tolist() == [255, 255, 255] and pixels.sum() == 3 * 255


async def test_mask_workflow_runs_through_the_executor(env):
    registry = Registry()
    register_builtin_nodes(registry)
    prompt = {
        "1": {"class_type": "SolidMask", "inputs": {"value": 0.0, "width": 16, "height": 12}},
        "2": {"class_type": "SolidMask", "inputs": {"value": 1.0, "width": 2, "height": 2}},
        "3": {"class_type": "MaskComposite", "inputs": {"destination": ["1", 0], "source": ["2", 0], "x": 7, "y": 5,
                                                        "operation": "add"}},
        "4": {"class_type": "GrowMask", "inputs": {"mask": ["3", 0], "expand": 2, "tapered_corners": False}},
        "5": {"class_type": "InvertMask", "inputs": {"mask": ["4", 0]}},
        "6": {"class_type": "MaskPreview", "inputs": {"mask": ["5", 0]}},
    }
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    out = await Executor(registry, env=env).execute(prompt, "masks", outputs=checked.outputs)
    assert out.status == "success", out.error
    record = out.ui_outputs["6"]["images"][0]
    pixels = np.array(Image.open(env.temp_dir / record["subfolder"] / record["filename"]))[..., 0]
    expected = np.full((12, 16), 255, np.uint8)
    expected[3:9, 5:11] = 0  # the 2 x 2 square at (7, 5) grown by 2, inverted
    assert np.array_equal(pixels, expected)

"""ComfyUI 0.3.64's SaveLoRANode, LoadImageSetFromFolderNode and LoadImageTextSetFromFolderNode
(comfy_extras/nodes_train.py there): declared as 0.3.64's /object_info shows them, running on
today's code (SaveLoRA's saving, the dataset folder reading), the image set as one batch sized as
its first image (each resize method against Pillow run here), captions encoded one per image."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from graph.native import Output, node, spec_of
from graph.object_info import node_info
from nodes.conditioning import clip_text_encode
from nodes.environment import Environment, host_env
from nodes.errors import NodeInputError
from nodes.training_nodes_0364 import (load_image_set_from_folder, load_image_text_set_from_folder,
                                       save_lora_node)
from tests.fixtures.clips import one_thread, sd1  # noqa: F401 (fixtures)
from tests.fixtures.object_info_parity import comfyui_object_info, node_differences
from tests.nodes.workflow_2026 import Runner
from tests.nodes.workflow_2026 import node as prompt_node


@pytest.mark.parametrize("fn", [save_lora_node, load_image_set_from_folder, load_image_text_set_from_folder])
def test_object_info_is_comfyui_0364s(fn):
    spec = spec_of(fn)
    theirs, ours = comfyui_object_info()[spec.node_id], node_info(spec)
    assert node_differences(spec.node_id, ours, theirs) == []
    assert ours["experimental"] is True and ours["description"] == theirs["description"]


def _pixels(seed: int, w: int, h: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.fixture
def env(tmp_path):
    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    token = host_env.set(env)
    try:
        yield env
    finally:
        host_env.reset(token)


@pytest.fixture
def image_set(env):
    folder = env.input_dir / "set"
    folder.mkdir()
    images = {"a.png": _pixels(1, 8, 6), "b.png": _pixels(2, 10, 4), "c.jpg.txt": None, "d.webp": None}
    Image.fromarray(images["a.png"]).save(folder / "a.png")
    Image.fromarray(images["b.png"]).save(folder / "b.png")
    (folder / "c.jpg.txt").write_text("not an image")
    return folder, images


def test_the_image_set_is_one_batch_sized_as_its_first_image(image_set):
    folder, images = image_set
    with pytest.raises(NodeInputError, match="size does not match"):
        load_image_set_from_folder("set", "None")
    (stretched,) = load_image_set_from_folder("set", "Stretch")
    assert stretched.shape == (2, 6, 8, 3) and stretched.dtype == torch.float32
    np.testing.assert_array_equal((stretched[0].numpy() * 255).round().astype(np.uint8), images["a.png"])
    lanczos = np.asarray(Image.fromarray(images["b.png"]).resize((8, 6), Image.Resampling.LANCZOS))
    np.testing.assert_array_equal((stretched[1].numpy() * 255).round().astype(np.uint8), lanczos)
    assert torch.equal(load_image_set_from_folder("set", "Pad")[0], stretched)  # 0.3.64's "Pad" resizes too
    (cropped,) = load_image_set_from_folder("set", "Crop")
    want = np.zeros((6, 8, 3), np.uint8)
    want[:4] = images["b.png"][:, :8]  # top-left corner; what lies outside the image is black
    np.testing.assert_array_equal((cropped[1].numpy() * 255).round().astype(np.uint8), want)


def test_the_folder_must_hold_images_inside_the_input_folder(env):
    (env.input_dir / "empty").mkdir()
    with pytest.raises(NodeInputError, match="folder"):
        load_image_set_from_folder("empty", "None")
    with pytest.raises(NodeInputError, match="folder"):
        load_image_set_from_folder("../output", "None")


def test_the_text_set_encodes_one_caption_per_image(env, sd1):
    folder = env.input_dir / "captions"
    (folder / "2_cat").mkdir(parents=True)
    Image.fromarray(_pixels(3, 8, 8)).save(folder / "x.png")
    (folder / "x.txt").write_text(" a red cube \n")
    Image.fromarray(_pixels(4, 16, 12)).save(folder / "2_cat" / "y.png")  # kohya: twice, no caption
    images, conditioning = load_image_text_set_from_folder("captions", sd1, "Stretch", 4, 6)
    assert images.shape == (3, 6, 4, 3)
    assert torch.equal(images[0], images[1]) and not torch.equal(images[1], images[2])  # name order: 2_cat first
    assert len(conditioning) == 3
    want = [clip_text_encode("", sd1)[0][0]] * 2 + [clip_text_encode("a red cube", sd1)[0][0]]
    for got, expected in zip(conditioning, want):
        assert torch.equal(got[0], expected[0])
    with pytest.raises(NodeInputError, match="clip"):
        load_image_text_set_from_folder("captions", None)


@node("TestMakeLoraModel", inputs=[], outputs=[Output("LORA_MODEL")])
def _make_lora():
    return ({"diffusion_model.x.lora_up.weight": torch.ones(3, 2), "diffusion_model.x.lora_down.weight": torch.eye(2)},)


async def test_the_nodes_in_a_workflow(tmp_path):
    runner = Runner(tmp_path)
    runner.registry.add_native(_make_lora)
    folder = runner.env.input_dir / "set"
    folder.mkdir()
    Image.fromarray(_pixels(5, 8, 8)).save(folder / "one.png")
    prompt = {
        "1": prompt_node("TestMakeLoraModel"),
        "2": prompt_node("PrimitiveInt", value=12),
        "3": prompt_node("SaveLoRANode", lora=["1", 0], prefix="loras/old_name", steps=["2", 0]),
        "4": prompt_node("SaveLoRANode", lora=["1", 0], prefix="loras/old_name"),
        "5": prompt_node("LoadImageSetFromFolderNode", folder="set", resize_method="None"),
        "6": prompt_node("PreviewImage", images=["5", 0]),
    }
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    saved = sorted(p.name for p in (runner.env.output_dir / "loras").iterdir())
    # (the counter of the plain name depends on which ran first: ComfyUI's counter reads "12" in the other)
    assert len(saved) == 2 and "old_name_12_steps_00001_.safetensors" in saved
    assert re.fullmatch(r"old_name_\d{5}_\.safetensors", saved[0])
    tensors = load_file(str(runner.env.output_dir / "loras" / "old_name_12_steps_00001_.safetensors"))
    assert torch.equal(tensors["diffusion_model.x.lora_up.weight"], torch.ones(3, 2))
    assert len(out.ui_outputs["6"]["images"]) == 1

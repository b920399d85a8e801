"""The core loaders' auxiliary networks (comfy_core/loading.py `AUXILIARY_NETWORKS`): networks ComfyUI's
CheckpointLoaderSimple / UNETLoader load as a MODEL although they are no diffusion family. Each file
is claimed by its own entry and only for the loaders that take it; a family's file is claimed by none."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.checkpoint.errors import CheckpointError
from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.loading import (AUXILIARY_NETWORKS, CHECKPOINT_LOADER, DIFFUSION_MODEL_LOADER, auxiliary_network,
                                load_checkpoint)
from comfy_core.split import load_diffusion_model
from tests.fixtures.template_models_rtdetr import write_tiny_rtdetr
from tests.fixtures.template_models_sam3 import tiny_sam3_file_state


@pytest.fixture(scope="module")
def sam3_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("sam3") / "sam3.1_multiplex.safetensors"
    save_file({k: v.contiguous() for k, v in tiny_sam3_file_state(seed=1).items()}, str(path))
    return path


@pytest.fixture(scope="module")
def rtdetr_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("rtdetr") / "rt_detr_v4.safetensors"
    write_tiny_rtdetr(path, seed=1)
    return path


def test_each_file_is_claimed_by_its_own_entry_for_the_loaders_that_take_it(sam3_path, rtdetr_path):
    with CheckpointFile(sam3_path) as file:
        assert auxiliary_network(file, CHECKPOINT_LOADER).name == "SAM 3"
        assert auxiliary_network(file, DIFFUSION_MODEL_LOADER).name == "SAM 3"
    with CheckpointFile(rtdetr_path) as file:
        assert auxiliary_network(file, DIFFUSION_MODEL_LOADER).name == "RT-DETRv4"
        assert auxiliary_network(file, CHECKPOINT_LOADER) is None
    assert len({net.name for net in AUXILIARY_NETWORKS}) == len(AUXILIARY_NETWORKS)


def test_a_family_file_is_claimed_by_none(tmp_path):
    path = tmp_path / "unet.safetensors"
    save_file({"model.diffusion_model.input_blocks.0.0.weight": torch.zeros(4, 4, 3, 3)}, str(path))
    with CheckpointFile(path) as file:
        assert auxiliary_network(file, CHECKPOINT_LOADER) is None
        assert auxiliary_network(file, DIFFUSION_MODEL_LOADER) is None


def test_the_loaders_return_what_comfyui_returns(sam3_path, rtdetr_path):
    model, clip, vae = load_checkpoint(sam3_path)
    assert type(model.model).__name__ == "Sam3Wrapper" and clip is not None and vae is None
    _, no_clip, _ = load_checkpoint(sam3_path, output_clip=False)
    assert no_clip is None
    assert type(load_diffusion_model(sam3_path).model).__name__ == "Sam3Wrapper"
    assert type(load_diffusion_model(rtdetr_path).model).__name__ == "DetectionModel"
    with pytest.raises(CheckpointError):  # CheckpointLoaderSimple does not take a detector
        load_checkpoint(rtdetr_path)

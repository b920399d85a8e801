"""Loader nodes: combos list the model folders; loading by name; typed errors for bad names."""
from __future__ import annotations

import shutil

import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from graph.native import spec_of
from nodes.environment import Environment
from nodes.loaders import LoaderNodeError, checkpoint_loader, checkpoint_loader_simple, vae_loader


@pytest.fixture
def env(tmp_path, tiny_sd1_ckpt):
    environment = Environment.rooted_at(tmp_path)
    ckpts = tmp_path / "models" / "checkpoints"
    (ckpts / "sub").mkdir(parents=True)
    shutil.copy(tiny_sd1_ckpt, ckpts / "sub" / "tiny.safetensors")
    vae_dir = tmp_path / "models" / "vae"
    vae_dir.mkdir(parents=True)
    shutil.copy(tiny_sd1_ckpt, vae_dir / "from_ckpt.safetensors")
    token = set_current(NodeContext("p", "1", "1", None, environment))
    yield environment
    reset_current(token)


def test_combos_list_the_folders(env):
    assert spec_of(checkpoint_loader_simple).input("ckpt_name").combo_values(env) == ["sub/tiny.safetensors"]
    assert spec_of(vae_loader).input("vae_name").combo_values(env) == ["from_ckpt.safetensors"]
    spec = spec_of(checkpoint_loader_simple)
    assert [o.type for o in spec.outputs] == ["MODEL", "CLIP", "VAE"] and spec.category == "loaders"


def test_checkpoint_loader_simple_loads_by_name(env):
    model, clip, vae = checkpoint_loader_simple("sub/tiny.safetensors")
    assert model.model.family.name == "sd1" and clip is not None
    assert vae.decode(torch.zeros(1, 4, 2, 2)).shape == (1, 16, 16, 3)


def test_typed_loader_options(env):
    model, _, _ = checkpoint_loader("sub/tiny.safetensors", weight_dtype="bf16", prediction="v")
    assert model.model.get_dtype() == torch.bfloat16
    assert model.model.model_sampling.prediction == "v"


def test_vae_loader_reads_a_checkpoint_vae(env):
    (vae,) = vae_loader("from_ckpt.safetensors")
    assert vae.model.latent_channels == 4


def test_unknown_name_is_a_typed_error(env):
    with pytest.raises(LoaderNodeError, match="ckpt_name"):
        checkpoint_loader_simple("missing.safetensors")


def test_loaded_patchers_join_the_hosts_memory_manager(tmp_path, tiny_sd1_ckpt):
    from comfy_core.memory import MemoryManager

    environment = Environment.rooted_at(tmp_path, memory=MemoryManager("cpu"))
    (tmp_path / "models" / "checkpoints").mkdir(parents=True)
    shutil.copy(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "a.safetensors")
    token = set_current(NodeContext("p", "1", "1", None, environment))
    try:
        model, clip, vae = checkpoint_loader_simple("a.safetensors")
    finally:
        reset_current(token)
    assert model.memory is environment.memory and vae.memory is environment.memory
    assert clip.patcher.memory is environment.memory


def test_symlinked_checkpoint_and_folder_load_by_the_listed_name(tmp_path, tiny_sd1_ckpt):
    """ComfyUI follows links in model folders: a linked file or a linked sub-folder loads by the
    name the combo lists (the machine's owner set the links up; only `..` and absolute names are
    refused)."""
    shared_drive = tmp_path / "drive"
    (shared_drive / "sd15").mkdir(parents=True)
    shutil.copy(tiny_sd1_ckpt, shared_drive / "real.safetensors")
    shutil.copy(tiny_sd1_ckpt, shared_drive / "sd15" / "in_linked_dir.safetensors")
    environment = Environment.rooted_at(tmp_path / "base")
    ckpts = tmp_path / "base" / "models" / "checkpoints"
    ckpts.mkdir(parents=True)
    (ckpts / "linked.safetensors").symlink_to(shared_drive / "real.safetensors")
    (ckpts / "shared").symlink_to(shared_drive / "sd15", target_is_directory=True)
    token = set_current(NodeContext("p", "1", "1", None, environment))
    try:
        listed = spec_of(checkpoint_loader_simple).input("ckpt_name").combo_values(environment)
        assert listed == ["linked.safetensors", "shared/in_linked_dir.safetensors"]
        for name in listed:
            model, _, _ = checkpoint_loader_simple(name)
            assert model.model.family.name == "sd1"
        with pytest.raises(LoaderNodeError, match="ckpt_name"):
            checkpoint_loader_simple("../../drive/real.safetensors")
    finally:
        reset_current(token)

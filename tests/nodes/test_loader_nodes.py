"""Loader nodes: combos list the model folders; loading by name; typed errors for bad names."""
from __future__ import annotations

import shutil

import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from graph.native import spec_of
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.loaders import checkpoint_loader, checkpoint_loader_simple, checkpoint_loader_typed, vae_loader


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
    assert spec_of(vae_loader).input("vae_name").combo_values(env) == ["from_ckpt.safetensors", "pixel_space"]
    spec = spec_of(checkpoint_loader_simple)
    assert [o.type for o in spec.outputs] == ["MODEL", "CLIP", "VAE"] and spec.category == "loaders"


def test_checkpoint_loader_simple_loads_by_name(env):
    model, clip, vae = checkpoint_loader_simple("sub/tiny.safetensors")
    assert model.model.family.name == "sd1" and clip is not None
    assert vae.decode(torch.zeros(1, 4, 2, 2)).shape == (1, 16, 16, 3)


def test_typed_loader_options(env):
    model, _, _ = checkpoint_loader_typed("sub/tiny.safetensors", weight_dtype="bf16", prediction="v")
    assert model.model.get_dtype() == torch.bfloat16
    assert model.model.model_sampling.prediction == "v"


def test_vae_loader_reads_a_checkpoint_vae(env):
    (vae,) = vae_loader("from_ckpt.safetensors")
    assert vae.model.latent_channels == 4


def test_pixel_space_vae_is_the_image_itself(env):
    # Today's ComfyUI's VAELoader choice with no file (Chroma Radiance): latent = 2 * image - 1.
    (vae,) = vae_loader("pixel_space")
    image = torch.rand(2, 8, 6, 4)  # an alpha channel is dropped, as every VAE drops it
    latent = vae.encode(image)
    assert latent.shape == (2, 3, 8, 6) and vae.downscale_ratio == 1 and vae.latent_channels == 3
    torch.testing.assert_close(latent, image[..., :3].movedim(-1, 1) * 2 - 1)
    torch.testing.assert_close(vae.decode(latent), image[..., :3])
    assert vae.decode(torch.full((1, 3, 2, 2), 5.0)).max() == 1.0  # clamped
    from comfy_core.patching.vae import VaePatcher

    assert VaePatcher(sd={"pixel_space_vae": torch.tensor(1.0)}).latent_channels == 3  # comfy.sd.VAE(sd=...)


def test_unknown_name_is_a_typed_error(env):
    with pytest.raises(NodeInputError, match="ckpt_name"):
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
        with pytest.raises(NodeInputError, match="ckpt_name"):
            checkpoint_loader_simple("../../drive/real.safetensors")
    finally:
        reset_current(token)


def test_checkpoint_clip_reads_embeddings_written_as_users_write_them(env, tmp_path):
    # ComfyUI's loaders give the CLIP the embeddings folders: `embedding:name,` (the name directly
    # followed by a comma) is the file `name.safetensors`, the comma stays text (sd1_clip.py
    # `_try_get_embedding`). Expected tokens written out: BOS, "a photo of a cat,", the 2
    # vectors, ",", "detailed", EOS, then EOS padding to 77.
    from safetensors.torch import save_file

    from nodes.conditioning import clip_text_encode

    vectors = torch.randn(2, 64, generator=torch.Generator().manual_seed(3))
    emb_dir = tmp_path / "models" / "embeddings"
    emb_dir.mkdir(parents=True, exist_ok=True)
    save_file({"emb_params": vectors}, str(emb_dir / "tinyemb.safetensors"))
    _, clip, _ = checkpoint_loader_simple("sub/tiny.safetensors")
    (cond,) = clip_text_encode("a photo of a cat, embedding:tinyemb, detailed", clip)

    bpe = clip.tokenizer.clip_l.clip_tokenizer
    tokens = [49406, *bpe.encode("a photo of a cat,"), vectors[0], vectors[1], *bpe.encode(", detailed"), 49407]
    tokens += [49407] * (77 - len(tokens))
    expected = clip.encode_from_tokens({"l": [[(t, 1.0) for t in tokens]]})
    torch.testing.assert_close(cond[0][0], expected, rtol=0, atol=0)
    (plain,) = clip_text_encode("a photo of a cat, embedding:tinyemb detailed", clip)
    assert plain[0][0].shape == cond[0][0].shape


def test_comfyuis_config_loader_takes_the_prediction_type_from_the_yaml(env, tmp_path):
    """ComfyUI's (deprecated) CheckpointLoader: `parameterization: "v"` in the LDM config makes a
    v-prediction model; a config without it, eps."""
    configs = tmp_path / "models" / "configs"
    configs.mkdir(parents=True)
    (configs / "v2-inference-v.yaml").write_text("model:\n  params:\n    parameterization: \"v\"\n")
    (configs / "v1-inference.yaml").write_text("model:\n  params:\n    linear_start: 0.00085\n")
    assert spec_of(checkpoint_loader).input("config_name").combo_values(env) == ["v1-inference.yaml",
                                                                               "v2-inference-v.yaml"]
    model, _, _ = checkpoint_loader("v2-inference-v.yaml", "sub/tiny.safetensors")
    assert model.model.model_sampling.prediction == "v"
    model, _, _ = checkpoint_loader("v1-inference.yaml", "sub/tiny.safetensors")
    assert model.model.model_sampling.prediction == "eps"
    with pytest.raises(NodeInputError, match="config_name"):
        checkpoint_loader("missing.yaml", "sub/tiny.safetensors")

"""Split-file loader nodes (UNETLoader, CLIPLoader, DualCLIPLoader, DiffusersLoader) and
LoadImageOutput: the same image as CheckpointLoaderSimple from the same weights, ComfyUI's fp8
storage, typed errors, folder listings and ComfyUI 0.3.64's object_info entries."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from graph.context import NodeContext, reset_current, set_current
from graph.native import spec_of
from graph.registry import Registry
from nodes import register_builtin_nodes
from nodes.conditioning import clip_text_encode
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.image_output import load_image_output
from nodes.latent import empty_latent_image, vae_decode
from nodes.loaders import (
    CLIP_LOADER_TYPES,
    DUAL_CLIP_LOADER_TYPES,
    checkpoint_loader_simple,
    clip_loader,
    diffusers_loader,
    dual_clip_loader,
    unet_loader,
    vae_loader,
)
from nodes.sampling import ksampler
from tests.fixtures.object_info_parity import comfyui_object_info, differences
from tests.fixtures.split_files import (
    split_state_dict,
    under,
    write_checkpoint,
    write_diffusers_folder,
    write_split_files,
)

SPLIT_NODES = ("UNETLoader", "CLIPLoader", "DualCLIPLoader", "DiffusersLoader", "LoadImageOutput")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """models/ with SD1 and SDXL as checkpoints, split files (diffusion model in the legacy
    models/unet for SD1, text encoders of SD1 in the legacy models/clip) and diffusers folders."""
    root = tmp_path_factory.mktemp("split_nodes")
    models = root / "models"
    states = {}
    for family in ("sd1", "sdxl"):
        state = states[family] = split_state_dict(family)
        write_checkpoint(state, models / "checkpoints" / f"{family}.safetensors")
        write_split_files(state, family, models)
        write_diffusers_folder(state, family, models / "diffusers" / "pipelines" / family)
    (models / "unet").mkdir()
    shutil.move(models / "diffusion_models" / "sd1.safetensors", models / "unet" / "sd1.safetensors")
    (models / "clip").mkdir()
    shutil.move(models / "text_encoders" / "sd1_clip_l.safetensors", models / "clip" / "sd1_clip_l.safetensors")
    return root, states


@pytest.fixture
def env(base):
    root, _ = base
    # Copied weights (mmap=False): zero-copy views of two files sit at different alignments,
    # which may change the last bit of a CPU kernel's result (see test_split_loading.py).
    environment = Environment.rooted_at(root, mmap=False)
    token = set_current(NodeContext("p", "1", "1", None, environment))
    yield environment
    reset_current(token)


def _image(model, clip, vae, size: int = 64) -> torch.Tensor:
    positive = clip_text_encode("a red cube", clip)[0]
    negative = clip_text_encode("", clip)[0]
    latent = empty_latent_image(size, size, 1)[0]
    samples = ksampler(model, 7, 2, 6.0, "euler", "normal", positive, negative, latent)[0]
    return vae_decode(samples, vae)[0]


@pytest.fixture(scope="module")
def checkpoint_images() -> dict:
    """CheckpointLoaderSimple's image per checkpoint name, computed once for the module."""
    return {}


def _checkpoint_image(cache: dict, name: str) -> torch.Tensor:
    if name not in cache:
        cache[name] = _image(*checkpoint_loader_simple(name))
    return cache[name]


def test_combos_list_the_split_folders_with_their_legacy_names(env):
    assert spec_of(unet_loader).input("unet_name").combo_values(env) == ["sd1.safetensors", "sdxl.safetensors"]
    assert spec_of(clip_loader).input("clip_name").combo_values(env) == [
        "sd1_clip_l.safetensors", "sdxl_clip_g.safetensors", "sdxl_clip_l.safetensors"]
    assert spec_of(diffusers_loader).input("model_path").combo_values(env) == ["pipelines/sd1", "pipelines/sdxl"]


def test_unet_clip_and_vae_loaders_sample_the_checkpoints_image(env, checkpoint_images):
    expected = _checkpoint_image(checkpoint_images, "sd1.safetensors")
    model = unet_loader("sd1.safetensors", "default")[0]
    clip = clip_loader("sd1_clip_l.safetensors", "stable_diffusion")[0]
    vae = vae_loader("sd1.safetensors")[0]
    assert torch.equal(_image(model, clip, vae), expected)


def test_dual_clip_loader_samples_the_sdxl_checkpoints_image(env, checkpoint_images):
    expected = _checkpoint_image(checkpoint_images, "sdxl.safetensors")
    model = unet_loader("sdxl.safetensors", "default")[0]
    clip = dual_clip_loader("sdxl_clip_l.safetensors", "sdxl_clip_g.safetensors", "sdxl", device="cpu")[0]
    vae = vae_loader("sdxl.safetensors")[0]
    assert torch.equal(_image(model, clip, vae), expected)


def test_diffusers_loader_samples_the_checkpoints_image(env, checkpoint_images):
    expected = _checkpoint_image(checkpoint_images, "sdxl.safetensors")
    assert torch.equal(_image(*diffusers_loader("pipelines/sdxl")), expected)


def test_fp8_unet_samples_with_fp8_weights_cast_per_layer(env, base):
    """ComfyUI's fp8_e4m3fn: weights stored fp8, each layer computing in float32 (the CPU's UNet
    dtype) with its weight cast up -- the image of a float32 model holding the fp8-rounded weights."""
    _, states = base
    stored = unet_loader("sd1.safetensors", "fp8_e4m3fn")[0]
    assert {p.dtype for p in stored.model.diffusion_model.parameters()} == {torch.float8_e4m3fn}
    reference = unet_loader("sd1.safetensors", "default")[0]
    weights = under(states["sd1"], "model.diffusion_model.")
    with torch.no_grad():
        for name, param in reference.model.diffusion_model.named_parameters():
            param.copy_(weights[name].to(torch.float8_e4m3fn).float())
    clip = clip_loader("sd1_clip_l.safetensors", "stable_diffusion")[0]
    vae = vae_loader("sd1.safetensors")[0]
    image = _image(stored, clip, vae)
    assert torch.isfinite(image).all()
    assert torch.equal(image, _image(reference, clip, vae))
    assert {p.dtype for p in stored.model.diffusion_model.parameters()} == {torch.float8_e4m3fn}  # unchanged
    e5m2 = unet_loader("sd1.safetensors", "fp8_e5m2")[0]
    assert {p.dtype for p in e5m2.model.diffusion_model.parameters()} == {torch.float8_e5m2}


def _unsupported(types):
    """The loader types no registered family's encoder set answers."""
    from comfy_core.families import encoder_sets
    from comfy_core.split.clip_types import supported_types

    supported = set(supported_types(encoder_sets()))
    return [t for t in types if t not in supported]


def test_no_type_a_family_answers_is_described_as_missing():
    """The "it needs the X family" words are for types no encoder set answers; a family that
    arrives takes its type out of them."""
    from comfy_core.families import encoder_sets
    from comfy_core.split.clip_types import NEEDS, supported_types

    assert not set(NEEDS) & set(supported_types(encoder_sets()))


@pytest.mark.parametrize("clip_type", _unsupported(CLIP_LOADER_TYPES))
def test_clip_loader_types_we_do_not_have_are_input_errors(env, clip_type):
    with pytest.raises(NodeInputError, match=f"input 'type' .*'{clip_type}' is not supported"):
        clip_loader("sd1_clip_l.safetensors", clip_type)


@pytest.mark.parametrize("clip_type", _unsupported(DUAL_CLIP_LOADER_TYPES))
def test_dual_clip_loader_types_we_do_not_have_are_input_errors(env, clip_type):
    with pytest.raises(NodeInputError, match=f"'{clip_type}' is not supported"):
        dual_clip_loader("sdxl_clip_l.safetensors", "sdxl_clip_g.safetensors", clip_type)


def test_bad_names_and_choices_are_input_errors(env):
    with pytest.raises(NodeInputError, match="unet_name"):
        unet_loader("missing.safetensors", "default")
    with pytest.raises(NodeInputError, match="weight_dtype"):
        unet_loader("sd1.safetensors", "fp4")
    with pytest.raises(NodeInputError, match="device"):
        clip_loader("sd1_clip_l.safetensors", "stable_diffusion", device="tpu")
    with pytest.raises(NodeInputError, match="model_path"):
        diffusers_loader("../pipelines/sd1")
    with pytest.raises(NodeInputError, match="model_path"):
        diffusers_loader("pipelines")  # a folder, but no model_index.json in it


# --- LoadImageOutput ---------------------------------------------------------------------------

@pytest.fixture
def image_env(tmp_path):
    environment = Environment.rooted_at(tmp_path)
    environment.ensure_dirs()
    token = set_current(NodeContext("p", "1", "1", None, environment))
    yield environment
    reset_current(token)


def test_load_image_output_reads_the_output_folder(image_env):
    pixels = np.arange(4 * 5 * 4, dtype=np.uint8).reshape(4, 5, 4) * 3
    Image.fromarray(pixels, "RGBA").save(image_env.output_dir / "ComfyUI_00001_.png")
    image, mask = load_image_output("ComfyUI_00001_.png [output]")
    assert image.shape == (1, 4, 5, 3) and mask.shape == (1, 4, 5)
    assert torch.equal(image[0], torch.from_numpy(pixels[..., :3].astype(np.float32) / 255.0))
    assert torch.equal(mask[0], 1.0 - torch.from_numpy(pixels[..., 3].astype(np.float32) / 255.0))


def test_load_image_output_validates_and_hashes_like_load_image(image_env):
    behaviour = spec_of(load_image_output).behaviour
    Image.new("RGB", (2, 2), (9, 9, 9)).save(image_env.output_dir / "a.png")
    assert behaviour.validate_inputs(image="a.png [output]") is True
    # A bare name is looked up in the input folder, as ComfyUI's get_annotated_filepath does.
    assert behaviour.validate_inputs(image="a.png") == "Invalid image file: a.png"
    first = behaviour.is_changed(image="a.png [output]")
    Image.new("RGB", (2, 2), (10, 9, 9)).save(image_env.output_dir / "a.png")
    assert behaviour.is_changed(image="a.png [output]") != first
    assert isinstance(behaviour.validate_inputs(image="../a.png [output]"), str)


# --- object_info --------------------------------------------------------------------------------

def test_object_info_is_comfyuis(tmp_path):
    registry = Registry()
    register_builtin_nodes(registry)
    ours = registry.object_info(Environment.rooted_at(tmp_path))
    theirs = comfyui_object_info()
    assert differences({n: ours[n] for n in SPLIT_NODES}, theirs) == {}
    # The whole entries, descriptions and the editor's options (upload, remote refresh) included,
    # once today's additions are taken off: the three keys today's server adds to every node, and
    # the choices added after 0.3.64's at the end of a combo (CLIPLoader's newer types).
    assert {n: as_0364(ours[n], theirs[n]) for n in SPLIT_NODES} == {n: theirs[n] for n in SPLIT_NODES}


def as_0364(entry: dict, theirs: dict) -> dict:
    entry = {k: v for k, v in entry.items() if k not in ("is_input_list", "has_intermediate_output", "search_aliases")}
    inputs = {}
    for section, values in entry["input"].items():
        inputs[section] = {}
        for name, declared in values.items():
            old = theirs["input"].get(section, {}).get(name)
            if (isinstance(declared, (list, tuple)) and declared and isinstance(declared[0], list)
                    and isinstance(old, list) and old and isinstance(old[0], list)
                    and declared[0][:len(old[0])] == old[0]):
                declared = [old[0], *declared[1:]]
            inputs[section][name] = declared
    return {**entry, "input": inputs}


def test_the_nodes_type_lists_are_the_loaders():
    from comfy_core.split import CLIP_LOADER_TYPES as core_single
    from comfy_core.split import DUAL_CLIP_LOADER_TYPES as core_dual

    assert tuple(CLIP_LOADER_TYPES) == core_single and tuple(DUAL_CLIP_LOADER_TYPES) == core_dual

"""ModelPatchLoader and USOStyleReference (today's ComfyUI, comfy_extras/nodes_model_patch.py): the
`model_patches` folder kind, loading through the node from a folder, refusals naming the patch
kind, and USO's tokens in a Flux MODEL loaded by UNETLoader with a SigLIP CLIP vision output
from CLIPVisionLoader / CLIPVisionEncode, against the projection computed here."""
from __future__ import annotations

import pytest
import torch

from comfy_core.model_patches.uso import UsoStyleProjector, UsoStyleProjectorPatch
from graph.context import NodeContext, reset_current, set_current
from graph.native import spec_of
from nodes import clip_vision as cv_nodes
from nodes import model_patch_loader as mp
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.loaders import unet_loader
from tests.comfy_core.model_patches.test_uso_patch_files import reference_projection
from tests.fixtures.clip_vision import write_tiny_clip_vision
from tests.fixtures.clips import one_thread  # noqa: F401 (autouse fixture)
from tests.fixtures.flux_files import write_tiny_flux
from tests.fixtures.model_patch_files import (foreign_patch_state_dict, uso_projector_state_dict, write_patch_file)


@pytest.fixture
def env(tmp_path):
    environment = Environment.rooted_at(tmp_path)
    models = tmp_path / "models"
    write_patch_file(models / "model_patches" / "uso.safetensors", uso_projector_state_dict(seed=2))
    write_patch_file(models / "model_patches" / "narrow.safetensors", uso_projector_state_dict(hidden_size=32))
    write_patch_file(models / "model_patches" / "sub" / "qwen.safetensors",
                     foreign_patch_state_dict("qwen_image_21_fun_controlnet"))
    write_patch_file(models / "model_patches" / "zimage.safetensors", foreign_patch_state_dict("wan_uni3c_controlnet"))
    # SigLIP: 16 wide, 20 layers (USO reads layer -20), 28 px in 14 px patches: 4 tokens.
    write_tiny_clip_vision(models / "clip_vision" / "siglip.safetensors", "siglip", width=16, layers=20, seed=3)
    write_tiny_clip_vision(models / "clip_vision" / "short.safetensors", "siglip", width=16, layers=12, seed=3)
    write_tiny_clip_vision(models / "clip_vision" / "clip.safetensors", "clip", width=16, seed=3)
    write_tiny_flux(models / "diffusion_models" / "flux.safetensors", seed=4)
    token = set_current(NodeContext("p", "1", "1", None, environment))
    yield environment
    reset_current(token)


def test_model_patches_is_a_folder_kind(tmp_path):
    folders = Environment.rooted_at(tmp_path).folders
    assert folders.paths("model_patches") == [(tmp_path / "models" / "model_patches").resolve()]


def test_the_loader_lists_the_folder(env):
    assert spec_of(mp.model_patch_loader).input("name").combo_values(env) == [
        "narrow.safetensors", "sub/qwen.safetensors", "uso.safetensors", "zimage.safetensors"]


def test_the_loader_builds_a_uso_projector(env):
    (patch,) = mp.model_patch_loader("uso.safetensors")
    assert isinstance(patch.model, UsoStyleProjector)
    assert patch.model.config.hidden_size == 64 and patch.model.config.siglip_tokens == 4


@pytest.mark.parametrize("name, title", [("sub/qwen.safetensors", "Qwen-Image 2.1 Fun ControlNet"),
                                         ("zimage.safetensors", "Wan Uni3C ControlNet")])
def test_the_loader_refuses_kinds_without_a_family_here(env, name, title):
    with pytest.raises(NodeInputError, match=title) as info:
        mp.model_patch_loader(name)
    assert info.value.input_name == "name"
    with pytest.raises(NodeInputError, match="model_patches"):
        mp.model_patch_loader("missing.safetensors")


def _image() -> torch.Tensor:
    return torch.rand(1, 32, 32, 3, generator=torch.Generator().manual_seed(0))


def _run(model, tokens_in: dict) -> torch.Tensor:
    options = model.model_options["transformer_options"]
    with torch.no_grad(), model.applied() as dm:
        return dm.diffusion_model(**tokens_in, transformer_options=options)


def test_uso_style_reference_puts_the_projected_style_before_the_text(env):
    (model,) = unet_loader("flux.safetensors", "default")
    (patch,) = mp.model_patch_loader("uso.safetensors")
    (clip_vision,) = cv_nodes.load_clip("siglip.safetensors")
    (output,) = cv_nodes.encode(clip_vision, _image(), "center")
    (styled,) = mp.uso_style_reference(model, patch, output)

    assert styled is not model
    assert "post_input" not in model.model_options["transformer_options"].get("patches", {})
    (uso,) = styled.model_options["transformer_options"]["patches"]["post_input"]
    assert isinstance(uso, UsoStyleProjectorPatch) and uso.models() == [patch]
    # A clone of the styled MODEL shares the patch (and its projector), it does not copy weights.
    assert styled.clone().model_options["transformer_options"]["patches"]["post_input"][0] is uso
    layers = torch.stack((output.all_hidden_states[:, -20], output.all_hidden_states[:, -11],
                          output.penultimate_hidden_states))
    tokens = reference_projection(uso_projector_state_dict(seed=2), layers)  # [1, 6, 64]

    def by_hand(kwargs: dict) -> dict:
        return {**kwargs, "txt": torch.cat([tokens.to(kwargs["txt"].dtype), kwargs["txt"]], 1),
                "txt_ids": torch.cat([torch.zeros(1, 6, 3, dtype=kwargs["txt_ids"].dtype), kwargs["txt_ids"]], 1)}

    gen = torch.Generator().manual_seed(1)
    inputs = dict(x=torch.randn(1, 16, 8, 8, generator=gen), timestep=torch.tensor([0.5]),
                  context=torch.randn(1, 3, 32, generator=gen), y=torch.randn(1, 24, generator=gen),
                  guidance=torch.tensor([3.5]))
    got = _run(styled, inputs)
    expected = model.clone()
    expected.add_block_patch("post_input", by_hand)
    torch.testing.assert_close(got, _run(expected, inputs), atol=1e-4, rtol=1e-4)
    assert (got - _run(model, inputs)).abs().max() > 1e-3


def test_uso_style_reference_typed_errors(env):
    (model,) = unet_loader("flux.safetensors", "default")
    (patch,) = mp.model_patch_loader("uso.safetensors")
    (narrow,) = mp.model_patch_loader("narrow.safetensors")
    (siglip,) = cv_nodes.load_clip("siglip.safetensors")
    (output,) = cv_nodes.encode(siglip, _image(), "center")
    with pytest.raises(NodeInputError, match="hidden width 32") as info:
        mp.uso_style_reference(model, narrow, output)
    assert info.value.input_name == "model"
    with pytest.raises(NodeInputError, match="USO style projector") as info:
        mp.uso_style_reference(model, siglip, output)
    assert info.value.input_name == "model_patch"
    for name, why in (("short.safetensors", "at least 20"), ("clip.safetensors", "SigLIP")):
        (vision,) = cv_nodes.load_clip(name)
        (other,) = cv_nodes.encode(vision, _image(), "center")
        with pytest.raises(NodeInputError, match=why) as info:
            mp.uso_style_reference(model, patch, other)
        assert info.value.input_name == "clip_vision_output"
    with pytest.raises(NodeInputError, match="MODEL"):
        mp.uso_style_reference("not a model", patch, output)


def test_ksampler_runs_a_styled_flux_with_cond_and_uncond_batched(env):
    """Two KSampler steps at CFG 2: the positive and negative run as one batch of two, which the
    one reference image serves; the style changes the result."""
    from nodes.sampling import ksampler

    (model,) = unet_loader("flux.safetensors", "default")
    (patch,) = mp.model_patch_loader("uso.safetensors")
    (clip_vision,) = cv_nodes.load_clip("siglip.safetensors")
    (output,) = cv_nodes.encode(clip_vision, _image(), "center")
    (styled,) = mp.uso_style_reference(model, patch, output)
    gen = torch.Generator().manual_seed(2)
    positive = [[torch.randn(1, 3, 32, generator=gen), {"pooled_output": torch.randn(1, 24, generator=gen)}]]
    negative = [[torch.randn(1, 3, 32, generator=gen), {"pooled_output": torch.randn(1, 24, generator=gen)}]]
    latent = {"samples": torch.zeros(1, 16, 8, 8)}
    (plain,) = ksampler(model, 3, 2, 2.0, "euler", "simple", positive, negative, latent)
    (with_style,) = ksampler(styled, 3, 2, 2.0, "euler", "simple", positive, negative, latent)
    assert with_style["samples"].shape == (1, 16, 8, 8) and torch.isfinite(with_style["samples"]).all()
    assert (with_style["samples"] - plain["samples"]).abs().max() > 1e-3


def test_the_loader_builds_the_diffsynth_and_z_image_fun_controlnets(env, tmp_path):
    from comfy_core.model_patches.diffsynth import QwenImageBlockWiseControlNet
    from comfy_core.model_patches.zimage_fun import ZImageFunControlNet
    from tests.fixtures.model_patch_files import diffsynth_controlnet_state_dict, zimage_fun_controlnet_state_dict

    folder = tmp_path / "models" / "model_patches"
    write_patch_file(folder / "qwen_image_canny_diffsynth_controlnet.safetensors", diffsynth_controlnet_state_dict())
    write_patch_file(folder / "Z-Image-Turbo-Fun-Controlnet-Union.safetensors",
                     zimage_fun_controlnet_state_dict(version="1.0"))
    (diffsynth,) = mp.model_patch_loader("qwen_image_canny_diffsynth_controlnet.safetensors")
    (fun,) = mp.model_patch_loader("Z-Image-Turbo-Fun-Controlnet-Union.safetensors")
    assert isinstance(diffsynth.model, QwenImageBlockWiseControlNet) and isinstance(fun.model, ZImageFunControlNet)

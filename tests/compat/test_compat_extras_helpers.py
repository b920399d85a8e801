"""Module-level helpers of ComfyUI's `comfy_extras` modules that packs call (compat/extras_helpers.py,
compat/comfy_surface/comfy_extras/), and `comfy` / `comfy_extras` submodules read as attributes."""
from __future__ import annotations

import importlib

import torch

from tests.fixtures.upscale_models import compact_state_dict


def test_composite_pastes_in_place_and_returns_the_destination(session):
    from comfy_extras.nodes_mask import composite

    from comfy_core.image.composite import paste

    destination = torch.zeros(1, 4, 8, 8)
    source = torch.ones(1, 4, 4, 4)
    mask = torch.full((4, 4), 0.5)
    expected = paste(destination, source, 16, 8, mask, 8, False)
    out = composite(destination, source, 16, 8, mask, 8)
    assert out is destination  # ComfyUI writes into the destination, and packs rely on either
    assert torch.equal(out, expected)
    assert out[0, 0, 1, 2].item() == 0.5 and out[0, 0, 0, 0].item() == 0.0


def test_noise_objects_and_guiders_are_ours(session):
    from comfy_extras import nodes_custom_sampler as ncs

    import comfy.samplers
    from comfy_core.sampling.noise import prepare_noise

    latent = {"samples": torch.zeros(2, 4, 8, 8)}
    noise = ncs.Noise_RandomNoise(7)
    assert noise.seed == 7
    assert torch.equal(noise.generate_noise(latent), prepare_noise(latent["samples"], 7, None))
    assert torch.count_nonzero(ncs.Noise_EmptyNoise().generate_noise(latent)) == 0
    assert issubclass(ncs.Guider_Basic, comfy.samplers.CFGGuider)
    assert "SamplerCustomAdvanced" in ncs.NODE_CLASS_MAPPINGS  # the module's nodes are still there


def test_chainner_model_loading_builds_the_spandrel_model(session):
    from comfy_extras.chainner_models import model_loading

    model = model_loading.load_state_dict(compact_state_dict(scale=2))
    assert model.scale == 2
    assert not model.model.training


def test_submodules_are_attributes_of_their_package(session):
    import comfy
    import comfy_extras

    assert comfy.samplers is importlib.import_module("comfy.samplers")  # `import comfy; comfy.samplers...`
    assert comfy_extras.nodes_mask is importlib.import_module("comfy_extras.nodes_mask")
    try:
        comfy.no_such_module
    except AttributeError as ex:
        assert "no_such_module" in str(ex)
    else:
        raise AssertionError("an unknown name must raise AttributeError")

"""ComfyUI's Wan Python API on our runtime: a loaded Wan model is a `comfy.model_base.WAN21`
(`WAN22` for TI2V-5B, `WAN21_Vace` for VACE) with a `comfy.supported_models.WAN21_T2V`-family
config, its network a `comfy.ldm.wan.model.WanModel`, as packs test them."""
from __future__ import annotations

import pytest
import torch

from tests.fixtures.wan_files import write_tiny_wan


@pytest.mark.parametrize("variant,model_class,config_class", [
    ("t2v", "WAN21", "WAN21_T2V"), ("i2v", "WAN21", "WAN21_I2V"), ("ti2v", "WAN22", "WAN22_T2V"),
    ("vace", "WAN21_Vace", "WAN21_Vace"), ("a14b_i2v", "WAN21", "WAN21_T2V"),
])
def test_wan_models_are_comfyuis_classes(session, tmp_path, variant, model_class, config_class):
    import comfy.ldm.wan.model
    import comfy.model_base
    import comfy.supported_models

    from comfy_core.split.diffusion_model import load_diffusion_model

    patcher = load_diffusion_model(write_tiny_wan(tmp_path / f"{variant}.safetensors", variant))
    model = patcher.model
    assert isinstance(model, getattr(comfy.model_base, model_class)) and isinstance(model, comfy.model_base.WAN21)
    assert not isinstance(model, comfy.model_base.Flux)
    config = model.model_config
    assert isinstance(config, getattr(comfy.supported_models, config_class))
    assert isinstance(config, comfy.supported_models.WAN21_T2V)
    assert config.unet_config["image_model"] == "wan2.1" and config.sampling_settings["shift"] == 8.0
    expected_factor = 256 / 2222 * (1.2 if variant == "vace" else 1.0)  # ComfyUI's dim / 2222 (VACE x1.2)
    assert config.memory_usage_factor == pytest.approx(expected_factor)
    assert isinstance(model.diffusion_model, comfy.ldm.wan.model.WanModel)
    assert model.memory_required([1, 16, 3, 8, 8]) > 0
    if variant != "vace":
        assert not isinstance(model, comfy.model_base.WAN21_Vace)


def test_wan_blocks_under_comfyuis_names(session):
    import comfy.ldm.wan.model as wan

    from comfy_core.families.wan import blocks as wan_blocks

    assert wan.WanAttentionBlock is wan_blocks.WanAttentionBlock
    assert wan.sinusoidal_embedding_1d(4, torch.tensor([0.0])).tolist() == [[1.0, 1.0, 0.0, 0.0]]


def test_a_loaded_wan_vae_is_made_of_comfyuis_vae_blocks(session, tmp_path):
    """KJNodes' PatchTritonVAE-style walk: `isinstance(m, comfy.ldm.wan.vae.CausalConv3d / RMS_norm)`
    over `vae.first_stage_model.modules()` finds the Wan VAE's layers (2.1 and 2.2)."""
    import comfy.ldm.wan.vae
    import comfy.ldm.wan.vae2_2
    import comfy.sd
    import comfy.utils

    from tests.fixtures.wan_vae_files import write_wan_vae

    for version in ("2.1", "2.2"):
        vae = comfy.sd.VAE(sd=comfy.utils.load_torch_file(str(write_wan_vae(tmp_path / version, version))))
        modules = list(vae.first_stage_model.modules())
        assert isinstance(vae.first_stage_model, comfy.ldm.wan.vae.WanVAE)
        assert any(isinstance(m, comfy.ldm.wan.vae.CausalConv3d) for m in modules)
        assert any(isinstance(m, comfy.ldm.wan.vae.RMS_norm) for m in modules)
        if version == "2.2":
            assert any(isinstance(m, comfy.ldm.wan.vae2_2.Up_ResidualBlock) for m in modules)

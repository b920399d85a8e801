"""Lumina-Image 2.0 through the family registry: detection from headers (told apart from Z-Image by
its modulation), the shared NextDiT against diffusers' `Lumina2Transformer2DModel` on the same tiny
weights (grouped key/value heads) loaded from a ComfyUI-named file, diffusers-layout files, the
family's sampling as today's ComfyUI's `supported_models.Lumina2`, LoRA spellings, and a 2-step
sample from a split file."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.lumina2 import lumina2_axes
from comfy_core.families.lumina2.keys import Lumina2KeyError, convert_diffusers_state_dict
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.lumina2_files import (CAP_WIDTH, diffusers_lumina2_kwargs, tiny_lumina2_state_dict,
                                          to_diffusers_layout, write_lumina2_unet)
from tests.fixtures.zimage_files import tiny_zimage_state_dict

UNET = "model.diffusion_model."


def _header(state: dict) -> dict:
    return {k: SimpleNamespace(shape=tuple(v.shape), dtype="F32") for k, v in state.items()}


def test_detected_as_lumina2_and_never_as_zimage():
    registry = default_registry()
    state = tiny_lumina2_state_dict(prefix=UNET)
    detection = registry.detect(_header(state), "lumina.safetensors")
    assert detection.family.name == "lumina2"
    config = detection.config
    assert (config.dim, config.n_heads, config.n_kv_heads, config.axes_dims) == (48, 4, 2, (4, 4, 4))
    assert not config.z_image_modulation and config.pad_tokens_multiple is None and config.time_scale == 1.0
    assert (config.rope_theta, config.axes_lens, config.adaln_dim) == (10000.0, (300, 512, 512), 48)
    assert registry.detect_diffusion_model(_header(state)).family.name == "lumina2"
    assert registry.detect_diffusion_model(_header(tiny_zimage_state_dict(prefix=UNET))).family.name == "zimage"
    assert lumina2_axes(96) == (32, 32, 32)  # the released model (ComfyUI's model_detection)
    with pytest.raises(ValueError, match="three even"):
        lumina2_axes(16)


@pytest.fixture(scope="module")
def reference():
    pytest.importorskip("diffusers")
    from diffusers import Lumina2Transformer2DModel

    state = tiny_lumina2_state_dict(seed=1)
    model = Lumina2Transformer2DModel(**diffusers_lumina2_kwargs())
    model.load_state_dict(to_diffusers_layout(state), strict=True)
    return model.eval(), state


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, reference):
    from comfy_core.split.diffusion_model import load_diffusion_model

    _, state = reference
    return load_diffusion_model(save(state, tmp_path_factory.mktemp("lumina2") / "lumina2_tiny.safetensors"))


@pytest.mark.parametrize("size", [(8, 8), (6, 10)])
def test_network_matches_diffusers_on_weights_loaded_from_a_comfyui_file(reference, loaded, size):
    diffusers_model, _ = reference
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 16, *size, generator=gen)
    context = torch.randn(2, 7, CAP_WIDTH, generator=gen)
    sigma = torch.tensor([0.7, 0.2])
    with torch.no_grad():
        ours = loaded.model.diffusion_model(x, sigma, context)
        theirs = diffusers_model(x, 1.0 - sigma, context, torch.ones(2, 7, dtype=torch.bool), return_dict=False)[0]
    # ComfyUI's NextDiT returns the negated prediction (diffusers' pipeline negates it after the call);
    # text positions start at 1 there and at 0 in diffusers: RoPE sees only differences
    assert ours.shape == x.shape
    assert (ours + theirs).abs().max() < 1e-4


def test_diffusers_layout_file_loads_to_comfyuis_names(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    state = tiny_lumina2_state_dict(seed=2)
    diffusers_state = to_diffusers_layout(state)
    converted = convert_diffusers_state_dict(diffusers_state)
    assert converted.keys() == state.keys() and all(torch.equal(converted[k], state[k]) for k in state)
    model = load_diffusion_model(write_lumina2_unet(tmp_path, seed=2, layout="diffusers"))
    assert model.model.family.name == "lumina2"
    loaded = model.model.diffusion_model.state_dict()
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    with pytest.raises(Lumina2KeyError, match="has no ComfyUI name"):
        convert_diffusers_state_dict({**diffusers_state, "layers.0.extra.weight": torch.zeros(1)})
    missing = {k: v for k, v in diffusers_state.items() if k != "layers.1.attn.to_v.weight"}
    with pytest.raises(Lumina2KeyError, match="needs to_q, to_k and to_v"):
        convert_diffusers_state_dict(missing)


def test_lora_spellings_reach_the_grouped_qkv(loaded):
    from comfy_core.lora.dit_keymap import dit_key_map

    key_map = dit_key_map(loaded.model)
    qkv = "diffusion_model.layers.0.attention.qkv.weight"
    # 4 query heads of 12 (48 rows), then 2 key heads (24 rows), then 2 value heads
    for spelling in ("transformer.layers.0.attn.to_v", "diffusion_model.layers.0.attn.to_v", "layers.0.attn.to_v",
                     "lycoris_layers_0_attn_to_v", "lora_transformer_layers_0_attn_to_v"):
        assert key_map[spelling] == (qkv, (0, 72, 24)), spelling
    assert key_map["transformer.layers.0.norm1.linear"] == "diffusion_model.layers.0.adaLN_modulation.1.weight"
    assert key_map["transformer.norm_out.linear_2"] == "diffusion_model.final_layer.linear.weight"
    assert key_map["lora_unet_layers_0_attention_qkv"] == qkv


def test_family_policy_and_two_step_sample(tmp_path, loaded):
    from comfy_core.models.model_sampling import FlowModelSampling
    from comfy_core.sampling.ksampler import sample
    from nodes.model_sampling_nodes import model_sampling_aura_flow

    model = loaded.model
    assert type(model.model_sampling) is FlowModelSampling and model.model_sampling.shift == 6.0
    assert model.model_sampling.multiplier == 1.0 and model.latent_format.channels == 16
    assert type(model.model_config).__name__ == "Lumina2" and model.model_config.memory_usage_factor == 1.4
    unet_config = model.model_config.unet_config
    assert unet_config["n_kv_heads"] == 2 and "z_image_modulation" not in unet_config
    gen = torch.Generator().manual_seed(7)
    positive = [[torch.randn(1, 6, CAP_WIDTH, generator=gen), {}]]
    negative = [[torch.randn(1, 3, CAP_WIDTH, generator=gen), {}]]
    noise = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    (shifted,) = model_sampling_aura_flow(loaded, 6.0)
    out = [sample(m, noise, 2, 4.0, "euler", "simple", positive, negative, torch.zeros(1, 16, 8, 8))
           for m in (loaded, shifted)]
    assert out[0].shape == (1, 16, 8, 8) and torch.isfinite(out[0]).all()
    assert (out[0] - out[1]).abs().max() < 1e-6

"""Flux.1 structure from names and shapes only (header entries, never data), dev vs schnell, typed
errors for broken files, and the diffusers <-> BFL key map (ComfyUI's `flux_to_diffusers`
semantics) checked against the fixture's independent diffusers-layout conversion."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from comfy_core.families.flux.dit import FluxConfig, FluxConfigError, default_axes_dim, is_flux
from comfy_core.families.flux.keys import (FluxKeyError, HeaderShape, convert_bfl_state_dict_to_diffusers,
                                           convert_diffusers_state_dict, diffusers_flux_facts, diffusers_header_shapes,
                                           flux_to_diffusers, is_diffusers_flux, swap_scale_shift)
from tests.fixtures import flux_files
from tests.fixtures.flux_files import (SINGLE_FILE_PREFIX, tiny_flux_diffusers_state_dict, tiny_flux_params,
                                       tiny_flux_state_dict)


@dataclasses.dataclass(frozen=True)
class Entry:
    shape: tuple[int, ...]


def _header(params: dict, prefix: str = "") -> dict[str, Entry]:
    return {prefix + name: Entry(shape) for name, shape in flux_files._shapes(params).items()}


def _full(guidance: bool) -> dict:
    params = tiny_flux_params(guidance, hidden=3072, heads=24, depth=19, depth_single=38, context_in_dim=4096,
                              vec_in_dim=768)
    assert params["axes_dim"] == [16, 56, 56]
    return params


@pytest.mark.parametrize("guidance, variant", [(True, "dev"), (False, "schnell")])
def test_full_size_flux_detected_from_a_header(guidance, variant):
    config = FluxConfig.detect_from_weights(_header(_full(guidance), SINGLE_FILE_PREFIX), SINGLE_FILE_PREFIX)
    assert config == dataclasses.replace(FluxConfig(), guidance_embed=guidance)
    assert config.variant == variant
    assert config.params()["axes_dim"] == [16, 56, 56]


def test_tiny_flux_detected_with_its_widths():
    params = tiny_flux_params(False, depth=2, depth_single=3, in_channels=32)
    config = FluxConfig.detect_from_weights(_header(params))
    assert config.params() == params
    assert config.head_dim == 32 and config.num_heads == 2


def test_is_flux_needs_the_bfl_double_blocks_and_vector_in():
    header = _header(tiny_flux_params())
    assert is_flux(header)
    assert not is_flux(header, "model.diffusion_model.")
    assert not is_flux({k: v for k, v in header.items() if not k.startswith("vector_in.")})
    assert not is_flux(tiny_flux_diffusers_state_dict())


def test_axes_split_keeps_flux_proportions():
    assert default_axes_dim(128) == (16, 56, 56)
    assert default_axes_dim(32) == (4, 14, 14)
    assert default_axes_dim(16) == (4, 6, 6)
    with pytest.raises(FluxConfigError):
        default_axes_dim(7)


@pytest.mark.parametrize("breakage, message", [
    (lambda h: h.pop("img_in.weight"), "img_in.weight"),
    (lambda h: h.pop("double_blocks.1.img_attn.qkv.weight"), "double_blocks.1.img_attn.qkv.weight"),
    (lambda h: [h.pop(k) for k in list(h) if k.startswith("single_blocks.1.")], "none numbered [1]"),
    (lambda h: h.__setitem__("single_blocks.0.linear1.weight", Entry((10, 64))), "single_blocks.0.linear1.weight"),
    (lambda h: h.__setitem__("txt_in.weight", Entry((48, 32))), "txt_in.weight"),
    (lambda h: h.__setitem__("double_blocks.0.img_attn.norm.query_norm.scale", Entry((24,))), "head width"),
])
def test_broken_headers_raise_typed_errors(breakage, message):
    header = _header(tiny_flux_params(depth=2, depth_single=3))
    breakage(header)
    with pytest.raises(FluxConfigError, match=message.replace("[", r"\[").replace("]", r"\]")) as raised:
        FluxConfig.detect_from_weights(header)
    assert isinstance(raised.value, ValueError)


def test_impossible_parameters_are_config_errors():
    with pytest.raises(FluxConfigError):
        FluxConfig(hidden_size=64, num_heads=3)
    with pytest.raises(FluxConfigError):
        FluxConfig(hidden_size=64, num_heads=2, axes_dim=(16, 56, 56))


def test_key_map_has_comfyui_entry_forms():
    key_map = flux_to_diffusers({"depth": 1, "depth_single_blocks": 1, "hidden_size": 64}, output_prefix="dm.")
    assert key_map["transformer_blocks.0.attn.to_k.weight"] == ("dm.double_blocks.0.img_attn.qkv.weight", (0, 64, 64))
    assert key_map["transformer_blocks.0.attn.add_v_proj.bias"] == ("dm.double_blocks.0.txt_attn.qkv.bias",
                                                                    (0, 128, 64))
    assert key_map["single_transformer_blocks.0.proj_mlp.weight"] == ("dm.single_blocks.0.linear1.weight",
                                                                      (0, 192, 256))
    assert key_map["transformer_blocks.0.attn.norm_added_q.weight"] == "dm.double_blocks.0.txt_attn.norm.query_norm.scale"
    assert key_map["time_text_embed.guidance_embedder.linear_1.weight"] == "dm.guidance_in.in_layer.weight"
    target, offset, fn = key_map["norm_out.linear.weight"]
    assert (target, offset, fn) == ("dm.final_layer.adaLN_modulation.1.weight", None, swap_scale_shift)
    w = torch.arange(4.0)
    assert torch.equal(swap_scale_shift(w), torch.tensor([2.0, 3.0, 0.0, 1.0]))


@pytest.mark.parametrize("guidance", [True, False])
def test_diffusers_state_dict_converts_to_the_bfl_tensors(guidance):
    arch = dict(depth=2, depth_single=2)
    bfl = tiny_flux_state_dict(guidance, seed=4, **arch)
    diffusers = tiny_flux_diffusers_state_dict(guidance, seed=4, **arch)
    assert is_diffusers_flux(diffusers) and not is_diffusers_flux(bfl)
    facts = diffusers_flux_facts(diffusers)
    assert facts == {"depth": 2, "depth_single_blocks": 2, "hidden_size": 64, "mlp_ratio": 4.0}
    converted = convert_diffusers_state_dict(diffusers, output_prefix=SINGLE_FILE_PREFIX)
    assert sorted(converted) == sorted(SINGLE_FILE_PREFIX + k for k in bfl)
    assert all(torch.equal(converted[SINGLE_FILE_PREFIX + k], v) for k, v in bfl.items())
    config = FluxConfig.detect_from_weights(bfl)
    back = convert_bfl_state_dict_to_diffusers(bfl, config, output_prefix="transformer.")
    assert sorted(back) == sorted("transformer." + k for k in diffusers)
    assert all(torch.equal(back["transformer." + k], v) for k, v in diffusers.items())


def test_diffusers_header_detects_like_the_bfl_one():
    diffusers = {k: Entry(tuple(v.shape)) for k, v in tiny_flux_diffusers_state_dict(True, depth=2).items()}
    shapes = diffusers_header_shapes(diffusers)
    assert all(isinstance(v, HeaderShape) for v in shapes.values())
    assert FluxConfig.detect_from_weights(shapes) == FluxConfig.detect_from_weights(tiny_flux_state_dict(True, depth=2))


def test_diffusers_conversion_refuses_unknown_and_incomplete_tensors():
    diffusers = tiny_flux_diffusers_state_dict()
    with pytest.raises(FluxKeyError, match="no BFL name"):
        convert_diffusers_state_dict({**diffusers, "transformer_blocks.0.attn.extra.weight": torch.zeros(1)})
    incomplete = {k: v for k, v in diffusers.items() if k != "single_transformer_blocks.0.attn.to_k.weight"}
    with pytest.raises(FluxKeyError, match="single_blocks.0.linear1.weight"):
        convert_diffusers_state_dict(incomplete)
    assert issubclass(FluxKeyError, ValueError)

"""MMDiT numerics against an independent implementation (diffusers' `SD3Transformer2DModel`,
test-only) on the same tiny random weights, given to diffusers in its own names and converted to
SAI's names by our key map (comfy_core.families.sd3.keys)."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.sd3.mmdit import MMDiT, MMDiTConfig
from comfy_core.families.sd3.keys import convert_diffusers_state_dict, mmdit_to_diffusers, sai_shapes_from_diffusers
from tests.fixtures.mmdit_files import TINY, VARIANTS, mmdit_shapes, tiny_diffusers_mmdit_state_dict

diffusers = pytest.importorskip("diffusers")


def diffusers_kwargs(variant: str) -> dict:
    arch = {**TINY, **VARIANTS[variant]}
    return dict(sample_size=16, patch_size=arch["patch"], in_channels=arch["in_channels"], num_layers=arch["depth"],
                attention_head_dim=64, num_attention_heads=arch["depth"], joint_attention_dim=arch["context"],
                caption_projection_dim=64 * arch["depth"], pooled_projection_dim=arch["pooled"],
                out_channels=arch["in_channels"], pos_embed_max_size=arch["table"],
                dual_attention_layers=tuple(arch["x_attn_layers"]),
                qk_norm="rms_norm" if arch["qk_norm"] else None)


def _pair(variant: str, seed: int):
    state = tiny_diffusers_mmdit_state_dict(variant, seed=seed)
    theirs = diffusers.SD3Transformer2DModel(**diffusers_kwargs(variant))
    theirs.load_state_dict(state, strict=True)
    converted = convert_diffusers_state_dict(state)
    config = MMDiTConfig.detect_from_weights(converted, prefix="")
    with torch.device("meta"):
        ours = MMDiT.from_config(config)
    ours.load_state_dict(converted, strict=True, assign=True)
    return ours.eval(), theirs.eval()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_mmdit_matches_diffusers(variant):
    ours, theirs = _pair(variant, seed=3)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 16, 8, 12, generator=gen)  # non-square: a 4 x 6 crop of the 8 x 8 table
    t = torch.tensor([999.0, 21.5])  # sigma * 1000
    context = torch.randn(2, 5, 64, generator=gen)
    y = torch.randn(2, 64, generator=gen)
    with torch.no_grad():
        a = ours(x, t, context=context, y=y)
        b = theirs(hidden_states=x, encoder_hidden_states=context, pooled_projections=y, timestep=t).sample
    assert a.shape == x.shape
    assert a.abs().max() > 0.1
    assert (a - b).abs().max() < 1e-4


def test_converted_names_and_shapes_are_the_sai_layout():
    for variant in VARIANTS:
        converted = convert_diffusers_state_dict(tiny_diffusers_mmdit_state_dict(variant))
        assert {k: tuple(v.shape) for k, v in converted.items()} == mmdit_shapes(variant)


def test_header_shapes_convert_like_tensors():
    state = tiny_diffusers_mmdit_state_dict("sd35_medium")
    shapes = sai_shapes_from_diffusers(state)
    assert MMDiTConfig.detect_from_weights(shapes, prefix="") == \
        MMDiTConfig.detect_from_weights(convert_diffusers_state_dict(state), prefix="")


def test_key_map_has_comfyui_semantics():
    key_map = mmdit_to_diffusers({"depth": 2}, output_prefix="diffusion_model.")
    assert key_map["transformer_blocks.0.attn.to_k.weight"] == ("diffusion_model.joint_blocks.0.x_block.attn.qkv.weight",
                                                                 (0, 128, 128))
    assert key_map["transformer_blocks.1.attn.add_v_proj.bias"] == (
        "diffusion_model.joint_blocks.1.context_block.attn.qkv.bias", (0, 256, 128))
    assert key_map["transformer_blocks.0.attn2.to_q.weight"][0] == "diffusion_model.joint_blocks.0.x_block.attn2.qkv.weight"
    assert key_map["proj_out.weight"] == "diffusion_model.final_layer.linear.weight"
    target, offset, fn = key_map["norm_out.linear.weight"]
    assert target == "diffusion_model.final_layer.adaLN_modulation.1.weight" and offset is None
    assert torch.equal(fn(torch.arange(4.0)), torch.tensor([2.0, 3.0, 0.0, 1.0]))
    # the last block's pre-only context adaLN is swapped too; an earlier one is renamed only
    assert key_map["transformer_blocks.1.norm1_context.linear.bias"][2] is fn
    assert key_map["transformer_blocks.0.norm1_context.linear.bias"] == \
        "diffusion_model.joint_blocks.0.context_block.adaLN_modulation.1.bias"

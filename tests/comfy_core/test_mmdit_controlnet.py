"""SD3 ControlNets (diffusers `SD3ControlNetModel` layout): detection from headers, residuals
against diffusers on the same tiny weights, and the main MMDiT with those residuals against
diffusers' transformer fed the same ControlNet output."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.checkpoint.header import read_safetensors_header
from comfy_core.controlnet.mmdit_controlnet import (SD3ControlNetConfig, build_sd3_controlnet, convert_sd3_controlnet,
                                                    is_sd3_controlnet)
from comfy_core.families.sd3.mmdit import MMDiT, MMDiTConfig, MMDiTConfigError
from comfy_core.families.sd3.keys import convert_diffusers_state_dict
from tests.fixtures.mmdit_files import (TINY, VARIANTS, diffusers_controlnet_shapes, tiny_diffusers_mmdit_state_dict,
                                        tiny_sd3_controlnet_state_dict, write_tiny_sd3_controlnet)

diffusers = pytest.importorskip("diffusers")

DEPTH, BLOCKS = 4, 2  # main model 4 blocks (width 256), ControlNet 2: each residual serves 2 blocks


def _diffusers_kwargs(variant, depth, layers):
    arch = {**TINY, **VARIANTS[variant]}
    return dict(sample_size=16, patch_size=2, in_channels=16, num_layers=layers, attention_head_dim=64,
                num_attention_heads=depth, joint_attention_dim=arch["context"], caption_projection_dim=64 * depth,
                pooled_projection_dim=arch["pooled"], out_channels=16, pos_embed_max_size=arch["table"],
                dual_attention_layers=tuple(arch["x_attn_layers"]), qk_norm="rms_norm" if arch["qk_norm"] else None)


def _controlnets(variant, extra_channels=0):
    state = tiny_sd3_controlnet_state_dict(variant, blocks=BLOCKS, extra_channels=extra_channels, seed=7, depth=DEPTH)
    theirs = diffusers.SD3ControlNetModel(**_diffusers_kwargs(variant, DEPTH, BLOCKS),
                                          extra_conditioning_channels=extra_channels)
    theirs.load_state_dict(state, strict=True)
    config = SD3ControlNetConfig.detect_from_weights(state)
    with torch.device("meta"):
        ours = build_sd3_controlnet(config)
    ours.load_state_dict(convert_sd3_controlnet(state), strict=True, assign=True)
    return ours.eval(), theirs.eval()


def _inputs(hint_channels=16):
    gen = torch.Generator().manual_seed(3)
    return (torch.randn(2, 16, 8, 8, generator=gen), torch.tensor([800.0, 120.0]),
            torch.randn(2, 5, 64, generator=gen), torch.randn(2, 64, generator=gen),
            torch.randn(2, hint_channels, 8, 8, generator=gen))


@pytest.mark.parametrize("variant", ["sd3", "sd35", "sd35_medium"])
def test_residuals_and_controlled_mmdit_match_diffusers(variant):
    cnet, cnet_theirs = _controlnets(variant)
    x, t, context, y, hint = _inputs()
    with torch.no_grad():
        out = cnet(x=x, hint=hint, timesteps=t, context=context, y=y)["output"]
        theirs = cnet_theirs(hidden_states=x, controlnet_cond=hint, encoder_hidden_states=context,
                             pooled_projections=torch.zeros_like(y), timestep=t).controlnet_block_samples
    # ComfyUI's repetition: block i's residual for main blocks 2i, 2i+1; none for the last block
    assert len(out) == DEPTH - 1 and out[0] is out[1] and out[1] is not out[2]
    for ours_r, theirs_r in zip((out[0], out[2]), theirs):
        assert ours_r.abs().max() > 0.05
        assert (ours_r - theirs_r).abs().max() < 1e-4

    state = tiny_diffusers_mmdit_state_dict(variant, seed=8, depth=DEPTH)
    main_theirs = diffusers.SD3Transformer2DModel(**_diffusers_kwargs(variant, DEPTH, DEPTH)).eval()
    main_theirs.load_state_dict(state, strict=True)
    converted = convert_diffusers_state_dict(state)
    with torch.device("meta"):
        main = MMDiT.from_config(MMDiTConfig.detect_from_weights(converted, prefix=""))
    main.load_state_dict(converted, strict=True, assign=True)
    with torch.no_grad():
        a = main.eval()(x, t, context=context, y=y, control={"output": out})
        b = main_theirs(hidden_states=x, encoder_hidden_states=context, pooled_projections=y, timestep=t,
                        block_controlnet_hidden_states=list(theirs)).sample
        plain = main(x, t, context=context, y=y)
    assert (a - plain).abs().max() > 1e-2
    assert (a - b).abs().max() < 1e-4


def test_pooled_vector_is_ignored():
    cnet, _ = _controlnets("sd35")
    x, t, context, y, hint = _inputs()
    with torch.no_grad():
        one = cnet(x=x, hint=hint, timesteps=t, context=context, y=y)["output"][0]
        other = cnet(x=x, hint=hint, timesteps=t, context=context, y=5 * y)["output"][0]
    assert torch.equal(one, other)


def test_detection_from_the_header(tmp_path):
    path = write_tiny_sd3_controlnet(tmp_path, "sd35", blocks=BLOCKS, extra_channels=1, depth=DEPTH)
    tensors = read_safetensors_header(path).tensors
    assert is_sd3_controlnet(tensors)
    config = SD3ControlNetConfig.detect_from_weights(tensors)
    assert (config.mmdit.depth, config.mmdit.num_blocks, config.mmdit.final_layer) == (DEPTH, BLOCKS, False)
    assert config.mmdit.qk_norm == "rms" and config.control_latent_channels == 17 and config.concat_mask
    native = dict(tensors, **{"transformer_blocks.0.adaLN_modulation.1.bias": tensors["pos_embed.proj.bias"]})
    assert not is_sd3_controlnet(native)  # SAI's own SD3.5 ControlNet format is another loader's


def test_inconsistent_controlnet_is_a_typed_error():
    shapes = {k: SimpleNamespace(shape=v) for k, v in diffusers_controlnet_shapes("sd3", blocks=2).items()}
    del shapes["controlnet_blocks.1.weight"]
    with pytest.raises(MMDiTConfigError, match="controlnet_blocks.1.weight is missing"):
        SD3ControlNetConfig.detect_from_weights(shapes)

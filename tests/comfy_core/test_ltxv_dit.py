"""The LTX-Video 0.9.x DiT (comfy_core/families/ltxv/dit.py): numerics against diffusers'
`LTXVideoTransformer3DModel` on the same tiny random weights loaded through our loader (the three
file layouts), detection from names and shapes (and refusal of malformed files), per-token
timesteps from a denoise mask, guide keyframes (positions, dropped tokens, attention weights),
block replacement and STG, and the family's conditioning keys."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.ltxv.conditions import LTXVConditions
from comfy_core.families.ltxv.dit import LTXVConfig, LTXVConfigError, LTXVInputError, LTXVModel
from comfy_core.families.ltxv.keys import convert_diffusers_state_dict, is_diffusers_ltxv
from comfy_core.split.diffusion_model import load_diffusion_model
from tests.fixtures.ltxv_files import (CAPTION, INNER, LAYERS, PREFIX, diffusers_dit_kwargs, tiny_ltxv_state_dict,
                                       to_diffusers_dit, write_tiny_ltxv_unet)

diffusers = pytest.importorskip("diffusers")
TOLERANCE = 1e-4


def _module(seed: int = 0) -> LTXVModel:
    state = tiny_ltxv_state_dict(seed=seed)
    model = LTXVModel.from_config(LTXVConfig.detect_from_weights(state))
    model.load_state_dict(state, strict=True)
    return model.eval()


def _reference(seed: int = 0) -> torch.nn.Module:
    from diffusers import LTXVideoTransformer3DModel

    model = LTXVideoTransformer3DModel(**diffusers_dit_kwargs())
    model.load_state_dict(to_diffusers_dit(tiny_ltxv_state_dict(seed=seed)), strict=True)
    return model.eval()


def _inputs(frames: int = 2, height: int = 3, width: int = 4, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 128, frames, height, width, generator=g)
    context = torch.randn(1, 7, CAPTION, generator=g)
    return x, context


def _diffusers_call(reference, x, sigma, context, frame_rate=25.0, mask=None, timestep=None):
    b, c, f, h, w = x.shape
    tokens = x.flatten(2).transpose(1, 2)
    t = (sigma * 1000.0) if timestep is None else timestep * 1000.0
    out = reference(hidden_states=tokens, encoder_hidden_states=context, timestep=t,
                    encoder_attention_mask=mask, num_frames=f, height=h, width=w,
                    rope_interpolation_scale=(8 / frame_rate, 32, 32), return_dict=False)[0]
    return out.transpose(1, 2).reshape(b, c, f, h, w)


@pytest.mark.parametrize("frame_rate", [25.0, 8.0])
def test_forward_matches_diffusers(frame_rate):
    ours, reference = _module(), _reference()
    x, context = _inputs()
    sigma = torch.tensor([0.7])
    with torch.no_grad():
        got = ours(x, sigma, context, frame_rate=frame_rate)
        want = _diffusers_call(reference, x, sigma, context, frame_rate)
    assert got.shape == x.shape
    assert torch.allclose(got, want, atol=TOLERANCE, rtol=0), (got - want).abs().max()


def test_text_mask_matches_diffusers():
    ours, reference = _module(), _reference()
    x, context = _inputs()
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0]])
    sigma = torch.tensor([0.3])
    with torch.no_grad():
        got = ours(x, sigma, context, attention_mask=mask)
        want = _diffusers_call(reference, x, sigma, context, mask=mask.float())
        unmasked = ours(x, sigma, context)
    assert torch.allclose(got, want, atol=TOLERANCE, rtol=0)
    assert not torch.allclose(got, unmasked, atol=1e-3)


def test_denoise_mask_gives_per_token_timesteps():
    ours, reference = _module(), _reference()
    x, context = _inputs()
    mask = torch.ones(1, 1, 2, 1, 1)
    mask[:, :, 0] = 0.0  # the first frame kept: timestep 0 there
    sigma = torch.tensor([0.6])
    per_token = (mask.expand(1, 1, 2, 3, 4) * 0.6).flatten(1)  # [1, N]
    with torch.no_grad():
        got = ours(x, sigma, context, denoise_mask=mask.expand(1, 128, 2, 3, 4))
        want = _diffusers_call(reference, x, sigma, context, timestep=per_token)
        plain = ours(x, sigma, context)
    assert torch.allclose(got, want, atol=TOLERANCE, rtol=0)
    assert not torch.allclose(got, plain, atol=1e-3)


@pytest.mark.parametrize("layout", ["original", "prefixed", "diffusers"])
def test_file_layouts_load_through_our_loader(tmp_path, layout):
    patcher = load_diffusion_model(write_tiny_ltxv_unet(tmp_path / f"{layout}.safetensors", layout))
    model = patcher.model
    assert model.family.name == "ltxv"
    assert isinstance(model.diffusion_model, LTXVModel)
    reference = _reference()
    x, context = _inputs()
    sigma = torch.tensor([0.5])
    with torch.no_grad():
        got = model.diffusion_model(x, sigma, context)
        want = _diffusers_call(reference, x, sigma, context)
    assert torch.allclose(got, want, atol=TOLERANCE, rtol=0)
    config = model.model_config
    assert type(config).__name__ == "LTXV"
    assert config.unet_config["num_layers"] == LAYERS and config.unet_config["attention_head_dim"] == INNER // 32
    assert config.sampling_settings["shift"] == 2.37


def test_detection_reads_widths_and_refuses_malformed():
    state = tiny_ltxv_state_dict()
    config = LTXVConfig.detect_from_weights(state)
    assert (config.num_layers, config.attention_head_dim, config.caption_channels, config.in_channels) == (
        LAYERS, INNER // 32, CAPTION, 128)
    broken = {k: v for k, v in state.items() if not k.startswith("transformer_blocks.1.")}
    broken["transformer_blocks.2.attn1.to_q.weight"] = state["transformer_blocks.1.attn1.to_q.weight"]
    with pytest.raises(LTXVConfigError, match="none numbered"):
        LTXVConfig.detect_from_weights(broken)
    nine = dict(state)
    nine["adaln_single.linear.weight"] = torch.zeros(9 * INNER, INNER)
    with pytest.raises(LTXVConfigError, match="6 x the width"):
        LTXVConfig.detect_from_weights(nine)
    registry = default_registry()
    names = {PREFIX + k: v for k, v in state.items()}
    assert registry.detect_diffusion_model(names, "x").family.name == "ltxv"


def test_diffusers_names_convert_back():
    state = tiny_ltxv_state_dict()
    converted = to_diffusers_dit(state)
    assert is_diffusers_ltxv(converted) and not is_diffusers_ltxv(state)
    assert convert_diffusers_state_dict(converted).keys() == state.keys()


def test_keyframes_set_guide_positions():
    """The appended guide frame's tokens take the keyframe coordinates: the output equals diffusers'
    run with those positions given as video coordinates."""
    ours, reference = _module(), _reference()
    x, context = _inputs(frames=3)
    f, h, w = 3, 3, 4
    # the last latent frame is a guide placed at pixel frame 0 (an image guide at the start)
    t, y, xx = torch.meshgrid(torch.arange(1), torch.arange(h), torch.arange(w), indexing="ij")
    keyframes = torch.stack([t * 8, y * 32, xx * 32]).reshape(1, 3, -1).float()
    sigma = torch.tensor([0.4])
    with torch.no_grad():
        got = ours(x, sigma, context, keyframe_idxs=keyframes)
        tt, yy, xs = torch.meshgrid(torch.arange(f), torch.arange(h), torch.arange(w), indexing="ij")
        coords = torch.stack([tt * 8.0, yy * 32.0, xs * 32.0]).reshape(1, 3, -1)
        coords[:, :, -h * w:] = keyframes
        coords[:, 0] = coords[:, 0] / 25.0
        tokens = x.flatten(2).transpose(1, 2)
        want = reference(hidden_states=tokens, encoder_hidden_states=context, timestep=sigma * 1000,
                         encoder_attention_mask=None, video_coords=coords, return_dict=False)[0].transpose(1, 2).reshape(x.shape)
    assert torch.allclose(got, want, atol=TOLERANCE, rtol=0)
    with pytest.raises(LTXVInputError, match="whole number"):
        ours(x, sigma, context, keyframe_idxs=keyframes[:, :, :5])


def test_negative_mask_drops_guide_tokens_and_strength_weighs_attention():
    ours = _module()
    x, context = _inputs(frames=3)
    keyframes = torch.zeros(1, 3, 12)
    mask = torch.ones(1, 1, 3, 3, 4)
    mask[:, :, 2, 0, 0] = -1.0  # one padding token of a dilated guide
    sigma = torch.tensor([0.5])
    with torch.no_grad():
        out = ours(x, sigma, context, keyframe_idxs=keyframes, denoise_mask=mask)
        entries = [{"pre_filter_count": 12, "strength": 1.0, "pixel_mask": None, "latent_shape": [1, 3, 4]}]
        same = ours(x, sigma, context, keyframe_idxs=keyframes, denoise_mask=mask, guide_attention_entries=entries)
        weak = ours(x, sigma, context, keyframe_idxs=keyframes, denoise_mask=mask,
                    guide_attention_entries=[{**entries[0], "strength": 0.25}])
    assert torch.equal(out[:, :, 2, 0, 0], torch.zeros_like(out[:, :, 2, 0, 0]))
    assert torch.allclose(out, same)
    assert not torch.allclose(out, weak, atol=1e-4)
    with pytest.raises(LTXVInputError, match="pre_filter_counts"):
        ours(x, sigma, context, keyframe_idxs=keyframes, denoise_mask=mask,
             guide_attention_entries=[{**entries[0], "pre_filter_count": 11}])


def test_block_replacement_and_stg():
    ours = _module()
    x, context = _inputs()
    sigma = torch.tensor([0.5])
    seen = []

    def replace(args, extra):
        seen.append(sorted(args))
        return extra["original_block"](args)

    with torch.no_grad():
        plain = ours(x, sigma, context)
        replaced = ours(x, sigma, context,
                        transformer_options={"patches_replace": {"dit": {("double_block", 1): replace}}})
        perturbed = ours(x, sigma, context, transformer_options={"stg_self_attn_blocks": frozenset({1})})
    assert torch.allclose(plain, replaced) and len(seen) == 1
    assert {"img", "txt", "vec", "pe", "attention_mask"} <= set(seen[0])
    assert not torch.allclose(plain, perturbed, atol=1e-4)


def test_conditions_pass_ltxv_keys():
    conditions = LTXVConditions()
    mask = torch.ones(1, 1, 2, 1, 1)
    out = conditions.extra_conds(None, frame_rate=8.0, denoise_mask=mask, keyframe_idxs=torch.zeros(1, 3, 4),
                                 attention_mask=torch.ones(1, 3))
    assert out["frame_rate"] == 8.0 and out["denoise_mask"] is mask
    assert set(out) == {"frame_rate", "denoise_mask", "keyframe_idxs", "attention_mask"}
    assert conditions.extra_conds(None)["frame_rate"] == 25
    concat = torch.zeros(1, 1, 2, 1, 1)
    assert conditions.extra_conds(None, concat_mask=concat, denoise_mask=mask)["denoise_mask"] is concat
    latent = torch.randn(1, 128, 2, 1, 1)
    assert conditions.scale_latent_inpaint(None, torch.tensor([0.5]), torch.randn_like(latent), latent) is latent


def test_options_of_other_ltx_networks_are_refused():
    config = LTXVConfig.detect_from_weights(tiny_ltxv_state_dict())
    with pytest.raises(LTXVConfigError, match="cross_attention_adaln"):
        LTXVModel.from_config(config, cross_attention_adaln=True)
    built = LTXVModel(in_channels=8, cross_attention_dim=64, attention_head_dim=2, caption_channels=16, num_layers=1,
                      image_model="ltxv", cross_attention_adaln=False)  # ComfyUI's unet_config passed whole
    assert built.config.num_layers == 1 and built.config.caption_channels == 16


@pytest.mark.parametrize("spelling", ["diffusion_model.transformer_blocks.0.attn1.to_q",
                                      "lora_transformer_transformer_blocks_0_attn1_to_q",
                                      "transformer.transformer_blocks.0.attn1.to_q",
                                      "lora_unet_transformer_blocks_0_attn1_to_q"])
def test_lora_spellings_patch_the_network(tmp_path, spelling):
    from comfy_core.lora.loader import load_lora_for_models

    patcher = load_diffusion_model(write_tiny_ltxv_unet(tmp_path / "ltxv.safetensors"))
    g = torch.Generator().manual_seed(5)
    up, down = torch.randn(INNER, 4, generator=g), torch.randn(4, INNER, generator=g)
    dot = spelling.startswith(("diffusion_model.", "transformer."))
    tensors = {f"{spelling}.lora_A.weight" if dot else f"{spelling}.lora_down.weight": down,
               f"{spelling}.lora_B.weight" if dot else f"{spelling}.lora_up.weight": up}
    patched, _, report = load_lora_for_models(patcher, None, tensors, 0.5, 0.0, name="l")
    x, context = _inputs()
    with torch.no_grad():
        before = patcher.model.diffusion_model(x, torch.tensor([0.5]), context)
        with patched.applied() as model:
            weight = model.diffusion_model.transformer_blocks[0].attn1.to_q.weight.detach().clone()
            after = model.diffusion_model(x, torch.tensor([0.5]), context)
    original = tiny_ltxv_state_dict()["transformer_blocks.0.attn1.to_q.weight"]
    assert torch.allclose(weight, original + 0.5 * up @ down, atol=1e-5)
    assert not torch.allclose(before, after, atol=1e-4)


def test_diffusers_lora_names_map_to_comfyui_names():
    from comfy_core.families.ltxv.keys import lora_key_map

    names = ["diffusion_model." + k for k in tiny_ltxv_state_dict()]
    key_map = lora_key_map(names)
    assert key_map["transformer.proj_in"] == "diffusion_model.patchify_proj.weight"
    assert key_map["diffusion_model.transformer_blocks.1.attn2.to_out.0"] == \
        "diffusion_model.transformer_blocks.1.attn2.to_out.0.weight"
    assert key_map["transformer.time_embed.linear"] == "diffusion_model.adaln_single.linear.weight"

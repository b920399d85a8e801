"""Depth Anything 3 (comfy_core/models/da3.py, da3_infer.py): the network against transformers'
Depth Anything (DINOv2 backbone + DPT neck and head, the same equations as DA3's DPT up to the
output activation), loading from one safetensors file in ComfyUI's layout, the refusal of the
multi-view variants, and the pre / post-processing against their equations written here."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.models.da3 import DA3WeightsError, network_from_state_dict, out_layers_for, strip_prefix
from comfy_core.models.da3_infer import (load_da3, normalize_confidence, normalize_min_max, normalize_v2_style,
                                         preprocess, sky_aware_clip, target_size)
from tests.fixtures.template_models_da3 import tiny_config, tiny_state_dict


DINOV2_RENAME = {".attention.attention.query.": ".attention.q_proj.", ".attention.attention.key.": ".attention.k_proj.",
                 ".attention.attention.value.": ".attention.v_proj.", ".attention.output.dense.": ".attention.o_proj."}


def _transformers_model(config):
    """transformers' DepthAnythingForDepthEstimation of the same widths (relative: ReLU output)."""
    transformers = pytest.importorskip("transformers")
    b = config.backbone
    backbone = transformers.Dinov2Config(
        hidden_size=b.hidden_size, num_hidden_layers=b.num_layers, num_attention_heads=b.num_heads,
        intermediate_size=4 * b.hidden_size, patch_size=14, image_size=14 * b.position_grid, layer_norm_eps=1e-6,
        out_indices=[i + 1 for i in config.out_layers], apply_layernorm=True, reshape_hidden_states=False)
    cfg = transformers.DepthAnythingConfig(
        backbone_config=backbone, patch_size=14, reassemble_hidden_size=b.hidden_size,
        reassemble_factors=[4, 2, 1, 0.5], neck_hidden_sizes=list(config.out_channels),
        fusion_hidden_size=config.features, head_hidden_size=32, head_in_index=-1,
        depth_estimation_type="relative", max_depth=1)
    return transformers.DepthAnythingForDepthEstimation(cfg).eval()


def _to_transformers(state: dict[str, torch.Tensor], sky: bool = False) -> dict[str, torch.Tensor]:
    """Our names -> transformers' (the DPT output head from the depth or the sky branch)."""
    out = {}
    for key, value in state.items():
        if key.startswith("backbone."):
            for ours, theirs in DINOV2_RENAME.items():  # transformers 5's attention names
                key = key.replace(ours, theirs)
            out[key] = value
            continue
        k = key[len("head."):]
        if k.startswith("projects."):
            i, tail = k.split(".", 2)[1:]
            out[f"neck.reassemble_stage.layers.{i}.projection.{tail}"] = value
        elif k.startswith("resize_layers."):
            i, tail = k.split(".", 2)[1:]
            out[f"neck.reassemble_stage.layers.{i}.resize.{tail}"] = value
        elif k.startswith("scratch.layer"):
            n = int(k[len("scratch.layer")])
            out[f"neck.convs.{n - 1}.weight"] = value
        elif k.startswith("scratch.refinenet"):
            n = int(k[len("scratch.refinenet")])
            rest = k.split(".", 2)[2]
            layer = f"neck.fusion_stage.layers.{4 - n}."
            rest = (rest.replace("resConfUnit1.", "residual_layer1.").replace("resConfUnit2.", "residual_layer2.")
                    .replace("conv1.", "convolution1.").replace("conv2.", "convolution2.")
                    .replace("out_conv.", "projection."))
            out[layer + rest] = value
        elif k.startswith("scratch.output_conv1."):
            out["head.conv1." + k.rsplit(".", 1)[1]] = value
        elif k.startswith("scratch.output_conv2." if not sky else "scratch.sky_output_conv2."):
            idx, tail = k.rsplit(".", 2)[1:]
            out[f"head.conv{2 if idx == '0' else 3}.{tail}"] = value
    return out


def test_network_matches_transformers_depth_anything():
    config = tiny_config()
    state = tiny_state_dict(config, seed=11)
    state["head.scratch.output_conv2.2.bias"] = torch.full((1,), 4.0)  # a positive logit: ReLU is the identity
    state["head.scratch.sky_output_conv2.2.bias"] = torch.full((1,), 4.0)
    ours = network_from_state_dict(state)
    pixels = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(0))  # the trained 4 x 4 grid
    with torch.no_grad():
        out = ours(pixels)
        for sky in (False, True):
            reference = _transformers_model(config)
            theirs = _to_transformers(state, sky=sky)
            missing, unexpected = reference.load_state_dict(theirs, strict=False)
            assert unexpected == []
            # only what transformers' Depth Anything holds and DA3 does not (mask token, the deepest
            # fusion layer's unused first residual unit)
            assert all(m.endswith("mask_token") or m.startswith("neck.fusion_stage.layers.0.residual_layer1.")
                       for m in missing), missing
            logits = reference(pixel_values=pixels).predicted_depth  # ReLU(logits) = logits here
            if sky:
                torch.testing.assert_close(out["sky"], logits, atol=1e-4, rtol=1e-4)
            else:
                assert bool((logits > 0).all())
                torch.testing.assert_close(out["depth"].log(), logits, atol=1e-4, rtol=1e-4)
    assert out["depth"].shape == (2, 56, 56) and "depth_conf" not in out


def test_confidence_channel_is_exp_plus_one():
    """A two-channel head: depth `exp` of channel 0, confidence `exp + 1` of channel 1 (each checked
    through a one-channel head holding that channel's output weights)."""
    config = tiny_config(output_dim=2, sky=False)
    state = tiny_state_dict(config, seed=3)
    network = network_from_state_dict(state)
    pixels = torch.randn(1, 3, 42, 70, generator=torch.Generator().manual_seed(1))
    one = tiny_config(output_dim=1, sky=False)
    with torch.no_grad():
        out = network(pixels)
        for channel, key, offset in ((0, "depth", 0.0), (1, "depth_conf", 1.0)):
            single = dict(state)
            single["head.scratch.output_conv2.2.weight"] = state["head.scratch.output_conv2.2.weight"][channel:channel + 1]
            single["head.scratch.output_conv2.2.bias"] = state["head.scratch.output_conv2.2.bias"][channel:channel + 1]
            want = network_from_state_dict(single)(pixels)["depth"] + offset
            assert network_from_state_dict(single).config == one
            torch.testing.assert_close(out[key], want)
    assert set(out) == {"depth", "depth_conf"} and out["depth"].shape == (1, 42, 70)


def test_out_layers_follow_comfyuis_table():
    assert out_layers_for(24) == (4, 11, 17, 23)
    assert out_layers_for(12) == (5, 7, 9, 11)
    assert out_layers_for(40) == (19, 27, 33, 39)
    assert out_layers_for(4) == (0, 1, 2, 3)


def test_loads_one_file_with_or_without_a_wrapper_prefix(tmp_path):
    config = tiny_config()
    state = tiny_state_dict(config, seed=5)
    assert not any(k.endswith("mask_token") for k in state)  # DA3 files hold none
    bare, wrapped = tmp_path / "bare.safetensors", tmp_path / "wrapped.safetensors"
    save_file({k: v.half().contiguous() for k, v in state.items()}, str(bare))
    save_file({"model.diffusion_model." + k: v.half().contiguous() for k, v in state.items()}, str(wrapped))
    a, b = load_da3(bare), load_da3(wrapped, dtype=torch.bfloat16)
    assert a.config == config and a.dtype == torch.float32 and b.dtype == torch.bfloat16
    assert a.has_sky and not a.has_confidence
    torch.testing.assert_close(a.model.head.projects[0].weight, state["head.projects.0.weight"].half().float())
    image = torch.rand(1, 30, 40, 3, generator=torch.Generator().manual_seed(2))
    out = a.infer(image, resolution=140)
    assert set(out) == {"depth", "sky"} and out["depth"].shape == (1, 30, 40) and out["depth"].dtype == torch.float32


def test_strip_prefix_leaves_bare_names():
    assert strip_prefix({"backbone.x": 1, "head.y": 2}) == {"backbone.x": 1, "head.y": 2}
    assert strip_prefix({"model.backbone.x": 1, "model.head.y": 2}) == {"backbone.x": 1, "head.y": 2}


def test_refuses_multiview_and_foreign_files():
    config = tiny_config()
    state = tiny_state_dict(config)
    for extra in ("cam_dec.fc_t.weight", "head.scratch.refinenet1_aux.out_conv.weight",
                  "backbone.encoder.layer.2.attention.q_norm.weight"):
        with pytest.raises(DA3WeightsError, match="multi-view"):
            network_from_state_dict({**state, extra: torch.zeros(1)}, "x.safetensors")
    with pytest.raises(DA3WeightsError, match="not a Depth Anything 3"):
        network_from_state_dict({"model.weight": torch.zeros(1)})
    bad = dict(state)
    bad["head.scratch.output_conv1.weight"] = torch.zeros(3, 3, 3, 3)
    with pytest.raises(DA3WeightsError, match="output_conv1.weight"):
        network_from_state_dict(bad)
    short = {k: v for k, v in state.items() if not k.startswith("head.scratch.refinenet2.")}
    with pytest.raises(DA3WeightsError, match="missing"):
        network_from_state_dict(short)


def test_target_size_rounds_to_multiples_of_14():
    assert target_size(1080, 1920, 504) == (280, 504)  # 283.5 -> 284 -> 280
    assert target_size(1080, 1920, 504, "lower_bound_resize") == (504, 896)
    assert target_size(50, 70, 140) == (98, 140)
    assert target_size(7, 7, 140) == (140, 140)
    assert target_size(21, 21, 21) == (28, 28)  # a tie goes up
    with pytest.raises(ValueError, match="resize method"):
        target_size(10, 10, 140, "nearest")


def test_preprocess_normalises_and_resizes():
    image = torch.rand(2, 28, 42, 3, generator=torch.Generator().manual_seed(0))
    x = preprocess(image, 42)  # already 28 x 42: no resize
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    torch.testing.assert_close(x, (image.movedim(-1, 1) - mean) / std)
    y = preprocess(image, 84)
    assert y.shape == (2, 3, 56, 84)


def test_post_processing_against_its_equations():
    gen = torch.Generator().manual_seed(0)
    depth = torch.rand(20, 30, generator=gen) + 1.0
    sky = torch.zeros(20, 30)
    sky[:5] = 0.9  # the top rows are sky
    clipped = sky_aware_clip(depth, sky)
    cap = torch.quantile(depth[5:].flatten(), 0.99)
    torch.testing.assert_close(clipped[:5], torch.full((5, 30), float(cap)))
    torch.testing.assert_close(clipped[5:], depth[5:])
    assert torch.equal(sky_aware_clip(depth, torch.zeros(20, 30)), depth)  # no sky: unchanged

    norm = normalize_v2_style(depth, sky)
    lo, hi = torch.quantile(depth[5:].flatten(), 0.01), torch.quantile(depth[5:].flatten(), 0.99)
    want = 1.0 - ((depth - lo) / (hi - lo)).clamp(0, 1)
    want[:5] = 0.0
    torch.testing.assert_close(norm, want)
    plain = normalize_v2_style(depth)
    lo, hi = torch.quantile(depth.flatten(), 0.01), torch.quantile(depth.flatten(), 0.99)
    torch.testing.assert_close(plain, 1.0 - ((depth - lo) / (hi - lo)).clamp(0, 1))

    batch = torch.stack([depth, depth * 2 + 3])
    mm = normalize_min_max(batch)
    for i in range(2):
        d = batch[i]
        torch.testing.assert_close(mm[i], 1.0 - (d - d.min()) / (d.max() - d.min()))

    conf = torch.stack([depth, torch.full((20, 30), 2.0)])
    nc = normalize_confidence(conf)
    torch.testing.assert_close(nc[0], (depth - depth.min()) / (depth.max() - depth.min()))
    assert torch.equal(nc[1], torch.ones(20, 30))


def test_large_maps_sample_repeatably():
    depth = torch.rand(400, 400, generator=torch.Generator().manual_seed(3))  # 160 000 values > 100 000
    a, b = normalize_v2_style(depth), normalize_v2_style(depth)
    assert torch.equal(a, b)
    exact = normalize_v2_style(depth[:300, :300])  # 90 000: no sampling
    assert exact.shape == (300, 300)

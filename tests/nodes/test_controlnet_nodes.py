"""ControlNet and Canny nodes: ComfyUI 0.3.64's declarations, loading from the model folders,
conditioning plumbing, and KSampler runs with ControlNets on the tiny SD1 checkpoint."""
from __future__ import annotations

import pytest
import torch

from nodes.controlnet import (apply_controlnet, apply_controlnet_old, apply_inpaint_controlnet, inpaint_hint,
                              load_controlnet, load_diff_controlnet, set_union_controlnet_type)
from nodes.errors import NodeInputError
from nodes.sampling import ksampler
from tests.fixtures import controlnets as fx

NODES = ("ControlNetLoader", "DiffControlNetLoader", "ControlNetApply", "ControlNetApplyAdvanced",
         "SetUnionControlNetType", "ControlNetInpaintingAliMamaApply", "Canny")


def test_declared_as_comfyui_declares_them(tmp_path):
    from graph.registry import Registry
    from nodes import register_builtin_nodes
    from nodes.environment import Environment
    from tests.fixtures.object_info_parity import comfyui_object_info, differences

    registry = Registry()
    register_builtin_nodes(registry)
    ours = registry.object_info(Environment.rooted_at(tmp_path))
    theirs = comfyui_object_info()
    assert differences({n: ours[n] for n in NODES}, {n: theirs[n] for n in NODES}) == {}


@pytest.fixture
def env(tmp_path):
    from nodes.environment import Environment

    environment = Environment.rooted_at(tmp_path)
    fx.write_controlnet(tmp_path / "models" / "controlnet" / "cn.safetensors", "sd1", "pth")
    fx.write_t2i_adapter(tmp_path / "models" / "t2i_adapter" / "t2i.safetensors", "full")
    return environment


def test_the_loader_lists_and_loads_both_folders(env, in_node):
    from comfy_core.controlnet.runner import ControlNet
    from comfy_core.controlnet.t2i import T2IAdapter

    with in_node("ControlNetLoader", env=env):
        assert env.folders.filenames("controlnet") == ["cn.safetensors", "t2i.safetensors"]
        assert isinstance(load_controlnet("cn.safetensors")[0], ControlNet)
        assert isinstance(load_controlnet("t2i.safetensors")[0], T2IAdapter)
        with pytest.raises(NodeInputError, match="control_net_name"):
            load_controlnet("missing.safetensors")


def test_diff_controlnet_weights_are_offsets_over_the_model(env, in_node, sd1_with_prompts, tmp_path):
    model = sd1_with_prompts.model
    base = {k: v for k, v in model.model.diffusion_model.state_dict().items()}
    fx.write_controlnet(tmp_path / "models" / "controlnet" / "diff.safetensors", "sd1", "diff", base=base)
    with in_node("DiffControlNetLoader", env=env):
        net = load_diff_controlnet(model, "diff.safetensors")[0].control_model.state_dict()
    original = fx.controlnet_state_dict("sd1")
    for key in ("input_blocks.1.0.in_layers.2.weight", "input_hint_block.0.weight", "time_embed.0.weight"):
        torch.testing.assert_close(net[key], original[key])


def _cn(tmp_path, seed=1):
    from comfy_core.controlnet.load import load_controlnet as load

    return load(fx.write_controlnet(tmp_path / f"cn{seed}.safetensors", "sd1", "pth", seed=seed))


def test_apply_advanced_chains_per_previous_controlnet_and_shares_copies(tmp_path, sd1_with_prompts):
    cn = _cn(tmp_path)
    image = torch.rand(1, 32, 32, 3)
    pos, neg = sd1_with_prompts.positive, sd1_with_prompts.negative
    p1, n1 = apply_controlnet(pos, neg, cn, image, 0.8, 0.1, 0.9)
    c1 = p1[0][1]["control"]
    assert n1[0][1]["control"] is c1 and c1 is not cn and c1.previous_controlnet is None
    assert c1.strength == 0.8 and c1.timestep_percent_range == (0.1, 0.9)
    assert p1[0][1]["control_apply_to_uncond"] is False
    assert torch.equal(c1.cond_hint_original, image.movedim(-1, 1))
    assert "control" not in pos[0][1]  # inputs are not mutated
    p2, n2 = apply_controlnet(p1, neg, cn, image, 1.0, 0.0, 1.0)
    assert p2[0][1]["control"].previous_controlnet is c1
    assert n2[0][1]["control"].previous_controlnet is None  # a different chain, its own copy
    same = apply_controlnet(pos, neg, cn, image, 0.0, 0.0, 1.0)
    assert same[0] is pos and same[1] is neg


def test_apply_old_lends_the_controlnet_to_the_negative(tmp_path, sd1_with_prompts):
    from types import SimpleNamespace

    from comfy_core.sampling.conditioning import convert_cond, prepare_control
    from comfy_core.models.model_sampling import ModelSampling

    cn = _cn(tmp_path)
    (pos,) = apply_controlnet_old(sd1_with_prompts.positive, cn, torch.rand(1, 16, 16, 3), 0.5)
    assert pos[0][1]["control_apply_to_uncond"] is True
    conds = {"positive": convert_cond(pos, "positive"), "negative": convert_cond(sd1_with_prompts.negative, "n")}
    ms = ModelSampling("eps")
    prepare_control(conds, SimpleNamespace(model_sampling=ms))
    assert conds["negative"][0]["control"] is pos[0][1]["control"]
    assert conds["positive"][0]["control"].timestep_range == (ms.percent_to_sigma(0.0), ms.percent_to_sigma(1.0))


def test_set_union_type_copies_with_the_type_index(tmp_path):
    cn = _cn(tmp_path)
    depth = set_union_controlnet_type(cn, "depth")[0]
    auto = set_union_controlnet_type(cn, "auto")[0]
    assert depth.extra_args == {"control_type": [1]} and auto.extra_args == {"control_type": []}
    assert cn.extra_args == {}
    assert set_union_controlnet_type(cn, "repaint")[0].extra_args == {"control_type": [7]}


def test_inpaint_hint_blanks_masked_pixels_and_inverts_the_mask():
    image = torch.rand(1, 8, 8, 3)
    mask = torch.zeros(1, 4, 4)
    mask[:, :2] = 1.0
    blanked, keep = inpaint_hint(image, mask)
    assert keep.shape == (1, 1, 4, 4) and torch.equal(keep[0, 0, :2], torch.zeros(2, 4))
    assert torch.equal(blanked[:, :4], torch.zeros(1, 4, 8, 3)) and torch.equal(blanked[:, 4:], image[:, 4:])


def test_alimama_apply_on_a_plain_controlnet_is_apply_advanced_with_the_vae(tmp_path, sd1_with_prompts):
    cn = _cn(tmp_path)
    vae = type("V", (), {"encode": lambda s, x: x, "decode": lambda s, x: x})()
    image, mask = torch.rand(1, 16, 16, 3), torch.ones(1, 16, 16)
    pos, neg = apply_inpaint_controlnet(sd1_with_prompts.positive, sd1_with_prompts.negative, cn, vae, image, mask,
                                        1.0, 0.0, 1.0)
    c = pos[0][1]["control"]
    assert torch.equal(c.cond_hint_original, image.movedim(-1, 1)) and c.extra_concat_orig == []
    masked = cn.copy()
    masked.concat_mask = True
    pos, _ = apply_inpaint_controlnet(sd1_with_prompts.positive, sd1_with_prompts.negative, masked, vae, image,
                                      mask, 1.0, 0.0, 1.0)
    c = pos[0][1]["control"]
    assert torch.equal(c.cond_hint_original, torch.zeros(1, 3, 16, 16))
    assert len(c.extra_concat_orig) == 1 and torch.equal(c.extra_concat_orig[0], torch.zeros(1, 1, 16, 16))
    with pytest.raises(NodeInputError, match="mask"):
        apply_inpaint_controlnet(sd1_with_prompts.positive, sd1_with_prompts.negative, cn, vae, image,
                                 torch.ones(16), 1.0, 0.0, 1.0)


def test_bad_inputs_are_named(tmp_path, sd1_with_prompts):
    cn = _cn(tmp_path)
    with pytest.raises(NodeInputError, match="control_net"):
        apply_controlnet(sd1_with_prompts.positive, sd1_with_prompts.negative, "x", torch.rand(1, 8, 8, 3), 1, 0, 1)
    with pytest.raises(NodeInputError, match="image"):
        apply_controlnet(sd1_with_prompts.positive, sd1_with_prompts.negative, cn, torch.rand(8, 8), 1, 0, 1)
    with pytest.raises(NodeInputError, match="end_percent"):
        apply_controlnet(sd1_with_prompts.positive, sd1_with_prompts.negative, cn, torch.rand(1, 8, 8, 3), 1, 0, 2)


# --- sampling with ControlNets ------------------------------------------------------------

def _sample(model, pos, neg, steps=4, seed=3):
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    return ksampler(model, seed, steps, 5.0, "euler", "normal", pos, neg, latent)[0]["samples"]


@pytest.fixture(scope="module")
def baseline(sd1_with_prompts):
    return _sample(sd1_with_prompts.model, sd1_with_prompts.positive, sd1_with_prompts.negative)


def test_a_controlnet_changes_the_image_and_strength_zero_does_not(tmp_path, sd1_with_prompts, baseline):
    s = sd1_with_prompts
    cn = _cn(tmp_path)
    image = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(0))
    pos, neg = apply_controlnet(s.positive, s.negative, cn, image, 1.0, 0.0, 1.0)
    controlled = _sample(s.model, pos, neg)
    assert (controlled - baseline).abs().max() > 1e-3
    assert torch.equal(_sample(s.model, pos, neg), controlled)  # repeatable: the run's state is cleaned up
    pos0, neg0 = apply_controlnet(s.positive, s.negative, cn, image, 0.0, 0.0, 1.0)
    assert torch.equal(_sample(s.model, pos0, neg0), baseline)
    # an empty range (start = end = 0: no step's sigma lies in it) is no ControlNet, bit for bit
    pos_e, neg_e = apply_controlnet(s.positive, s.negative, cn, image, 1.0, 0.0, 0.0)
    assert torch.equal(_sample(s.model, pos_e, neg_e), baseline)
    assert pos[0][1]["control"].cond_hint is None  # cleaned up after the run


def test_the_network_runs_only_on_the_steps_inside_the_percent_range(tmp_path, sd1_with_prompts, baseline):
    from comfy_core.sampling.schedulers import calculate_sigmas

    s = sd1_with_prompts
    cn = _cn(tmp_path)
    calls = []
    cn.control_model.register_forward_hook(lambda *_: calls.append(1))
    pos, neg = apply_controlnet(s.positive, s.negative, cn, torch.rand(1, 64, 64, 3), 1.0, 0.5, 1.0)
    late = _sample(s.model, pos, neg, steps=6)
    ms = s.model.model.model_sampling
    sigmas = calculate_sigmas(ms, "normal", 6)[:-1]
    start = ms.percent_to_sigma(0.5)
    inside = sum(1 for sig in sigmas if float(sig) <= start)
    assert 0 < inside < 6
    assert len(calls) == inside  # positive and negative share one batched pass per step
    assert not torch.equal(late, _sample(s.model, s.positive, s.negative, steps=6))


def test_t2i_adapter_and_control_lora_run_in_sampling(tmp_path, sd1_with_prompts, baseline):
    from comfy_core.controlnet.load import load_controlnet as load

    s = sd1_with_prompts
    image = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(1))
    for path in (fx.write_t2i_adapter(tmp_path / "t2i.safetensors", "full"),
                 fx.write_control_lora(tmp_path / "cl.safetensors")):
        pos, neg = apply_controlnet(s.positive, s.negative, load(path), image, 1.0, 0.0, 1.0)
        assert (_sample(s.model, pos, neg) - baseline).abs().max() > 1e-4


def test_chained_controlnets_sample_differently_from_each_alone(tmp_path, sd1_with_prompts):
    s = sd1_with_prompts
    image = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(2))
    a, b = _cn(tmp_path, 1), _cn(tmp_path, 9)
    pa, na = apply_controlnet(s.positive, s.negative, a, image, 1.0, 0.0, 1.0)
    pab, nab = apply_controlnet(pa, na, b, image, 1.0, 0.0, 1.0)
    assert pab[0][1]["control"].previous_controlnet is pa[0][1]["control"]
    only_a, both = _sample(s.model, pa, na), _sample(s.model, pab, nab)
    assert (both - only_a).abs().max() > 1e-4


def test_canny_node_matches_kornia(tmp_path):
    from pathlib import Path

    from safetensors.torch import load_file

    from nodes.canny import canny

    ref = load_file(str(Path(__file__).resolve().parents[1] / "data" / "canny_kornia_reference.safetensors"))
    image = ref["image"].movedim(1, -1)  # [B, H, W, 3]
    for low, high in ((0.4, 0.8), (0.1, 0.2), (0.05, 0.9)):
        (out,) = canny(image, low, high)
        assert out.shape == image.shape
        assert torch.equal(out[..., 0], ref[f"edges_{low}_{high}"][:, 0].float())
        assert torch.equal(out[..., 0], out[..., 2])
    with pytest.raises(NodeInputError, match="low_threshold"):
        canny(image, 0.9, 0.1)


def test_clip_text_encode_controlnet_gives_the_controlnet_its_own_text(tmp_path, tiny_sd1_ckpt, sd1_with_prompts,
                                                                       baseline):
    """CLIPTextEncodeControlnet (0.3.64's nodes_cond): the ControlNet reads the given text instead of
    the prompt (`cross_attn_controlnet`); the model keeps the prompt."""
    from comfy_core.loading import load_checkpoint
    from nodes.controlnet import clip_text_encode_controlnet

    s = sd1_with_prompts
    _, clip, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    cn = _cn(tmp_path)
    image = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(0))
    pos, neg = apply_controlnet(s.positive, s.negative, cn, image, 1.0, 0.0, 1.0)
    controlled = _sample(s.model, pos, neg)
    (same,) = clip_text_encode_controlnet(clip, pos, "a red cube")  # the prompt's own text: no change
    assert torch.equal(same[0][0], pos[0][0]) and "cross_attn_controlnet" not in pos[0][1]
    assert same[0][1]["cross_attn_controlnet"].shape == pos[0][0].shape
    scale = controlled.abs().max()  # the tiny model's latents run to a few hundred

    def off(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max() / scale)

    # The positive now runs in its own batch (its conds differ from the negative's): float noise only
    assert off(_sample(s.model, same, neg), controlled) < 1e-4
    (other,) = clip_text_encode_controlnet(clip, pos, "a blue sphere on grass")
    assert off(_sample(s.model, other, neg), controlled) > 1e-2
    # without a ControlNet the text reaches nothing
    (plain,) = clip_text_encode_controlnet(clip, s.positive, "a blue sphere on grass")
    assert off(_sample(s.model, plain, s.negative), baseline) < 1e-4

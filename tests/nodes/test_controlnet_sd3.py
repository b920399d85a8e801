"""ControlNetApplySD3 ("Apply Controlnet with VAE") and SD3 ControlNets through ControlNetLoader:
ComfyUI 0.3.64's declaration, loading both SD3 ControlNet layouts from the model folders, and
KSampler runs on a tiny MMDiT model where the ControlNet acts only between start and end percent
and its residuals scale with strength."""
from __future__ import annotations

import pytest
import torch

from comfy_core.controlnet.runner import ControlNet
from comfy_core.controlnet.sd3_runner import ControlNetSD35
from comfy_core.models.diffusion import DiffusionModel
from comfy_core.families.sd3.latent_format import sd3_latent_format
from comfy_core.families.sd3.mmdit import MMDiT, MMDiTConfig
from comfy_core.models.model_conditions import PooledConditions
from comfy_core.patching.model import ModelPatcher
from comfy_core.models.model_sampling import FlowModelSampling
from nodes.controlnet import apply_controlnet_sd3, load_controlnet
from nodes.errors import NodeInputError
from nodes.sampling import ksampler
from tests.fixtures.mmdit_files import tiny_mmdit_state_dict, write_tiny_sd3_controlnet
from tests.fixtures.sd35_controlnet_files import write_tiny_sd35_controlnet

STEPS = 4  # simple schedule, shift 3: sigmas 1.0, 0.9, 0.75, 0.5; percent 0.3..0.7 is sigma 0.875..0.5625


def test_declared_as_comfyui_declares_it(tmp_path):
    from graph.registry import Registry
    from nodes import register_builtin_nodes
    from nodes.environment import Environment
    from tests.fixtures.object_info_parity import comfyui_object_info, differences

    registry = Registry()
    register_builtin_nodes(registry)
    ours = registry.object_info(Environment.rooted_at(tmp_path))["ControlNetApplySD3"]
    theirs = comfyui_object_info()["ControlNetApplySD3"]
    assert differences({"n": ours}, {"n": theirs}) == {}
    assert ours["deprecated"] is True and ours["display_name"] == "Apply Controlnet with VAE"


@pytest.fixture(scope="module")
def model():
    state = tiny_mmdit_state_dict("sd35", seed=4, prefix="", depth=2)
    with torch.device("meta"):
        mmdit = MMDiT.from_config(MMDiTConfig.detect_from_weights(state, prefix=""))
    mmdit.load_state_dict(state, strict=True, assign=True)
    return ModelPatcher(DiffusionModel(mmdit.eval().requires_grad_(False), FlowModelSampling(3.0),
                                       sd3_latent_format(), adm=PooledConditions()))


@pytest.fixture(scope="module")
def vae():
    from comfy_core.patching.vae import VaePatcher
    from comfy_core.patching.vae_build import vae_module_from
    from tests.fixtures.vae16_files import tiny_vae16_state_dict

    return VaePatcher(vae_module_from(tiny_vae16_state_dict("bfl", seed=2)), load_device="cpu", offload_device="cpu")


@pytest.fixture(scope="module")
def prompts():
    gen = torch.Generator().manual_seed(5)
    return ([[torch.randn(1, 5, 64, generator=gen), {"pooled_output": torch.randn(1, 64, generator=gen)}]],
            [[torch.randn(1, 5, 64, generator=gen), {"pooled_output": torch.randn(1, 64, generator=gen)}]])


@pytest.fixture(scope="module")
def controlnet(tmp_path_factory):
    from comfy_core.controlnet.load import load_controlnet as load

    return load(write_tiny_sd35_controlnet(tmp_path_factory.mktemp("cn"), "sai", seed=3))


IMAGE = torch.rand(1, 32, 32, 3, generator=torch.Generator().manual_seed(0))


def test_controlnet_loader_reads_both_sd3_layouts_from_the_folder(tmp_path, in_node):
    from nodes.environment import Environment

    env = Environment.rooted_at(tmp_path)
    folder = tmp_path / "models" / "controlnet"
    write_tiny_sd35_controlnet(folder / "sd35_canny.safetensors", "sai", control_type=1)
    write_tiny_sd3_controlnet(folder / "sd3_diffusers.safetensors", "sd35", blocks=2, depth=4)
    with in_node("ControlNetLoader", env=env):
        sai = load_controlnet("sd35_canny.safetensors")[0]
        diffusers = load_controlnet("sd3_diffusers.safetensors")[0]
    assert isinstance(sai, ControlNetSD35) and sai.latent_format == sd3_latent_format()
    assert type(diffusers) is ControlNet and diffusers.latent_format.shift_factor == 0.0


def test_apply_needs_a_vae_and_carries_it_to_both_conditionings(controlnet, vae, prompts):
    positive, negative = prompts
    with pytest.raises(NodeInputError, match="vae"):
        apply_controlnet_sd3(positive, negative, controlnet, None, IMAGE, 1.0, 0.0, 1.0)
    pos, neg = apply_controlnet_sd3(positive, negative, controlnet, vae, IMAGE, 0.7, 0.2, 0.8)
    c = pos[0][1]["control"]
    assert neg[0][1]["control"] is c and isinstance(c, ControlNetSD35) and c is not controlnet
    assert c.vae is vae and c.strength == 0.7 and c.timestep_percent_range == (0.2, 0.8)
    assert pos[0][1]["control_apply_to_uncond"] is False and "control" not in positive[0][1]
    assert apply_controlnet_sd3(positive, negative, controlnet, vae, IMAGE, 0.0, 0.0, 1.0) == (positive, negative)


def _run(model, positive, negative, steps=STEPS):
    """KSampler on the tiny MMDiT; per model call: (sigma, model output, ControlNet residuals)."""
    calls = []

    def record(apply_model, args):
        out = apply_model(args["input"], args["timestep"], **args["c"])
        control = args["c"].get("control")
        calls.append((float(args["timestep"][0]), out.clone(),
                      None if control is None else [r.clone() for r in control["output"]]))
        return out

    patched = model.clone()
    patched.set_option("model_function_wrapper", record)
    latent = {"samples": torch.zeros(1, 16, 4, 4)}  # a 32 x 32 image
    samples = ksampler(patched, 7, steps, 2.0, "euler", "simple", positive, negative, latent)[0]["samples"]
    return samples, calls


def test_controlnet_acts_only_between_start_and_end_percent(model, controlnet, vae, prompts):
    positive, negative = prompts
    plain, plain_calls = _run(model, positive, negative)
    start, end = 0.3, 0.7
    sampling = model.model.model_sampling
    high, low = sampling.percent_to_sigma(start), sampling.percent_to_sigma(end)
    pos, neg = apply_controlnet_sd3(positive, negative, controlnet, vae, IMAGE, 1.0, start, end)
    controlled, calls = _run(model, pos, neg)
    assert len(calls) == len(plain_calls) == STEPS  # positive and negative in one batch
    inside = [low <= sigma <= high for sigma, _, _ in calls]
    assert [r is not None for _, _, r in calls] == inside
    assert inside[0] is False and inside[-1] is False and any(inside)
    first = inside.index(True)
    for (_, a, _), (_, b, _) in zip(calls[:first], plain_calls[:first]):
        assert torch.equal(a, b)  # before the range: the same trajectory, untouched
    assert (calls[first][1] - plain_calls[first][1]).abs().max() > 1e-4
    assert (controlled - plain).abs().max() > 1e-4


def test_strength_scales_the_residuals(model, controlnet, vae, prompts):
    positive, negative = prompts
    residuals = {}
    for strength in (1.0, 2.5):
        pos, neg = apply_controlnet_sd3(positive, negative, controlnet, vae, IMAGE, strength, 0.0, 1.0)
        _, calls = _run(model, pos, neg, steps=1)
        residuals[strength] = calls[0][2]  # the first step: same input, same sigma
    assert len(residuals[1.0]) == 2
    for one, scaled in zip(residuals[1.0], residuals[2.5]):
        assert one.abs().max() > 1e-3
        assert torch.allclose(scaled, 2.5 * one, atol=1e-6)

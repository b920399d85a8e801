"""Advanced-ControlNet's use of ComfyUI's ControlNet API on our runtime, through a fixture pack
(tests/compat/api_packs/acn_like_pack): a `comfy.controlnet.ControlNet` subclass made by
`from_vanilla` with its own `get_control` and soft per-block weights in `control_merge`, a
SparseCtrl-like subclass of `comfy.cldm.cldm.ControlNet` built from ComfyUI's keyword config,
and the ControlNet call protocol the sampler follows (`pre_run`, `get_control`, `cleanup`)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from tests.compat.api_pack_support import import_api_pack, load_sd1_model
from tests.fixtures.controlnets import controlnet_state_dict, write_controlnet



@pytest.fixture
def pack(session):
    yield from import_api_pack("acn_like_pack")


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    return load_sd1_model(tiny_sd1_ckpt)


@pytest.fixture(scope="module")
def cn_path(tmp_path_factory):
    return str(write_controlnet(tmp_path_factory.mktemp("acn") / "cn.safetensors"))


def _hint() -> torch.Tensor:
    g = torch.Generator().manual_seed(11)
    return torch.rand(1, 3, 64, 64, generator=g)


def _conds(model, control):
    ctx = model.model.diffusion_model.config.context_dim
    pos = [[torch.full((1, 77, ctx), 0.3), {"control": control, "control_apply_to_uncond": False}]]
    neg = [[torch.full((1, 77, ctx), -0.2), {"control": control, "control_apply_to_uncond": False}]]
    return pos, neg


def _sample(model, control, steps: int = 3) -> torch.Tensor:
    from comfy_core.sampling.ksampler import sample
    from comfy_core.sampling.noise import prepare_noise

    latent = torch.zeros(1, 4, 8, 8)
    pos, neg = _conds(model, control)
    return sample(model, prepare_noise(latent, 7), steps, 4.0, "euler", "normal", pos, neg, latent, seed=7)


def _vanilla(cn_path):
    import comfy.controlnet

    return comfy.controlnet.load_controlnet(cn_path)


def test_from_vanilla_subclass_at_weight_one_is_the_builtin_controlnet_bit_exactly(pack, sd1, cn_path):
    import comfy.controlnet

    vanilla = _vanilla(cn_path)
    builtin = _sample(sd1, vanilla.copy().set_cond_hint(_hint(), 0.8, (0.0, 1.0)))
    weighted = pack.WeightedControlNet.from_vanilla(vanilla, base_multiplier=1.0)
    assert isinstance(weighted, comfy.controlnet.ControlNet) and isinstance(weighted, comfy.controlnet.ControlBase)
    # the clone shares the network but is its own patcher (ComfyUI's memory manager tracks parents)
    assert weighted.control_model_wrapped is not vanilla.control_model_wrapped
    assert weighted.control_model_wrapped.model is vanilla.control_model_wrapped.model
    applied = weighted.copy().set_cond_hint(_hint(), 0.8, (0.0, 1.0))
    assert type(applied) is pack.WeightedControlNet and applied.base_multiplier == 1.0
    ours = _sample(sd1, applied)
    assert torch.equal(ours, builtin)
    plain = _sample(sd1, None)
    assert not torch.equal(plain, builtin)  # the ControlNet changes the result at all
    # the sampler called the pack's overrides: pre_run once with the MODEL's model, each step's
    # get_control (cond and uncond share one object here), cleanup after
    names = [e[0] for e in pack.EVENTS]
    assert names[0] == "pre_run" and names[-1] == "cleanup" and names.count("get_control") >= 3
    assert pack.EVENTS[0][1] == type(sd1.model).__name__


def test_soft_weights_scale_each_residual_exactly(pack, sd1, cn_path):
    """The pack's `control_merge` weights reach the residuals: with the same hint, sigma and
    cond, block i of n carries base_multiplier**(n - i) times the vanilla residual."""
    vanilla = _vanilla(cn_path).copy().set_cond_hint(_hint(), 0.5, (0.0, 1.0))
    weighted = pack.WeightedControlNet.from_vanilla(_vanilla(cn_path), base_multiplier=0.5)
    weighted = weighted.copy().set_cond_hint(_hint(), 0.5, (0.0, 1.0))
    percent = sd1.model.model_sampling.percent_to_sigma
    x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(3))
    sigma = torch.full((2,), 5.0)
    ctx = sd1.model.diffusion_model.config.context_dim
    cond = {"c_crossattn": torch.full((2, 77, ctx), 0.1)}
    outs = []
    for cn in (vanilla, weighted):
        cn.pre_run(sd1.model, percent)
        outs.append(cn.get_control(x, sigma, cond, 1, {}))
    a, b = outs
    n = len(a["output"])
    assert n == len(b["output"]) and n > 2
    for i in range(n):
        w = 0.5 ** float(n - i)
        torch.testing.assert_close(b["output"][i], a["output"][i] * w, rtol=1e-6, atol=1e-7)
    assert torch.equal(b["middle"][0], a["middle"][0])
    for cn in (vanilla, weighted):
        cn.cleanup()
        assert cn.cond_hint is None and cn.timestep_range is None


def test_chain_copy_get_models_and_range(pack, sd1, cn_path):
    """ACN's apply node chains ControlNets (`set_previous_controlnet`); `get_models` lists every
    network's patcher; a percent range outside the step returns only the predecessor's residuals."""
    first = pack.WeightedControlNet.from_vanilla(_vanilla(cn_path)).copy().set_cond_hint(_hint(), 1.0, (0.0, 1.0))
    second = pack.WeightedControlNet.from_vanilla(_vanilla(cn_path)).copy().set_cond_hint(_hint(), 1.0, (0.9, 1.0))
    second.set_previous_controlnet(first)
    models = second.get_models()
    assert models == [first.control_model_wrapped, second.control_model_wrapped]
    second.pre_run(sd1.model, sd1.model.model_sampling.percent_to_sigma)
    assert first.timestep_range is not None  # pre_run walks the chain
    x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(4))
    ctx = sd1.model.diffusion_model.config.context_dim
    cond = {"c_crossattn": torch.full((2, 77, ctx), 0.1)}
    sigma = torch.full((2,), 10.0)  # early step: inside first's range, before second's (0.9..1.0)
    chained = second.get_control(x, sigma, cond, 1, {})
    alone = first.get_control(x, sigma, cond, 1, {})
    for got, want in zip(chained["output"], alone["output"]):
        assert torch.equal(got, want)
    second.cleanup()
    assert first.timestep_range is None and second.timestep_range is None


def test_acn_like_nodes_run_through_ksampler(pack, sd1, cn_path, session):
    """The pack's loader (`comfy.controlnet.load_controlnet` + `from_vanilla`) and apply node give
    the CONTROL_NET and CONDITIONING our KSampler path samples; at weight 1 that is the builtin
    ControlNet's result."""
    import folder_paths

    target = Path(folder_paths.get_folder_paths("controlnet")[0]) / "cn.safetensors"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(Path(cn_path).read_bytes())
    (control,) = pack.ACNLikeLoader().load("cn.safetensors", 1.0)
    pos, neg = _conds(sd1, None)
    for c in (pos, neg):
        c[0][1].pop("control")
    image = _hint().movedim(1, -1)
    pos2, neg2 = pack.ACNLikeApply().apply(pos, neg, control, image, 0.8, 0.0, 1.0)
    assert isinstance(pos2[0][1]["control"], pack.WeightedControlNet) and "control" not in pos[0][1]
    from comfy_core.sampling.ksampler import sample
    from comfy_core.sampling.noise import prepare_noise

    latent = torch.zeros(1, 4, 8, 8)
    ours = sample(sd1, prepare_noise(latent, 7), 3, 4.0, "euler", "normal", pos2, neg2, latent, seed=7)
    builtin = _sample(sd1, _vanilla(cn_path).copy().set_cond_hint(_hint(), 0.8, (0.0, 1.0)))
    assert torch.equal(ours, builtin)


def test_sparse_like_subclass_of_cldm_controlnet_from_comfy_kwargs(session):
    """ACN builds SparseCtrl as `SparseControlNet(**controlnet_config)`, a subclass of
    `comfy.cldm.cldm.ControlNet`, from the config `comfy.model_detection` reads off the weights;
    the network loads the file's weights under its names and runs SparseCtrl's forward."""
    import comfy.cldm.cldm
    import comfy.model_detection
    import comfy.ops

    from comfy_core.controlnet.config import ControlNetConfig
    from comfy_core.controlnet.model import ControlNetModel

    module = next(import_api_pack("acn_like_pack"))
    sd = controlnet_state_dict("sd1")
    detected = ControlNetConfig.detect_from_weights(sd)
    config = comfy.model_detection.model_config_from_unet(
        {"model.diffusion_model." + k: v for k, v in _tiny_unet_from(sd).items()}, "model.diffusion_model.", True
    ).unet_config
    config = dict(config)
    config.pop("out_channels")
    config.update(hint_channels=sd["input_hint_block.0.weight"].shape[1], operations=comfy.ops.disable_weight_init,
                  use_simplified_conditioning_embedding=False, dtype=torch.float32)
    net = module.SparseLikeControlNet(**config)
    assert isinstance(net, comfy.cldm.cldm.ControlNet)
    assert net.model_channels == detected.unet.model_channels and net.dims == 2
    # the encoder half's structure is the file's (a ControlNet has no decoder depths)
    assert dataclasses.replace(net.config.unet, transformer_depth_output=()) == detected.unet
    assert net.config.hint_channels == detected.hint_channels
    missing, unexpected = net.load_state_dict(sd, strict=False)
    assert not missing and not unexpected
    reference = ControlNetModel(detected)
    reference.load_state_dict(sd)
    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    hint = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    t = torch.tensor([500.0])
    ctx = torch.randn(1, 77, detected.unet.context_dim, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = net(x, hint, t, ctx)
        want = reference(torch.zeros_like(x), hint, t, ctx)  # SparseCtrl runs on a zeroed input
    for a, b in zip(got["output"] + got["middle"], want["output"] + want["middle"]):
        assert torch.equal(a, b)
    simplified = module.SparseLikeControlNet(**{**config, "use_simplified_conditioning_embedding": True})
    assert len(simplified.input_hint_block) == 1


def _tiny_unet_from(control_sd: dict) -> dict:
    """The tiny SD1 UNet's tensors (its encoder matches the ControlNet fixture's), for detection."""
    from tests.fixtures.checkpoints import tiny_state_dict

    prefix = "model.diffusion_model."
    return {k[len(prefix):]: v for k, v in tiny_state_dict("sd1").items() if k.startswith(prefix)}

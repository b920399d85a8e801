"""ControlNet objects as the sampler uses them: residual layout, strength, percent range, chains,
hint preparation, control-LoRA merging, T2I-Adapters, union control types (after ComfyUI's
comfy/controlnet.py semantics, computed independently here)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.controlnet.control_lora import merged_state
from comfy_core.controlnet.hint import broadcast_image_to
from comfy_core.controlnet.load import load_controlnet
from comfy_core.controlnet.types import StrengthType
from comfy_core.models.model_sampling import ModelSampling
from tests.fixtures import controlnets as fx


def _run(control, x, sigma, context, batched=1, y=None):
    ms = ModelSampling("eps")
    control.pre_run(SimpleNamespace(model_sampling=ms), ms.percent_to_sigma)
    cond = {"c_crossattn": context}
    if y is not None:
        cond["y"] = y
    try:
        return control.get_control(x, sigma, cond, batched, {})
    finally:
        control.cleanup()


@pytest.fixture(scope="module")
def sd1_cn(tmp_path_factory):
    return load_controlnet(fx.write_controlnet(tmp_path_factory.mktemp("cn") / "cn.safetensors", "sd1", "pth"))


def _inputs(b=2):
    g = torch.Generator().manual_seed(0)
    return torch.randn(b, 4, 8, 8, generator=g), torch.rand(1, 3, 40, 48, generator=g), torch.randn(b, 5, 64, generator=g)


def test_residuals_are_the_network_on_the_scaled_input_and_timestep(sd1_cn):
    x, image, context = _inputs()
    sigma = torch.tensor([3.0, 3.0])
    ms = ModelSampling("eps")
    c = sd1_cn.copy().set_cond_hint(image, 0.5)
    got = _run(c, x, sigma, context)
    # The hint is centre-cropped to the latent's aspect (square): 40x48 -> 40x40, then resized to 64x64.
    hint = torch.nn.functional.interpolate(image[:, :, :, 4:44], size=(64, 64), mode="nearest-exact")
    with torch.no_grad():
        raw = sd1_cn.control_model(x=ms.calculate_input(sigma, x), hint=hint, timesteps=ms.timestep(sigma),
                                   context=context)
    assert set(got) == {"input", "middle", "output"} and got["input"] == []
    assert len(got["output"]) == 12
    for a, b in zip(got["output"] + got["middle"], raw["output"] + raw["middle"]):
        torch.testing.assert_close(a, 0.5 * b)


def test_outside_the_percent_range_only_the_previous_residuals_come_back(sd1_cn):
    x, image, context = _inputs()
    ms = ModelSampling("eps")
    late = sd1_cn.copy().set_cond_hint(image, 1.0, (0.5, 1.0))
    early_sigma = torch.tensor([ms.percent_to_sigma(0.2)] * 2)
    late_sigma = torch.tensor([ms.percent_to_sigma(0.7)] * 2)
    assert _run(late, x, early_sigma, context) is None
    assert _run(late, x, late_sigma, context) is not None
    first = sd1_cn.copy().set_cond_hint(image, 1.0)
    chained = late.copy().set_previous_controlnet(first)
    alone = _run(first.copy(), x, early_sigma, context)
    both = _run(chained, x, early_sigma, context)
    for a, b in zip(both["output"], alone["output"]):
        torch.testing.assert_close(a, b)


def test_a_chain_adds_the_residuals_of_each(sd1_cn, tmp_path):
    other = load_controlnet(fx.write_controlnet(tmp_path / "b.safetensors", "sd1", "pth", seed=9))
    x, image, context = _inputs()
    sigma = torch.tensor([5.0, 5.0])
    a = _run(sd1_cn.copy().set_cond_hint(image, 0.7), x, sigma, context)
    b = _run(other.copy().set_cond_hint(image, 1.3), x, sigma, context)
    chain = other.copy().set_cond_hint(image, 1.3).set_previous_controlnet(sd1_cn.copy().set_cond_hint(image, 0.7))
    ab = _run(chain, x, sigma, context)
    for kind in ("output", "middle"):
        for s, p, q in zip(ab[kind], a[kind], b[kind]):
            torch.testing.assert_close(s, p + q)


def test_linear_up_strength_scales_deeper_residuals_less(sd1_cn):
    x, image, context = _inputs()
    sigma = torch.tensor([5.0, 5.0])
    plain = _run(sd1_cn.copy().set_cond_hint(image, 1.0), x, sigma, context)
    up = sd1_cn.copy().set_cond_hint(image, 0.5)
    up.strength_type = StrengthType.LINEAR_UP
    got = _run(up, x, sigma, context)
    n = len(plain["output"])
    for i, (a, b) in enumerate(zip(got["output"], plain["output"])):
        torch.testing.assert_close(a, b * 0.5 ** (n - i))


def test_global_average_pooling_flattens_each_residual(sd1_cn):
    x, image, context = _inputs()
    c = sd1_cn.copy().set_cond_hint(image, 1.0)
    c.global_average_pooling = True
    got = _run(c, x, torch.tensor([5.0, 5.0]), context)
    r = got["output"][3]
    torch.testing.assert_close(r, r[:, :, :1, :1].expand_as(r))


def test_hint_batches_are_laid_out_per_conditioning():
    hints = torch.arange(3.0).view(3, 1, 1, 1)
    # two conditionings of 2 rows each: the first 2 hints, repeated per conditioning
    assert broadcast_image_to(hints, 4, 2).flatten().tolist() == [0, 1, 0, 1]
    # one conditioning of 5 rows from 3 hints: tiled then cut
    assert broadcast_image_to(hints, 5, 1).flatten().tolist() == [0, 1, 2, 0, 1]
    assert broadcast_image_to(hints[:1], 4, 2).shape[0] == 1


def test_copies_share_the_network_but_not_the_settings(sd1_cn):
    a = sd1_cn.copy().set_cond_hint(torch.zeros(1, 3, 8, 8), 0.3, (0.1, 0.9))
    b = a.copy()
    b.set_extra_arg("control_type", [1])
    assert b.control_model is a.control_model and b.strength == 0.3 and b.timestep_percent_range == (0.1, 0.9)
    assert "control_type" not in a.extra_args
    assert a.get_models() == [a.control_model_wrapped]


def test_a_mask_channel_is_concatenated_to_the_hint(tmp_path):
    sd = fx._values(fx.controlnet_shapes(fx.architectures()["sd1"].unet, hint_channels=4), 5)
    from safetensors.torch import save_file
    path = tmp_path / "inpaint.safetensors"
    save_file({k: v.contiguous() for k, v in sd.items()}, str(path))
    cn = load_controlnet(path)
    cn.concat_mask = True
    x, _image, context = _inputs(1)
    image = torch.rand(1, 3, 64, 64)
    mask = torch.zeros(1, 1, 64, 64)
    mask[..., :32] = 1.0
    c = cn.copy().set_cond_hint(image, 1.0, extra_concat=[mask])
    ms = ModelSampling("eps")
    c.pre_run(SimpleNamespace(model_sampling=ms), ms.percent_to_sigma)
    c.get_control(x, torch.tensor([2.0]), {"c_crossattn": context}, 1, {})
    assert c.cond_hint.shape == (1, 4, 64, 64)
    torch.testing.assert_close(c.cond_hint[:, 3:], mask)
    c.cleanup()
    assert c.cond_hint is None and c.timestep_range is None and c.model_sampling_current is None


def test_control_lora_weights_are_the_unet_plus_the_low_rank_delta(tmp_path, tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint

    model, _, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False, output_clip=False)
    cl = load_controlnet(fx.write_control_lora(tmp_path / "cl.safetensors"))
    unet = model.model.diffusion_model
    cl.pre_run(model.model, model.model.model_sampling.percent_to_sigma)
    net = cl.control_model.state_dict()
    key = "input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight"
    stem = key[: -len(".weight")]
    w = cl.control_weights
    expected = unet.state_dict()[key] + w[stem + ".up"].flatten(1) @ w[stem + ".down"].flatten(1)
    torch.testing.assert_close(net[key], expected)
    torch.testing.assert_close(net["input_hint_block.0.weight"], w["input_hint_block.0.weight"])
    assert torch.equal(net["time_embed.0.bias"], unet.state_dict()["time_embed.0.bias"])  # not in the file
    cl.cleanup()
    assert cl.control_model is None
    assert cl.copy().control_weights is cl.control_weights


def test_control_lora_refuses_another_family(tmp_path, tiny_sdxl_ckpt):
    from comfy_core.controlnet.control_lora import ControlLoraError
    from comfy_core.loading import load_checkpoint

    model, _, _ = load_checkpoint(tiny_sdxl_ckpt, output_vae=False, output_clip=False)
    cl = load_controlnet(fx.write_control_lora(tmp_path / "cl.safetensors", "sd1"))
    with pytest.raises(ControlLoraError):
        cl.pre_run(model.model, model.model.model_sampling.percent_to_sigma)


def test_merged_state_names_tensors_nobody_has():
    from comfy_core.controlnet.control_lora import ControlLoraError

    net = torch.nn.Linear(2, 2)
    with pytest.raises(ControlLoraError, match="bias"):
        merged_state(net, {"weight": torch.zeros(2, 2)}, {}, torch.float32, torch.device("cpu"))


@pytest.mark.parametrize("kind, inputs, middle", [("full", 12, 0), ("light", 12, 0), ("xl", 10, 1)])
def test_t2i_adapters_give_residuals_in_the_unet_layout(tmp_path, kind, inputs, middle):
    adapter = load_controlnet(fx.write_t2i_adapter(tmp_path / f"{kind}.safetensors", kind))
    x = torch.randn(2, 4, 8, 8)
    c = adapter.copy().set_cond_hint(torch.rand(1, 3, 64, 64), 0.5)
    got = _run(c, x, torch.tensor([3.0, 3.0]), torch.randn(2, 5, 64))
    assert len(got["input"]) == inputs and len(got["middle"]) == middle
    present = [r for r in got["input"] if r is not None]
    assert len(present) == 4 - middle
    # popped from the end: the first residual the UNet gets is the full-resolution one
    last = [r for r in got["input"] if r is not None][-1]
    unshuffled = 8 if kind != "xl" else 4
    assert last.shape[-1] == unshuffled and last.shape[0] == 1  # one hint image broadcasts


def test_union_control_types_select_the_task_embedding(tmp_path):
    from comfy_core.controlnet.model import ControlNetError

    union = load_controlnet(fx.write_union_controlnet(tmp_path / "u.safetensors", types=6))
    net = union.control_model
    g = torch.Generator().manual_seed(0)
    x, hint = torch.randn(1, 4, 8, 8, generator=g), torch.rand(1, 3, 64, 64, generator=g)
    ctx, y = torch.randn(1, 5, 64, generator=g), torch.randn(1, 64 + 6 * 256, generator=g)
    t = torch.tensor([500.0])
    with torch.no_grad():
        auto = net(x=x, hint=hint, timesteps=t, context=ctx, y=y, control_type=[])
        depth = net(x=x, hint=hint, timesteps=t, context=ctx, y=y, control_type=[1])
        canny = net(x=x, hint=hint, timesteps=t, context=ctx, y=y, control_type=[3])
    assert not torch.allclose(auto["middle"][0], depth["middle"][0])
    assert not torch.allclose(depth["middle"][0], canny["middle"][0])
    with pytest.raises(ControlNetError, match="tile"):
        net(x=x, hint=hint, timesteps=t, context=ctx, y=y, control_type=[6])

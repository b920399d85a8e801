"""ModelPatchSeamlessTiling and VAEDecodeSeamlessTiling (today's ComfyUI,
comfy_extras/nodes_seamless_tiling.py): the periodic padding against torch's circular padding,
the blended wrapper against the blend computed by hand, the patch as data on a clone (the input
MODEL and its runs unchanged), the wrap on the tiny SD1 model and its VAE, and both nodes in a
workflow."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.model_patches.seamless_tiling import SeamlessTiling, periodic_pad, seam_blend
from graph.native import Input, node
from nodes.errors import NodeInputError
from nodes.seamless_tiling import model_patch_seamless_tiling, vae_decode_seamless_tiling
from tests.fixtures.clips import one_thread  # noqa: F401 (fixture: tiny models on one thread)
from tests.nodes.model_patch_helpers import sample, snapshot
from tests.nodes.workflow_2026 import Runner
from tests.nodes.workflow_2026 import node as prompt_node


# -- the periodic context --------------------------------------------------------------------------

def test_periodic_pad_is_torchs_circular_padding():
    x = torch.randn(2, 3, 5, 7)
    torch.testing.assert_close(periodic_pad(x, 2, 3), F.pad(x, (3, 3, 2, 2), mode="circular"), rtol=0, atol=0)
    torch.testing.assert_close(periodic_pad(x, 0, 4), F.pad(x, (4, 4, 0, 0), mode="circular"), rtol=0, atol=0)
    video = torch.randn(1, 2, 3, 4, 6)
    torch.testing.assert_close(periodic_pad(video, 1, 2), F.pad(video, (2, 2, 1, 1, 0, 0), mode="circular"),
                               rtol=0, atol=0)


def test_a_conv_over_the_periodic_context_is_a_circular_conv():
    torch.manual_seed(0)
    circular = torch.nn.Conv2d(3, 4, 3, padding=1, padding_mode="circular")
    x = torch.randn(1, 3, 6, 9)
    valid = F.conv2d(periodic_pad(x, 1, 1), circular.weight, circular.bias)
    torch.testing.assert_close(valid, circular(x), rtol=1e-6, atol=1e-6)


def test_a_context_wider_than_the_latent_wraps_more_than_once():
    x = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(1, 2, 3, 4)
    want = np.take(np.take(x.numpy(), np.arange(-5, 3 + 5), axis=-2, mode="wrap"), np.arange(-6, 4 + 6), axis=-1,
                   mode="wrap")
    assert np.array_equal(periodic_pad(x, 5, 6).numpy(), want)
    with pytest.raises(ModelPatchError, match="image"):
        periodic_pad(torch.zeros(2, 3, 4), 1, 1)


def test_the_seam_blend_is_one_at_the_borders_and_falls_linearly():
    got = seam_blend(8, 2, torch.zeros(1))
    assert got.tolist() == [1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 1.0]
    assert seam_blend(5, 8, torch.zeros(1)).tolist() == pytest.approx([1.0, 0.875, 0.75, 0.875, 1.0])


# -- the wrapper -----------------------------------------------------------------------------------

def _fake_model(x, t, c_concat=None, **_):
    """Not translation-equivariant: depends on the position and on c_concat."""
    h, w = x.shape[-2:]
    ramp = torch.arange(h * w, dtype=x.dtype).reshape(h, w) / (h * w)
    out = x.cumsum(-1) * (1 + ramp) + t.reshape(-1, 1, 1, 1)
    return out + c_concat if c_concat is not None else out


def _rolled(fn, x, t, shifts, concat):
    out = fn(torch.roll(x, shifts, (-2, -1)), t, c_concat=torch.roll(concat, shifts, (-2, -1)))
    return torch.roll(out, (-shifts[0], -shifts[1]), (-2, -1))


def test_the_wrapper_blends_the_plain_and_the_half_rolled_runs():
    x, t, concat = torch.randn(2, 3, 6, 8), torch.tensor([0.5, 0.5]), torch.randn(2, 3, 6, 8)
    args = {"input": x, "timestep": t, "c": {"c_concat": concat}, "cond_or_uncond": [0, 1]}
    # x only: weights b(w) of the run rolled by W // 2, 1 - b of the plain one
    b = torch.tensor([1.0, 2 / 3, 1 / 3, 0.0, 0.0, 1 / 3, 2 / 3, 1.0])
    want = (1 - b) * _fake_model(x, t, c_concat=concat) + b * _rolled(_fake_model, x, t, (0, 4), concat)
    torch.testing.assert_close(SeamlessTiling(0, 3)(_fake_model, args), want)
    # both axes: the four runs, weighted by the outer product
    by = torch.tensor([1.0, 0.5, 0.0, 0.0, 0.5, 1.0])[:, None]
    bx = torch.tensor([1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 1.0])[None, :]
    runs = {(sy, sx): _rolled(_fake_model, x, t, (sy, sx), concat) for sy in (0, 3) for sx in (0, 4)}
    want = ((1 - by) * (1 - bx) * runs[0, 0] + (1 - by) * bx * runs[0, 4] + by * (1 - bx) * runs[3, 0]
            + by * bx * runs[3, 4])
    torch.testing.assert_close(SeamlessTiling(2, 2)(_fake_model, args), want)


def test_an_earlier_wrapper_runs_inside_and_a_controlnet_is_refused():
    seen = []

    def earlier(apply_model, args):
        seen.append(args["input"].clone())
        return apply_model(args["input"], args["timestep"], **args["c"]) * 2

    x = torch.randn(1, 2, 4, 6)
    args = {"input": x, "timestep": torch.tensor([1.0]), "c": {}}
    out = SeamlessTiling(0, 1, earlier)(_fake_model, args)
    assert len(seen) == 2 and torch.equal(seen[0], x) and torch.equal(seen[1], torch.roll(x, 3, -1))
    assert torch.allclose(out, 2 * SeamlessTiling(0, 1)(_fake_model, args))
    assert SeamlessTiling(0, 1, earlier).cache_signature() is None
    assert SeamlessTiling(0, 1).cache_signature() == ("SeamlessTiling", 0, 1)
    with pytest.raises(ModelPatchError, match="ControlNet"):
        SeamlessTiling(0, 1)(_fake_model, {**args, "c": {"control": object()}})


# -- on the tiny SD1 model and its VAE ---------------------------------------------------------------

def test_the_patch_is_data_on_a_clone_and_the_plain_model_stays_bit_identical(sd1_with_prompts):
    model = sd1_with_prompts.model
    before, plain = snapshot(model), sample(model, sd1_with_prompts, steps=1, size=8)
    weights = {k: v.clone() for k, v in model.model.diffusion_model.state_dict().items()}
    assert model_patch_seamless_tiling(model, "x and y", 2)[0].model_options["model_function_wrapper"] == \
        SeamlessTiling(2, 2)
    patched = model_patch_seamless_tiling(model, "x", 2)[0]
    assert patched is not model and snapshot(model) == before
    assert patched.model_options["model_function_wrapper"] == SeamlessTiling(0, 2)
    tiled = sample(patched, sd1_with_prompts, steps=1, size=8)
    assert torch.isfinite(tiled).all() and not torch.allclose(tiled, plain)
    assert torch.equal(sample(model, sd1_with_prompts, steps=1, size=8), plain)
    after = model.model.diffusion_model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in weights.items())
    assert not any(getattr(m, "padding_mode", "zeros") != "zeros" for m in model.model.diffusion_model.modules())


def test_on_the_unet_the_edges_come_from_a_run_where_they_are_neighbours(sd1_with_prompts):
    """At the left and right columns the prediction is the rolled run's, in which the UNet saw
    column W-1 directly left of column 0 (the wrap), not the image border; in the middle it is
    the plain run's."""
    model = sd1_with_prompts.model
    patched = model_patch_seamless_tiling(model, "x", 4)[0]
    wrapper = patched.model_options["model_function_wrapper"]
    torch.manual_seed(1)
    x, sigma = torch.randn(1, 4, 4, 16), torch.tensor([3.0])
    c = {"c_crossattn": sd1_with_prompts.positive[0][0], "transformer_options": {}}
    with patched.applied() as applied:
        apply_model = applied.apply_model
        tiled = wrapper(apply_model, {"input": x, "timestep": sigma, "c": c, "cond_or_uncond": [0]})
        plain = apply_model(x, sigma, **c)
        rolled = torch.roll(apply_model(torch.roll(x, 8, -1), sigma, **c), -8, -1)
    torch.testing.assert_close(tiled[..., [0, -1]], rolled[..., [0, -1]], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tiled[..., 4:12], plain[..., 4:12], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(tiled[..., [0, -1]], plain[..., [0, -1]])


@pytest.fixture(scope="module")
def sd1_vae(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint

    return load_checkpoint(tiny_sd1_ckpt, output_clip=False)[2]


def test_the_vae_decode_is_the_periodic_context_decoded_and_cropped(sd1_vae):
    torch.manual_seed(2)
    latent = torch.randn(1, 4, 3, 4)
    got = vae_decode_seamless_tiling({"samples": latent}, sd1_vae, "x and y", 1)[0]
    want = sd1_vae.decode(F.pad(latent, (1, 1, 1, 1), mode="circular"))[:, 8:8 + 24, 8:8 + 32, :]
    assert got.shape == (1, 24, 32, 3)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    only_y = vae_decode_seamless_tiling({"samples": latent}, sd1_vae, "y", 2)[0]
    torch.testing.assert_close(only_y, sd1_vae.decode(F.pad(latent, (0, 0, 2, 2), mode="circular"))[:, 16:40],
                               rtol=0, atol=0)


def test_the_decoded_tile_is_the_middle_of_the_periodic_image(sd1_vae):
    """With the whole latent as context the decode is the middle tile of three side by side: the
    column right of the image's last is the next tile's first, decoded in one piece with it."""
    torch.manual_seed(3)
    latent = torch.randn(1, 4, 2, 3)
    got = vae_decode_seamless_tiling({"samples": latent}, sd1_vae, "x", 3)[0]
    three = sd1_vae.decode(torch.cat([latent, latent, latent], dim=-1))  # [1, 16, 72, 3]
    torch.testing.assert_close(got, three[:, :, 24:48], rtol=0, atol=0)
    plain = sd1_vae.decode(latent)
    assert not torch.allclose(got, plain)


def test_the_nodes_refuse_bad_settings(sd1_with_prompts, sd1_vae):
    with pytest.raises(NodeInputError, match="tiling"):
        model_patch_seamless_tiling(sd1_with_prompts.model, "z", 8)
    with pytest.raises(NodeInputError, match="context_size"):
        model_patch_seamless_tiling(sd1_with_prompts.model, "x", 0)
    with pytest.raises(NodeInputError, match="samples"):
        vae_decode_seamless_tiling({"samples": torch.zeros(1, 4, 8)}, sd1_vae, "x", 2)


CAPTURED: dict = {}


@node("TestCaptureSeamless", inputs=[Input("image", "IMAGE"), Input("latent", "LATENT")], output_node=True)
def _capture(image, latent):
    CAPTURED.update(image=image, latent=latent)
    return {"ui": {}}


async def test_both_nodes_in_a_workflow(tmp_path, tiny_sd1_ckpt):
    runner = Runner(tmp_path)
    runner.registry.add_native(_capture)
    (tmp_path / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")
    prompt = {
        "1": prompt_node("CheckpointLoaderSimple", ckpt_name="tiny.safetensors"),
        "2": prompt_node("ModelPatchSeamlessTiling", model=["1", 0], tiling="x and y", context_size=2),
        "3": prompt_node("EmptyLatentImage", width=64, height=48, batch_size=1),
        "4": prompt_node("CLIPTextEncode", text="tiles", clip=["1", 1]),
        "5": prompt_node("KSampler", model=["2", 0], seed=1, steps=1, cfg=2.0, sampler_name="euler",
                         scheduler="simple", positive=["4", 0], negative=["4", 0], latent_image=["3", 0], denoise=1.0),
        "6": prompt_node("VAEDecodeSeamlessTiling", samples=["5", 0], vae=["1", 2], tiling="x", context_size=2),
        "7": prompt_node("TestCaptureSeamless", image=["6", 0], latent=["5", 0]),
    }
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert {"2", "6"} <= set(runner.ran)
    assert CAPTURED["image"].shape == (1, 48, 64, 3) and torch.isfinite(CAPTURED["image"]).all()
    assert CAPTURED["latent"]["samples"].shape == (1, 4, 6, 8)

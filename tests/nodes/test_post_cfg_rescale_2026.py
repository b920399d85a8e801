"""TangentialAmplifyingGuidance (today's ComfyUI, comfy_extras/nodes_tag.py) and
LTXVGuidanceRescale (comfy_extras/nodes_lt.py): the maths against the formulas computed by hand
with NumPy, the hooks as data on clones, a one-step run on the tiny SD1 model whose result is the
formula applied to that step's predictions, and both nodes in a workflow."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from comfy_core.model_patches.post_cfg_rescale import (GuidanceRescale, TangentialAmplifyingGuidance,
                                                       guidance_rescale, tangential_amplify)
from comfy_core.sampling.guider import process_latent_out
from graph.native import Input, node
from nodes.errors import NodeInputError
from nodes.post_cfg_rescale_nodes import ltxv_guidance_rescale, tangential_amplifying_guidance
from tests.nodes.model_patch_helpers import sample, snapshot
from tests.fixtures.clips import one_thread  # noqa: F401 (fixture: tiny models on one thread)
from tests.nodes.workflow_2026 import Runner
from tests.nodes.workflow_2026 import node as prompt_node


def _tag_by_hand(x: np.ndarray, prev: np.ndarray, t: float, r: float) -> np.ndarray:
    out = np.empty_like(x)
    for b in range(x.shape[0]):
        p, d = prev[b].ravel().astype(np.float64), (x[b] - prev[b]).ravel().astype(np.float64)
        v = p / (np.sqrt((p * p).sum()) + 1e-8)
        radial = (d @ v) * v
        out[b] = (p + t * (d - radial) + r * radial).reshape(x[b].shape)
    return out


def test_tag_splits_the_update_into_radial_and_tangential_parts():
    torch.manual_seed(0)
    x, prev = torch.randn(2, 1, 3, 5), torch.randn(2, 1, 3, 5)
    got = tangential_amplify(x, prev, 1.3, 0.6)
    np.testing.assert_allclose(got.numpy(), _tag_by_hand(x.numpy(), prev.numpy(), 1.3, 0.6), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tangential_amplify(x, prev, 1.0, 1.0), x)  # both scales 1: the update as it is
    # r_scale 0 drops exactly the part along prev: what is left of the update is orthogonal to it
    left = tangential_amplify(x, prev, 1.0, 0.0) - prev
    assert (left * prev).flatten(1).sum(1).abs().max() < 1e-4


def test_guidance_rescale_is_diffusers_formula():
    torch.manual_seed(1)
    guided, cond = torch.randn(2, 4, 3, 3) * 3, torch.randn(2, 4, 3, 3)
    g, c = guided.numpy().astype(np.float64), cond.numpy().astype(np.float64)
    std_c = c.reshape(2, -1).std(axis=1, ddof=1)[:, None, None, None]
    std_g = g.reshape(2, -1).std(axis=1, ddof=1)[:, None, None, None]
    want = 0.7 * g * std_c / std_g + 0.3 * g
    np.testing.assert_allclose(guidance_rescale(guided, cond, 0.7).numpy(), want, rtol=1e-5, atol=1e-5)
    full = guidance_rescale(guided, cond, 1.0)
    torch.testing.assert_close(full.flatten(1).std(1), cond.flatten(1).std(1))
    assert guidance_rescale(guided, cond, 0.0) is guided


def test_the_tag_hook_acts_only_inside_its_sigma_window():
    hook = TangentialAmplifyingGuidance(2.0, 1.0, sigma_hi=5.0, sigma_lo=1.0)
    x, prev = torch.randn(1, 2, 2, 2), torch.randn(1, 2, 2, 2)
    for sigma, inside in ((0.5, False), (1.0, True), (3.0, True), (5.0, True), (6.0, False)):
        out = hook({"denoised": x, "input": prev, "sigma": torch.tensor([sigma])})
        assert torch.equal(out, tangential_amplify(x, prev, 2.0, 1.0) if inside else x)


def _recorded_run(model, sd1):
    """One euler step from sigma_max to 0 on the tiny SD1 model (its result is the step's final
    x0 prediction), with the arguments of the hooks recorded before the node's hook."""
    seen = {}

    def record(args):
        seen.update(denoised=args["denoised"].clone(), cond=args["cond_denoised"].clone(),
                     input=args["input"].clone(), sigma=args["sigma"].clone())
        return args["denoised"]

    recording = model.clone()
    options = recording.model_options.setdefault("sampler_post_cfg_function", [])
    options.insert(0, record)
    out = sample(recording, sd1, steps=1, size=8, cfg=4.0)
    return out, seen


def test_tag_node_in_a_one_step_run_is_the_formula(sd1_with_prompts):
    model = sd1_with_prompts.model
    before = snapshot(model)
    patched = tangential_amplifying_guidance(model, 1.5, 0.8, 0.0, 1.0)[0]
    assert snapshot(model) == before and patched is not model
    hook = patched.model_options["sampler_post_cfg_function"][-1]
    assert isinstance(hook, TangentialAmplifyingGuidance) and (hook.t_scale, hook.r_scale) == (1.5, 0.8)
    assert hook.sigma_lo == 0.0 and hook.sigma_hi >= float(model.get_model_object("model_sampling").sigma_max)
    out, seen = _recorded_run(patched, sd1_with_prompts)
    want = _tag_by_hand(seen["denoised"].numpy(), seen["input"].numpy(), 1.5, 0.8)
    latent_format = model.model.latent_format
    np.testing.assert_allclose(out.numpy(), process_latent_out(latent_format, torch.from_numpy(want)).numpy(),
                               rtol=1e-4, atol=1e-4)
    # a window the step is outside of: the plain run, bit for bit
    late = tangential_amplifying_guidance(model, 1.5, 0.8, 0.9, 1.0)[0]
    assert torch.equal(sample(late, sd1_with_prompts, steps=1, size=8, cfg=4.0),
                       sample(model, sd1_with_prompts, steps=1, size=8, cfg=4.0))


def test_guidance_rescale_node_in_a_one_step_run_is_the_formula(sd1_with_prompts):
    model = sd1_with_prompts.model
    before = snapshot(model)
    patched = ltxv_guidance_rescale(model, 0.5)[0]
    assert snapshot(model) == before
    assert patched.model_options["sampler_post_cfg_function"][-1] == GuidanceRescale(0.5)
    out, seen = _recorded_run(patched, sd1_with_prompts)
    g, c = seen["denoised"].numpy().astype(np.float64), seen["cond"].numpy().astype(np.float64)
    want = 0.5 * g * c.std(ddof=1) / g.std(ddof=1) + 0.5 * g
    np.testing.assert_allclose(out.numpy(), process_latent_out(model.model.latent_format,
                                                               torch.from_numpy(want)).numpy(), rtol=1e-4, atol=1e-4)


def test_the_nodes_refuse_bad_settings(sd1_with_prompts):
    with pytest.raises(NodeInputError, match="t_scale"):
        tangential_amplifying_guidance(sd1_with_prompts.model, -1.0, 1.0, 0.0, 1.0)
    with pytest.raises(NodeInputError, match="end_percent"):
        tangential_amplifying_guidance(sd1_with_prompts.model, 1.0, 1.0, 0.0, 2.0)
    with pytest.raises(NodeInputError, match="guidance_rescale"):
        ltxv_guidance_rescale(sd1_with_prompts.model, float("nan"))


CAPTURED: dict = {}


@node("TestCapturePostCfg", inputs=[Input("plain", "LATENT"), Input("guided", "LATENT")], output_node=True)
def _capture(plain, guided):
    CAPTURED.update(plain=plain, guided=guided)
    return {"ui": {}}


async def test_both_nodes_in_a_workflow(tmp_path, tiny_sd1_ckpt):
    runner = Runner(tmp_path)
    runner.registry.add_native(_capture)
    (tmp_path / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")
    sampler = dict(seed=1, steps=1, cfg=3.0, sampler_name="euler", scheduler="simple", positive=["4", 0],
                   negative=["5", 0], latent_image=["3", 0], denoise=1.0)
    prompt = {
        "1": prompt_node("CheckpointLoaderSimple", ckpt_name="tiny.safetensors"),
        "2": prompt_node("TangentialAmplifyingGuidance", model=["1", 0], t_scale=1.2, r_scale=1.0,
                         start_percent=0.0, end_percent=1.0),
        "6": prompt_node("LTXVGuidanceRescale", model=["2", 0], guidance_rescale=0.7),
        "3": prompt_node("EmptyLatentImage", width=64, height=64, batch_size=1),
        "4": prompt_node("CLIPTextEncode", text="a cube", clip=["1", 1]),
        "5": prompt_node("CLIPTextEncode", text="", clip=["1", 1]),
        "7": prompt_node("KSampler", model=["1", 0], **sampler),
        "8": prompt_node("KSampler", model=["6", 0], **sampler),
        "9": prompt_node("TestCapturePostCfg", plain=["7", 0], guided=["8", 0]),
    }
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert {"2", "6"} <= set(runner.ran)
    plain, guided = CAPTURED["plain"]["samples"], CAPTURED["guided"]["samples"]
    assert guided.shape == plain.shape == (1, 4, 8, 8) and torch.isfinite(guided).all()
    assert not torch.allclose(guided, plain)

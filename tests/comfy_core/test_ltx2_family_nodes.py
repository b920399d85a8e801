"""LTX-2 end to end on tiny files through the executor: LTXAVTextEncoderLoader (the Gemma 3 file
and the LTX-2 checkpoint) + CLIPTextEncode + UNETLoader; the MODEL's apply_model on ComfyUI's
packed [video, audio] latent with that conditioning equals the network run by hand; and a 2-step
KSampler on a nested [video, audio] LATENT (comfy_core/latent/nested.py) equals the same Euler
steps done by hand through the model."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.ltx2.latent import pack_latents, unpack_latents
from graph.executor import Executor
from graph.native import Input, Output, String, node
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment
from tests.fixtures.ltx2_text_files import write_ltx2_text_files

CAPTURED: dict[str, object] = {}
F_, H_, W_, T_AUDIO, RATE = 2, 2, 3, 5, 24.0
IN_CHANNELS = 128  # the LTXAV latent's (the samplers check it)


@node("TestLTX2Capture", category="testing", output_node=True,
      inputs=[Input("value", "*"), String("key", default="out")], outputs=[])
def capture(value, key: str) -> tuple:
    CAPTURED[key] = value
    return ()


def _nested_latent():
    from comfy_core.latent.nested import NestedTensor

    g = torch.Generator().manual_seed(5)
    return NestedTensor([0.1 * torch.randn(1, IN_CHANNELS, F_, H_, W_, generator=g),
                         0.1 * torch.randn(1, 8, T_AUDIO, 16, generator=g)])


@node("TestLTX2Latent", category="testing", inputs=[], outputs=[Output("LATENT")])
def tiny_latent() -> tuple:
    return ({"samples": _nested_latent()},)


async def _run(tmp_path, prompt):
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(capture)
    registry.add_native(tiny_latent)
    env = Environment.rooted_at(tmp_path, dtype_policy={"text": "fp32", "unet": "fp32"})
    env.ensure_dirs()
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    outcome = await Executor(registry, env=env).execute(prompt, "p", outputs=checked.outputs)
    assert outcome.status == "success", outcome.messages
    return outcome


def _loaders(files):
    return {
        "clip": {"class_type": "LTXAVTextEncoderLoader", "inputs": {
            "text_encoder": files["gemma"].name, "ckpt_name": files["checkpoint"].name, "device": "default"}},
        "model": {"class_type": "UNETLoader", "inputs": {"unet_name": files["unet"].name, "weight_dtype": "default"}},
        "p": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["clip", 0], "text": "a red fox running"}},
        "n": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["clip", 0], "text": ""}},
        "lc": {"class_type": "LTXVConditioning", "inputs": {"positive": ["p", 0], "negative": ["n", 0],
                                                             "frame_rate": RATE}},
        "om": {"class_type": "TestLTX2Capture", "inputs": {"value": ["model", 0], "key": "model"}},
        "oc": {"class_type": "TestLTX2Capture", "inputs": {"value": ["lc", 0], "key": "positive"}},
        "on": {"class_type": "TestLTX2Capture", "inputs": {"value": ["lc", 1], "key": "negative"}},
    }


@pytest.fixture()
def files(tmp_path):
    return write_ltx2_text_files(tmp_path / "models", in_channels=IN_CHANNELS)


async def test_loader_encode_and_apply_model(tmp_path, files):
    CAPTURED.clear()
    await _run(tmp_path, _loaders(files))
    model = CAPTURED["model"].model
    cond, options = CAPTURED["positive"][0]
    assert model.family.name == "ltxav" and options["frame_rate"] == RATE
    assert cond.shape[0] == 1 and cond.shape[2] == 2 * 32  # the connectors' output (video half, audio half)
    video, audio = _nested_latent().unbind()
    packed, shapes = pack_latents([video, audio])
    sigma = torch.tensor([0.6])
    extra = model.extra_inputs(cross_attn=cond, latent_shapes=shapes, frame_rate=RATE, device=torch.device("cpu"))
    with torch.no_grad():
        denoised = model.apply_model(packed, sigma, **extra)
        v_vel, a_vel = model.diffusion_model([video, audio], sigma, cond, frame_rate=RATE)
    got_video, got_audio = unpack_latents(denoised, shapes)
    assert torch.allclose(got_video, video - 0.6 * v_vel, atol=1e-5)
    assert torch.allclose(got_audio, audio - 0.6 * a_vel, atol=1e-5)


async def test_ksampler_on_a_nested_latent(tmp_path, files):
    from comfy_core.sampling.ksampler import ksampler_sigmas
    from comfy_core.sampling.noise import prepare_noise

    prompt = _loaders(files)
    prompt.update({
        "l": {"class_type": "TestLTX2Latent", "inputs": {}},
        "k": {"class_type": "KSampler", "inputs": {
            "model": ["model", 0], "seed": 3, "steps": 2, "cfg": 1.0, "sampler_name": "euler", "scheduler": "simple",
            "positive": ["lc", 0], "negative": ["lc", 1], "latent_image": ["l", 0], "denoise": 1.0}},
        "o": {"class_type": "TestLTX2Capture", "inputs": {"value": ["k", 0], "key": "latent"}},
    })
    CAPTURED.clear()
    outcome = await _run(tmp_path, prompt)
    assert "latent" in CAPTURED, (sorted(CAPTURED), outcome.messages)
    out = CAPTURED["latent"]["samples"]
    assert getattr(out, "is_nested", False)
    got_video, got_audio = out.unbind()
    # By hand: ComfyUI's seeded noise per part, packed, two Euler steps on the model's denoised estimate.
    patcher, (cond, options) = CAPTURED["model"], CAPTURED["positive"][0]
    model = patcher.model
    video, audio = _nested_latent().unbind()
    noise = prepare_noise(_nested_latent(), 3).unbind()
    x0, shapes = pack_latents([video, audio])
    noise_packed, _ = pack_latents(noise)
    sigmas = ksampler_sigmas(model.model_sampling, 2, "euler", "simple")
    extra = model.extra_inputs(cross_attn=cond, latent_shapes=shapes, frame_rate=RATE, device=torch.device("cpu"))
    x = model.model_sampling.noise_scaling(sigmas[0], noise_packed, x0)
    with torch.no_grad():
        for s, s_next in zip(sigmas[:-1], sigmas[1:]):
            denoised = model.apply_model(x, s.reshape(1), **extra)
            x = x + (x - denoised) / s * (s_next - s)
    want_video, want_audio = unpack_latents(x, shapes)
    assert got_video.shape == video.shape and got_audio.shape == audio.shape
    assert torch.allclose(got_video, want_video, atol=1e-4), (got_video - want_video).abs().max()
    assert torch.allclose(got_audio, want_audio, atol=1e-4), (got_audio - want_audio).abs().max()

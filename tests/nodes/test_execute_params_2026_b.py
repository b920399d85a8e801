"""Inputs today's ComfyUI (Dec 2026) declares, or takes in `execute`, that our built-in nodes lacked
(the parameters recorded in compat/comfy_node_functions_2026.json): each changes the behaviour as
today's ComfyUI does, and prompts and calls without it keep today's defaults.

- CFGNorm.pre_cfg (comfy_extras/nodes_cfg.py@dd2bb679): the norm rescale moves before the CFG
  combine (noise space, unclamped), checked against numpy on a one-step SD1 run.
- LatentApplyOperationCFG.start_percent / end_percent (nodes_latent.py@f35df501): steps outside
  the sigma window are untouched.
- MaskPreview.filename_prefix (nodes_mask.py@d9ac00e2), SaveAnimatedWEBP.num_frames
  (nodes_images.py@015e6046): accepted and, as there, without effect.
- SaveAudio / SaveAudioMP3 / SaveAudioOpus .format (nodes_audio.py@3fa38fd9): container and codec.
- MiniMaxH3FunControlNetApply.fade_in_frames / fade_out_frames (nodes_minimax_h3.py@542de101): the
  control's skip on the target video rows eased by a smoothstep envelope over the pixel frames.
- WanInfiniteTalkToVideo's second speaker as execute's keyword arguments (nodes_wan.py@ee54641d).
- TripleCLIPLoader / QuadrupleCLIPLoader `device` (nodes_sd3.py@45e9c52c, nodes_hidream.py@f08c8478).
"""
from __future__ import annotations

import json
import math
import shutil
from types import SimpleNamespace

import av
import numpy as np
import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from graph.executor import Executor
from graph.native import Input, String, node
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from tests.comfy_core.test_minimax_h3_fun_control import (FakeVae, Recorder, _control, _replace,  # noqa: F401
                                                          _run as _run_dit, dit, patcher)
from tests.comfy_core.test_wan_infinitetalk_node import SINGLE, _audio, _patches, model, patch, state  # noqa: F401
from tests.comfy_core.test_wan_infinitetalk_node import _run as _run_talk
from tests.nodes.node_context import folders_env, running_node


@pytest.fixture
def env(tmp_path) -> Environment:
    return folders_env(tmp_path)


@pytest.fixture
def session(tmp_path):
    """The compat layer installed, as packs see it (tests/compat/conftest.py's fixture)."""
    import compat

    environment = Environment.rooted_at(tmp_path)
    environment.ensure_dirs()
    sess = compat.install(environment, Registry())
    with sess.activate():
        yield sess


def _record(name: str) -> dict:
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "data" / "object_info_2026" / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))


# --- CFGNorm.pre_cfg -------------------------------------------------------------------------------

def _one_step(model, sd1, cfg: float = 5.0) -> torch.Tensor:
    from nodes.sampling import ksampler

    token = set_current(NodeContext("p", "1", "1", None, SimpleNamespace(preview_method="none")))
    try:
        return ksampler(model, 3, 1, cfg, "euler", "simple", sd1.positive, sd1.negative,
                        {"samples": torch.zeros(1, 4, 8, 8)}, 1.0)[0]["samples"]
    finally:
        reset_current(token)


def _recording(model):
    seen: dict = {}
    probe = model.clone()

    def record(args):
        seen.update({k: args[k].clone() for k in ("cond_denoised", "uncond_denoised", "input")})
        return args["denoised"]

    probe.add_option_function("sampler_post_cfg_function", record)
    return probe, seen


def _channel_norm(a: np.ndarray) -> np.ndarray:
    return np.sqrt((a * a).sum(axis=1, keepdims=True))


@pytest.mark.parametrize("strength", [1.0, 0.6])
def test_cfg_norm_pre_cfg_rescales_the_combined_noise_to_the_positives_norm(sd1_with_prompts, strength):
    from nodes.cfg_patches import cfg_norm

    sd1, scale = sd1_with_prompts, 5.0
    probe, seen = _recording(sd1.model)
    (patched,) = cfg_norm(probe, strength, pre_cfg=True)
    assert "sampler_cfg_function" in patched.model_options and "sampler_cfg_function" not in probe.model_options
    assert patched.model_options["sampler_post_cfg_function"] == probe.model_options["sampler_post_cfg_function"]
    out = _one_step(patched, sd1, scale).double().numpy()
    x, c, u = (seen[k].double().numpy() for k in ("input", "cond_denoised", "uncond_denoised"))
    # Independently: noise predictions x - x0, CFG, then the per-pixel channel norm set to the positive's.
    eps_c, eps_u = x - c, x - u
    comb = eps_u + scale * (eps_c - eps_u)
    rescaled = comb * _channel_norm(eps_c) / _channel_norm(comb)
    noise = strength * rescaled + (1.0 - strength) * comb
    np.testing.assert_allclose(out, (x - noise) / 0.18215, rtol=1e-4, atol=1e-4)  # euler to sigma 0: the x0
    # The default (post-CFG, x0 space, attenuate only) gives another result; plain CFG a third.
    post = _one_step(cfg_norm(sd1.model, strength)[0], sd1, scale).double().numpy()
    guided = u + scale * (c - u)
    capped = guided * np.clip(_channel_norm(c) / (_channel_norm(guided) + 1e-8), 0.0, 1.0) * strength
    np.testing.assert_allclose(post, capped / 0.18215, rtol=1e-4, atol=1e-4)
    assert not np.allclose(out, post, atol=1e-3)


def test_cfg_norm_pre_cfg_hook_amplifies_and_keeps_zero(sd1_with_prompts):
    from comfy_core.sampling.cfg_patches import CFGNormPreCFG

    cond = torch.tensor([[[[3.0]], [[4.0]]], [[[0.0]], [[0.0]]]])     # [2, 2, 1, 1]: norms 5 and 0
    uncond = torch.tensor([[[[1.0]], [[1.0]]], [[[0.0]], [[0.0]]]])
    out = CFGNormPreCFG(1.0)({"cond": cond, "uncond": uncond, "cond_scale": 0.5})
    comb = uncond + 0.5 * (cond - uncond)                               # (2, 2.5): norm 3.2016 < 5
    torch.testing.assert_close(out[0], comb[0] * 5.0 / math.hypot(2.0, 2.5))  # scaled up: no clamp
    assert torch.equal(out[1], torch.zeros(2, 1, 1))                    # a zero combination stays zero
    assert CFGNormPreCFG(0.5).cache_signature() != CFGNormPreCFG(1.0).cache_signature()


def test_cfg_norm_pre_cfg_is_checked_and_declared(sd1_with_prompts):
    from nodes.cfg_patches import cfg_norm

    with pytest.raises(NodeInputError, match="pre_cfg"):
        cfg_norm(sd1_with_prompts.model, 1.0, pre_cfg="yes")
    spec = _record("CFGNorm")["input"]["optional"]["pre_cfg"]
    assert spec[0] == "BOOLEAN" and spec[1]["default"] is False and "BEFORE the sampler's CFG" in spec[1]["tooltip"]


def test_cfg_norm_post_refuses_an_overflowing_strength():
    from comfy_core.sampling.cfg_patches import CFGNorm

    bad = torch.tensor([1.0, float("inf")]).reshape(1, 2, 1, 1)
    args = {"denoised": bad, "cond_denoised": torch.ones(1, 2, 1, 1)}
    with pytest.raises(RuntimeError, match="strength=5.0"):
        CFGNorm(5.0)(args)
    CFGNorm(1.0)(args)  # at most 1 it cannot overflow: no check, as ComfyUI
    fine = {"denoised": torch.full((1, 2, 1, 1), 3.0), "cond_denoised": torch.ones(1, 2, 1, 1)}
    torch.testing.assert_close(CFGNorm(5.0)(fine), torch.full((1, 2, 1, 1), 3.0 * (math.sqrt(2) / math.sqrt(18)) * 5))


# --- LatentApplyOperationCFG.start_percent / end_percent -------------------------------------------

def test_apply_operation_cfg_acts_only_inside_the_sigma_window(sd1_with_prompts):
    from nodes.latent_operations import latent_apply_operation_cfg

    calls = []

    def op(latent, **_):
        calls.append(latent)
        return latent * 2.0

    model = sd1_with_prompts.model
    sampling = model.get_model_object("model_sampling")
    (patched,) = latent_apply_operation_cfg(model, op, 0.25, 0.75)
    (hook,) = patched.model_options["sampler_pre_cfg_function"]
    high = float(sampling.sigma(torch.tensor(0.75 * 999.0)))   # the sigmas of 25 % and 75 %, by the table
    low = float(sampling.sigma(torch.tensor(0.25 * 999.0)))
    positive, negative = torch.randn(1, 4, 2, 2), torch.randn(1, 4, 2, 2)
    for sigma, inside in ((high * 1.01, False), (high, True), ((high + low) / 2, True), (low, True),
                          (low * 0.99, False), (0.0, False)):
        calls.clear()
        conds = [positive, negative]
        out = hook({"conds_out": conds, "sigma": torch.tensor([sigma, 123.0]), "conds": [None, None]})
        if inside:
            assert len(calls) == 1 and torch.allclose(out[0], (positive - negative) * 2.0 + negative), sigma
        else:
            assert not calls and out is conds and out[0] is positive, sigma  # untouched
    # The defaults: every step, and no sampling table needed.
    (everywhere,) = latent_apply_operation_cfg(model, op)
    calls.clear()
    everywhere.model_options["sampler_pre_cfg_function"][0]({"conds_out": [positive, negative],
                                                             "sigma": torch.tensor([1e9])})
    assert len(calls) == 1
    assert (latent_apply_operation_cfg(model, op, 0.25, 0.75)[0].cache_signature()
            != everywhere.cache_signature())
    with pytest.raises(NodeInputError, match="end_percent"):
        latent_apply_operation_cfg(model, op, 0.0, 1.5)


CAPTURED: dict = {}


@node("TestCaptureExecuteParams2026", category="testing", output_node=True, inputs=[Input("value", "*"), String("tag")])
def _capture(value, tag: str) -> dict:
    CAPTURED[tag] = value
    return {"ui": {"tag": [tag]}}


async def test_prompts_with_and_without_the_new_inputs_run(tmp_path, tiny_sd1_ckpt):
    """A prompt of today's editor sets pre_cfg / start_percent / end_percent; an older prompt
    without them runs with today's defaults (the same result as the defaults set explicitly)."""
    environment = Environment.rooted_at(tmp_path)
    environment.ensure_dirs()
    (tmp_path / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(_capture)

    def prompt(norm: dict, operation: dict, tag: str) -> dict:
        return {
            "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
            "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a lighthouse", "clip": ["1", 1]}},
            "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["1", 1]}},
            "4": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
            "5": {"class_type": "CFGNorm", "inputs": {"model": ["1", 0], "strength": 0.8, **norm}},
            "6": {"class_type": "LatentOperationTonemapReinhard", "inputs": {"multiplier": 0.05}},
            "7": {"class_type": "LatentApplyOperationCFG", "inputs": {"model": ["5", 0], "operation": ["6", 0],
                                                                      **operation}},
            "8": {"class_type": "KSampler", "inputs": {
                "model": ["7", 0], "seed": 5, "steps": 3, "cfg": 4.0, "sampler_name": "euler", "scheduler": "normal",
                "positive": ["2", 0], "negative": ["3", 0], "latent_image": ["4", 0], "denoise": 1.0}},
            "9": {"class_type": "TestCaptureExecuteParams2026", "inputs": {"value": ["8", 0], "tag": tag}},
        }

    runs = {"old": ({}, {}), "defaults": ({"pre_cfg": False}, {"start_percent": 0.0, "end_percent": 1.0}),
            "today": ({"pre_cfg": True}, {"start_percent": 0.3, "end_percent": 0.6})}
    for tag, (norm, operation) in runs.items():
        p = prompt(norm, operation, tag)
        checked = await validate_prompt(p, registry, env=environment)
        assert checked.ok, checked.node_errors
        out = await Executor(registry, env=environment).execute(p, tag, outputs=checked.outputs)
        assert out.status == "success", out.error
    old, defaults, today = (CAPTURED[t]["samples"] for t in ("old", "defaults", "today"))
    assert torch.equal(old, defaults) and not torch.allclose(today, old, atol=1e-3)
    bad = prompt({"pre_cfg": True}, {"start_percent": 1.5}, "bad")
    checked = await validate_prompt(bad, registry, env=environment)
    assert not checked.ok and "7" in checked.node_errors


# --- MaskPreview.filename_prefix, SaveAnimatedWEBP.num_frames ----------------------------------------

def test_mask_preview_takes_a_filename_prefix_without_effect(env):
    from nodes.mask import mask_preview

    mask = torch.zeros(1, 4, 6)
    with running_node("MaskPreview", "1", env):
        out = mask_preview(mask, filename_prefix="masks/custom")
    (record,) = out["ui"]["images"]
    assert record["type"] == "temp" and record["filename"].startswith("ComfyUI_temp_") and record["subfolder"] == ""
    assert out["result"][0] is mask and not list(env.output_dir.rglob("*.png"))


def test_save_animated_webp_takes_num_frames_and_keeps_one_file(env):
    from PIL import Image

    from nodes.save_formats import save_animated_webp

    images = torch.rand(4, 8, 8, 3, generator=torch.Generator().manual_seed(0))
    with running_node("SaveAnimatedWEBP", "1", env):
        split = save_animated_webp(images, "w", 6.0, True, 80, "default", num_frames=2)
        whole = save_animated_webp(images, "w", 6.0, True, 80, "default")
    # As today's ComfyUI: num_frames reaches no saving code, so the batch is still one animation.
    assert [r["filename"] for r in split["ui"]["images"]] == ["w_00001_.webp"]
    assert [r["filename"] for r in whole["ui"]["images"]] == ["w_00002_.webp"]
    with Image.open(env.output_dir / "w_00001_.webp") as img:
        assert img.n_frames == 4
    assert (env.output_dir / "w_00001_.webp").read_bytes() == (env.output_dir / "w_00002_.webp").read_bytes()
    with running_node("SaveAnimatedWEBP", "1", env), pytest.raises(NodeInputError, match="num_frames"):
        save_animated_webp(images, "w", 6.0, True, 80, "default", num_frames=-1)


def test_pack_calls_by_todays_execute_order(session, tmp_path):
    """`SaveAnimatedWEBP.execute(images, fps, filename_prefix, lossless, quality, method, num_frames)` and
    `MaskPreview.execute(mask, filename_prefix)`, positionally as today's ComfyUI orders them."""
    from comfy_extras.nodes_images import SaveAnimatedWEBP
    from comfy_extras.nodes_mask import MaskPreview

    images = torch.rand(2, 8, 8, 3)
    out = SaveAnimatedWEBP.execute(images, 6.0, "packs/anim", True, 80, "default", 1)
    assert out[0] is images
    assert (tmp_path / "output" / "packs" / "anim_00001_.webp").exists()
    assert MaskPreview.execute(torch.zeros(1, 4, 4), "ignored")[0].shape == (1, 4, 4)


# --- SaveAudio / SaveAudioMP3 / SaveAudioOpus .format --------------------------------------------

def _tone(rate: int = 22050) -> dict:
    t = torch.arange(int(rate * 0.3)) / rate
    return {"waveform": (0.25 * torch.sin(2 * math.pi * 220 * t)).reshape(1, 1, -1), "sample_rate": rate}


def _codec(path) -> tuple[str, str, int]:
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        return container.format.name, stream.codec_context.name, stream.codec_context.sample_rate


@pytest.mark.parametrize("name, fn, kwargs, ext, codec", [
    ("SaveAudio", "save_audio", {}, "flac", "flac"),
    ("SaveAudio", "save_audio", {"format": "mp3"}, "mp3", "mp3"),
    ("SaveAudio", "save_audio", {"format": "opus"}, "opus", "opus"),
    ("SaveAudioMP3", "save_audio_mp3", {"quality": "320k"}, "mp3", "mp3"),
    ("SaveAudioMP3", "save_audio_mp3", {"quality": "V0", "format": "opus"}, "opus", "opus"),
    ("SaveAudioMP3", "save_audio_mp3", {"quality": "V0", "format": "flac"}, "flac", "flac"),
    ("SaveAudioOpus", "save_audio_opus", {"quality": "64k"}, "opus", "opus"),
    ("SaveAudioOpus", "save_audio_opus", {"quality": "64k", "format": "mp3"}, "mp3", "mp3"),
    ("SaveAudioOpus", "save_audio_opus", {"format": "flac"}, "flac", "flac"),
])
def test_the_format_picks_container_and_codec(env, name, fn, kwargs, ext, codec):
    import nodes.audio as audio_nodes

    with running_node(name, "1", env):
        out = getattr(audio_nodes, fn)(_tone(), "audio/take", **kwargs)
    (record,) = out["ui"]["audio"]
    assert record["filename"] == f"take_00001_.{ext}"
    container, got_codec, rate = _codec(env.output_dir / "audio" / record["filename"])
    assert got_codec.startswith(codec), got_codec
    assert {"flac": "flac", "mp3": "mp3", "opus": "ogg"}[ext] in container.split(","), container
    assert rate == (48000 if ext == "opus" else 22050)  # Opus at its 48 kHz


def test_mp3_bit_rates_follow_the_quality_of_the_format(env):
    from nodes.audio import save_audio, save_audio_mp3

    t = torch.arange(44100 * 2) / 44100
    audio = {"waveform": (0.3 * torch.sin(2 * math.pi * 440 * t) * torch.sin(2 * math.pi * 3 * t)).reshape(1, 1, -1),
             "sample_rate": 44100}
    with running_node("SaveAudio", "1", env):
        save_audio(audio, "r/flacdefault", format="mp3")           # the helper's default quality: 128k
        save_audio_mp3(audio, "r/high", "320k")
    size_128 = (env.output_dir / "r" / "flacdefault_00001_.mp3").stat().st_size
    size_320 = (env.output_dir / "r" / "high_00001_.mp3").stat().st_size
    assert size_320 > 2 * size_128


def test_a_bad_format_or_quality_is_refused(env):
    from nodes.audio import save_audio, save_audio_opus

    with running_node("SaveAudio", "1", env):
        with pytest.raises(NodeInputError, match="format"):
            save_audio(_tone(), "x", format="wav")
        with pytest.raises(NodeInputError):
            save_audio_opus(_tone(), "x", "1k")
    assert not list(env.output_dir.rglob("*.*"))


def test_save_audio_execute_takes_format_third_as_today(session, tmp_path):
    from comfy_extras.nodes_audio import SaveAudio, SaveAudioMP3

    audio = _tone()
    assert SaveAudio.execute(audio, "packs/a", "opus")[0] is audio
    SaveAudioMP3.execute(audio, "packs/b", "mp3", "V0")
    SaveAudioMP3.execute(audio, "packs/c")                                 # execute's defaults: mp3, 128k
    assert _codec(tmp_path / "output" / "packs" / "a_00001_.opus")[1].startswith("opus")
    assert _codec(tmp_path / "output" / "packs" / "b_00001_.mp3")[1].startswith("mp3")
    assert _codec(tmp_path / "output" / "packs" / "c_00001_.mp3")[1].startswith("mp3")


# --- MiniMaxH3FunControlNetApply.fade_in_frames / fade_out_frames ----------------------------------

def test_the_fade_envelope_by_hand():
    from comfy_core.families.minimax_h3.fun_control import fade_envelope

    # 2 latent frames = 1 + 4 pixel frames. In over 3: smoothstep(0, .5, 1) = 0, .5, 1; out over 2: 1, 0.
    torch.testing.assert_close(fade_envelope(2, 3, 2), torch.tensor([0.0, (0.5 + 1 + 1 + 0) / 4]))
    torch.testing.assert_close(fade_envelope(2, 0, 0), torch.ones(2))
    torch.testing.assert_close(fade_envelope(2, 1, 1), torch.tensor([0.0, 0.75]))
    # 7 latent frames = 1 + 6 * 4 = 25 pixel frames; in over 5: t = 0, .25, .5, .75, 1.
    s = [t * t * (3 - 2 * t) for t in (0.0, 0.25, 0.5, 0.75, 1.0)]
    got = fade_envelope(7, 5, 0)
    torch.testing.assert_close(got[:2], torch.tensor([s[0], (s[1] + s[2] + s[3] + s[4]) / 4]))
    assert torch.equal(got[2:], torch.ones(5))
    assert torch.equal(fade_envelope(2, 9999, 0), fade_envelope(2, 5, 0))  # clamped to the frame count


def _fun_patch(model_patch, vae, fade_in=0, fade_out=0):
    from comfy_core.families.minimax_h3.fun_control import MiniMaxH3FunControlPatch

    video = torch.rand(3, 64, 96, 3, generator=torch.Generator().manual_seed(2))
    return MiniMaxH3FunControlPatch(model_patch, vae, video, None, None, 0.7, 1.0, 0.0,
                                    fade_in_frames=fade_in, fade_out_frames=fade_out)


def test_the_fades_scale_the_target_videos_skip_per_latent_frame(dit):
    model_patch, _ = _control()
    recorded = {}
    for key, fades in (("plain", (0, 0)), ("eased", (3, 2))):
        rec0, rec1 = Recorder(), Recorder()
        patch = _fun_patch(model_patch, FakeVae((1, 24, 2, 4, 6)), *fades)
        outs = _run_dit(dit, _replace(patch, {("double_block", 0): rec0, ("double_block", 1): rec1}))
        (args, _h0, o0), = rec0.seen
        (_a1, h1, _o1), = rec1.seen
        recorded[key] = (args["layout"], o0, h1 - o0, outs)   # h1 - o0: strength * block 0's skip
    layout, o0, skip_plain, plain_out = recorded["plain"]
    _, o0_eased, skip_eased, eased_out = recorded["eased"]
    assert torch.equal(o0, o0_eased)                           # the same input to the first control step
    (a, b), = [(a, b) for a, b, kind in layout.segments if kind == "video"]
    per_frame = (b - a) // 2                                   # 2 latent frames of the target video
    weights = torch.tensor([0.0, 0.625]).repeat_interleave(per_frame)   # the envelope above, by hand
    want = skip_plain.clone()
    want[a:b] = skip_plain[a:b] * weights[:, None]
    torch.testing.assert_close(skip_eased, want, atol=1e-5, rtol=1e-5)
    assert skip_plain[a:a + per_frame].abs().max() > 0 and skip_eased[a:a + per_frame].abs().max() == 0
    assert not torch.allclose(eased_out[0], plain_out[0], atol=1e-4)
    # Other rows (text, keyframe, audio) are as without fades.
    assert torch.equal(skip_eased[:a], skip_plain[:a]) and torch.equal(skip_eased[b:], skip_plain[b:])


def test_the_node_takes_the_fades_in_todays_order(patcher):
    from nodes.minimax_h3_nodes import minimax_h3_fun_controlnet_apply

    model_patch, _ = _control()
    video, vae = torch.rand(3, 64, 96, 3), FakeVae((1, 24, 2, 4, 6))
    out, = minimax_h3_fun_controlnet_apply(patcher, model_patch, vae, 0.5, 0.0, 1.0, 12, 4, video)
    control = out.model_options["transformer_options"]["patches_replace"]["dit"][("double_block", 0)].control
    assert (control.fade_in_frames, control.fade_out_frames) == (12, 4) and control.control_video is not None
    old, = minimax_h3_fun_controlnet_apply(patcher, model_patch, vae, 0.5, 0.0, 1.0, control_video=video)
    control = old.model_options["transformer_options"]["patches_replace"]["dit"][("double_block", 0)].control
    assert (control.fade_in_frames, control.fade_out_frames) == (0, 0)
    with pytest.raises(NodeInputError, match="fade_out_frames"):
        minimax_h3_fun_controlnet_apply(patcher, model_patch, vae, 0.5, 0.0, 1.0, 0, 3601, video)
    spec = _record("MiniMaxH3FunControlNetApply")
    order = spec["input_order"]["required"]
    assert order[order.index("end_percent") + 1:] == ["fade_in_frames", "fade_out_frames"]
    assert spec["input"]["required"]["fade_in_frames"][1]["max"] == 3600


# --- WanInfiniteTalkToVideo's second speaker as keyword arguments ------------------------------------

def _two_speaker_inputs():
    mask_1, mask_2 = torch.zeros(1, 16, 32), torch.zeros(1, 16, 32)
    mask_1[:, :, :16], mask_2[:, :, 16:] = 1.0, 1.0
    start = torch.rand(1, 16, 32, 3, generator=torch.Generator().manual_seed(4))
    return mask_1, mask_2, start


def test_the_second_speaker_by_keyword_is_the_two_speakers_mode(model, patch):  # noqa: F811
    from comfy_core.model_patches.multitalk import AUDIO_EMBEDS, MultiTalkAttnMapPatch

    mask_1, mask_2, start = _two_speaker_inputs()
    # ComfyUI's "add" layout: speaker 2 speaks after speaker 1 (8 states at 50 Hz: 4 video frames),
    # so inside these 9 frames.
    a, b = _audio(8, seed=1), _audio(30, seed=2)
    by_mode, *_ = _run_talk({"mode": "two_speakers", "audio_encoder_output_2": b, "mask_1": mask_1, "mask_2": mask_2},
                            model, patch, audio=a, start_image=start)
    by_keyword, *_ = _run_talk(SINGLE, model, patch, audio=a, start_image=start, audio_encoder_output_2=b,
                               mask_1=mask_1, mask_2=mask_2)
    single, *_ = _run_talk(SINGLE, model, patch, audio=a, start_image=start)
    embeds = [m.model_options["transformer_options"][AUDIO_EMBEDS] for m in (by_mode, by_keyword, single)]
    torch.testing.assert_close(embeds[1], embeds[0])
    assert embeds[1].shape[2] == 2 * embeds[2].shape[2]      # two speakers' tokens side by side
    (attn1,) = _patches(by_keyword)["attn1_patch"]
    assert isinstance(attn1, MultiTalkAttnMapPatch)
    assert torch.equal(attn1.masks, torch.tensor([[True, False], [False, True]]))  # mask_2's tokens: speaker 2
    assert "attn1_patch" not in _patches(single)
    # The second speaker's audio drives the second speaker's tokens only (speaker 1's are its audio
    # and then silence, whatever speaker 2 says).
    other, *_ = _run_talk(SINGLE, model, patch, audio=a, start_image=start, audio_encoder_output_2=_audio(30, seed=9),
                          mask_1=mask_1, mask_2=mask_2)
    changed = other.model_options["transformer_options"][AUDIO_EMBEDS]
    half = embeds[1].shape[2] // 2
    assert torch.equal(changed[:, :, :half], embeds[1][:, :, :half])
    assert not torch.allclose(changed[:, :, half:], embeds[1][:, :, half:])


def test_the_keyword_speaker_needs_both_masks_and_the_mode_wins(model, patch):  # noqa: F811
    from comfy_core.model_patches.multitalk import AUDIO_EMBEDS

    mask_1, mask_2, start = _two_speaker_inputs()
    with pytest.raises(NodeInputError, match="mask_1"):
        _run_talk(SINGLE, model, patch, start_image=start, audio_encoder_output_2=_audio(30, seed=2), mask_1=mask_1)
    with pytest.raises(NodeInputError, match="audio_encoder_output_2"):
        _run_talk(SINGLE, model, patch, start_image=start, mask_1=mask_1, mask_2=mask_2)
    a, b, c = _audio(40, seed=1), _audio(30, seed=2), _audio(30, seed=3)
    mode = {"mode": "two_speakers", "audio_encoder_output_2": b, "mask_1": mask_1, "mask_2": mask_2}
    wins, *_ = _run_talk(mode, model, patch, audio=a, start_image=start, audio_encoder_output_2=c)
    ref, *_ = _run_talk(mode, model, patch, audio=a, start_image=start)
    assert torch.equal(wins.model_options["transformer_options"][AUDIO_EMBEDS],
                       ref.model_options["transformer_options"][AUDIO_EMBEDS])


# --- TripleCLIPLoader / QuadrupleCLIPLoader `device` ------------------------------------------------

@pytest.mark.parametrize("node_id, module, fn, files", [
    ("TripleCLIPLoader", "nodes.loaders", "triple_clip_loader", 3),
    ("QuadrupleCLIPLoader", "nodes.hidream_nodes", "quadruple_clip_loader", 4),
])
def test_the_clip_loaders_device(monkeypatch, env, node_id, module, fn, files):
    import importlib

    mod = importlib.import_module(module)
    seen = []
    monkeypatch.setattr(mod, "_load_clip_files", lambda paths, kind, device: seen.append((len(paths), kind, device)))
    (env.folders.models_dir / "text_encoders").mkdir(parents=True, exist_ok=True)
    names = [f"te{i}.safetensors" for i in range(files)]
    for name in names:
        (env.folders.models_dir / "text_encoders" / name).write_bytes(b"")
    with running_node(node_id, "1", env):
        getattr(mod, fn)(*names)
        getattr(mod, fn)(*names, device="cpu")
    assert [s[2] for s in seen] == ["default", "cpu"] and {s[0] for s in seen} == {files}
    record = _record(node_id)
    assert record["input"]["optional"]["device"] == ["COMBO", {"multiselect": False, "advanced": True,
                                                               "options": ["default", "cpu"]}]
    assert record["input_order"]["required"][-1] == f"clip_name{files}" and record["category"] == "model/loaders"


async def test_a_loader_prompt_with_and_without_device_validates(env):
    registry = Registry()
    register_builtin_nodes(registry)
    (env.folders.models_dir / "text_encoders").mkdir(parents=True, exist_ok=True)
    for i in range(3):
        (env.folders.models_dir / "text_encoders" / f"te{i}.safetensors").write_bytes(b"")
    names = {f"clip_name{i + 1}": f"te{i}.safetensors" for i in range(3)}

    def prompt(extra: dict) -> dict:
        return {"1": {"class_type": "TripleCLIPLoader", "inputs": {**names, **extra}},
                "2": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["1", 0], "text": "x"}},
                "3": {"class_type": "ConditioningZeroOut", "inputs": {"conditioning": ["2", 0]}},
                "4": {"class_type": "PreviewAny", "inputs": {"source": ["3", 0]}}}

    for extra in ({}, {"device": "cpu"}):
        checked = await validate_prompt(prompt(extra), registry, env=env)
        assert checked.ok, checked.node_errors
    checked = await validate_prompt(prompt({"device": "gpu"}), registry, env=env)
    assert not checked.ok and "1" in checked.node_errors


def test_pack_calls_of_the_guidance_nodes(session, sd1_with_prompts):
    """`CFGNorm.execute(model, strength, pre_cfg)` and
    `LatentApplyOperationCFG.execute(model, operation, start_percent, end_percent)` as packs call them."""
    from comfy_extras.nodes_cfg import CFGNorm
    from comfy_extras.nodes_latent import LatentApplyOperationCFG

    from comfy_core.sampling.cfg_patches import CFGNormPreCFG

    model = sd1_with_prompts.model
    patched = CFGNorm.execute(model, 0.5, True)[0]
    assert patched.model_options["sampler_cfg_function"] == CFGNormPreCFG(0.5)
    assert "sampler_cfg_function" not in CFGNorm.execute(model, 0.5)[0].model_options
    windowed = LatentApplyOperationCFG.execute(model, lambda latent, **_: latent, 0.2, 0.4)[0]
    (hook,) = windowed.model_options["sampler_pre_cfg_function"]
    sampling = model.get_model_object("model_sampling")
    assert hook.sigma_start == pytest.approx(float(sampling.percent_to_sigma(0.2)))
    assert hook.sigma_end == pytest.approx(float(sampling.percent_to_sigma(0.4)))

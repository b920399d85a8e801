"""ContextWindowsManual / WanContextWindowsManual (nodes/context_windows.py): ComfyUI's sockets, a
patched clone carrying the handler, Wan's frame -> latent-frame conversion, cancelling between
windows, and sampling with windows: KSampler through the executor on batch-as-frames (dim 0) and
on a 5-D video latent (dim 2), and the library's Euler sampler on a 5-D latent."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from comfy_core.patching import ModelPatcher
from comfy_core.wrappers import WrappersMP
from comfy_core.sampling import cfg
from comfy_core.sampling.context_windows import (
    CONTEXT_WINDOW_OPTION, ContextFuseMethods, ContextSchedules, IndexListContextHandler,
)
from comfy_core.models.model_sampling import ModelSampling
from comfy_core.sampling.samplers.deterministic import sample_euler
from graph.context import Interrupted, NodeContext, reset_current, set_current
from graph.executor import Executor
from graph.native import Input, Output, node
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes import context_windows as cw
from nodes.environment import Environment
from nodes.errors import NodeInputError
from tests.fixtures.object_info_parity import comfyui_object_info, differences

S = 0.5


class FrameDenoiser(nn.Module):
    """An ideal Gaussian denoiser applied frame by frame (data mean = the context mean plus half
    the frame's concat latent), so windows cannot change its answer; records each call's input."""

    def __init__(self, video: bool = False) -> None:
        super().__init__()
        self.offset = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.model_sampling = ModelSampling()
        self.latent_format = SimpleNamespace(channels=4, scale_factor=1.0, latent_rgb_factors=None)
        if video:  # a video model's latents are [B, C, T, h, w] (Wan's formats: latent_dimensions 3)
            self.latent_format = SimpleNamespace(channels=4, scale_factor=1.0, latent_rgb_factors=None,
                                                 latent_dimensions=3, process_in=lambda t: t, process_out=lambda t: t)
        self.calls: list[tuple[tuple[int, ...], object]] = []

    def apply_model(self, x, sigma, c_crossattn=None, y=None, transformer_options=None, c_concat=None, **_):
        self.calls.append((tuple(x.shape), (transformer_options or {}).get(CONTEXT_WINDOW_OPTION)))
        shape = [-1] + [1] * (x.ndim - 1)
        mu = (c_crossattn.mean(dim=(1, 2)) + self.offset).view(shape)
        if c_concat is not None:
            mu = mu + 0.5 * c_concat
        sg = sigma.view(shape)
        return (S * S * x + sg * sg * mu) / (S * S + sg * sg)

    def encode_adm(self, **_):
        return None


MODEL = ModelPatcher(FrameDenoiser())
VIDEO_MODEL = ModelPatcher(FrameDenoiser(video=True))
CAPTURED: dict[str, torch.Tensor] = {}


@node("TestFrameModel", inputs=[], outputs=[Output("MODEL")])
def frame_model():
    return (MODEL,)


@node("TestVideoFrameModel", inputs=[], outputs=[Output("MODEL")])
def video_frame_model():
    return (VIDEO_MODEL,)


@node("TestTextCond", inputs=[], outputs=[Output("CONDITIONING")])
def text_cond():
    return ([[torch.full((1, 7, 8), 0.25), {}]],)


@node("TestVideoLatent", inputs=[], outputs=[Output("LATENT")])
def video_latent():
    return ({"samples": torch.zeros(1, 4, 9, 2, 3)},)


@node("TestCaptureLatent", inputs=[Input("samples", "LATENT"), Input("key", "STRING")], output_node=True)
def capture_latent(samples, key):
    CAPTURED[key] = samples["samples"]
    return {}


def test_todays_nodes_keep_0364s_inputs_first_so_old_workflows_map_onto_them(tmp_path):
    # Today's declarations are held to their records (tests/nodes/test_object_info_2026.py); 0.3.64's
    # widgets are the leading ones of today's, in order, so a 0.3.64 save's positional widgets_values still
    # land on the same inputs (tests/nodes/test_context_windows_2026.py loads one).
    registry = Registry()
    register_builtin_nodes(registry)
    ours = registry.object_info(Environment.rooted_at(tmp_path))
    theirs = {k: v for k, v in comfyui_object_info().items() if v["python_module"] == cw.MODULE}
    assert set(theirs) == {"ContextWindowsManual", "WanContextWindowsManual"}
    for k in theirs:
        old, new = theirs[k]["input_order"]["required"], ours[k]["input_order"]["required"]
        assert new[:len(old)] == old and len(new) > len(old)
        assert ours[k]["experimental"] is True


def test_the_combo_lists_are_the_runtimes_names():
    assert cw.SCHEDULES == [ContextSchedules.STATIC_STANDARD, ContextSchedules.UNIFORM_STANDARD,
                            ContextSchedules.UNIFORM_LOOPED, ContextSchedules.BATCHED]
    assert cw.FUSE_METHODS == ContextFuseMethods.LIST_STATIC


def test_manual_returns_a_clone_with_the_handler_and_leaves_the_input_alone():
    (patched,) = cw.context_windows_manual(MODEL, 16, 4, "standard_uniform", 2, True, "relative", 0)
    assert patched is not MODEL and "context_handler" not in MODEL.model_options
    h = patched.model_options["context_handler"]
    assert isinstance(h, IndexListContextHandler)
    assert (h.context_schedule.name, h.fuse_method.name, h.context_length, h.context_overlap, h.context_stride,
            h.closed_loop, h.dim) == ("standard_uniform", "relative", 16, 4, 2, True, 0)
    assert patched.get_wrappers(WrappersMP.PREPARE_SAMPLING, "ContextWindows_prepare_sampling")
    assert not MODEL.get_wrappers(WrappersMP.PREPARE_SAMPLING, "ContextWindows_prepare_sampling")
    again = patched.clone()  # a later patch keeps a handler of its own
    assert again.model_options["context_handler"] is not h
    assert again.model_options["context_handler"].context_length == 16


@pytest.mark.parametrize("frames, overlap, latent_frames, latent_overlap",
                         [(81, 30, 21, 7), (1, 0, 1, 0), (85, 1, 22, 0), (17, 4, 5, 1)])  # overlap: n // 4 today
def test_wan_converts_video_frames_to_latent_frames_on_dim_2(frames, overlap, latent_frames, latent_overlap):
    (patched,) = cw.wan_context_windows_manual(MODEL, frames, overlap, "standard_static", 1, False, "pyramid")
    h = patched.model_options["context_handler"]
    assert (h.context_length, h.context_overlap, h.dim) == (latent_frames, latent_overlap, 2)


def test_an_overlap_as_long_as_the_window_is_refused_except_for_batched():
    with pytest.raises(NodeInputError, match="context_overlap"):
        cw.wan_context_windows_manual(MODEL, 5, 8, "standard_static", 1, False, "pyramid")  # 2 and 2 latent frames
    with pytest.raises(NodeInputError, match="context_overlap"):
        cw.context_windows_manual(MODEL, 4, 6, "looped_uniform", 1, False, "flat", 0)
    cw.context_windows_manual(MODEL, 4, 6, "batched", 1, False, "flat", 0)
    with pytest.raises(NodeInputError, match="fuse_method"):
        cw.context_windows_manual(MODEL, 4, 1, "batched", 1, False, "mean", 0)
    with pytest.raises(NodeInputError, match="model"):
        cw.context_windows_manual("not a model", 4, 1, "batched", 1, False, "flat", 0)


def test_a_cancelled_prompt_stops_between_windows(tmp_path):
    (patched,) = cw.context_windows_manual(MODEL, 4, 1, "standard_static", 1, False, "flat", 2)
    h = patched.model_options["context_handler"]
    calls = []
    ctx = NodeContext("p", "3", "3", None, Environment.rooted_at(tmp_path), is_interrupted=lambda: len(calls) >= 2)
    token = set_current(ctx)
    try:
        with pytest.raises(Interrupted):
            h.execute(lambda m, c, sx, s, o: calls.append(1) or [sx], None, [None], torch.zeros(1, 2, 10, 1, 1),
                      torch.tensor([1.0]), {"transformer_options": {"sample_sigmas": torch.tensor([1.0, 0.0])}})
    finally:
        reset_current(token)
    assert len(calls) == 2  # of 3 windows


def _sampler(model, latent_image, key):
    return {"class_type": "KSampler", "inputs": {
        "model": model, "seed": 5, "steps": 4, "cfg": 2.5, "sampler_name": "euler", "scheduler": "karras",
        "positive": ["c", 0], "negative": ["c", 0], "latent_image": latent_image, "denoise": 1.0}}


async def _run(tmp_path, prompt):
    registry = Registry()
    register_builtin_nodes(registry)
    for fn in (frame_model, video_frame_model, text_cond, video_latent, capture_latent):
        registry.add_native(fn)
    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    return await Executor(registry, env=env).execute(prompt, "p", outputs=checked.outputs)


async def test_ksampler_with_windows_on_batch_as_frames_through_the_executor(tmp_path):
    prompt = {
        "m": {"class_type": "TestFrameModel", "inputs": {}},
        "c": {"class_type": "TestTextCond", "inputs": {}},
        "l": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 32, "batch_size": 10}},
        "w": {"class_type": "ContextWindowsManual", "inputs": {
            "model": ["m", 0], "context_length": 4, "context_overlap": 1, "context_schedule": "standard_static",
            "context_stride": 1, "closed_loop": False, "fuse_method": "pyramid", "dim": 0, "freenoise": False,
            "cond_retain_index_list": "", "split_conds_to_windows": False, "latent_retain_index_list": "",
            "causal_window_fix": True}},
        "s1": _sampler(["w", 0], ["l", 0], "windowed"),
        "s2": _sampler(["m", 0], ["l", 0], "plain"),
        "o1": {"class_type": "TestCaptureLatent", "inputs": {"samples": ["s1", 0], "key": "windowed"}},
        "o2": {"class_type": "TestCaptureLatent", "inputs": {"samples": ["s2", 0], "key": "plain"}},
    }
    MODEL.model.calls.clear()
    outcome = await _run(tmp_path, prompt)
    assert outcome.status == "success", outcome.messages
    windowed, plain = CAPTURED.pop("windowed"), CAPTURED.pop("plain")
    assert windowed.shape == (10, 4, 4, 8)
    torch.testing.assert_close(windowed, plain, atol=1e-5, rtol=1e-5)
    batches = [shape[0] for shape, window in MODEL.model.calls if window is not None]
    # 4 steps x 3 windows ([0..3], [3..6], [6..9]), cond and uncond in one batch of 2 x 4 frames, the two
    # later windows with the causal fix frame before them (2 x 5)
    assert batches == [8, 10, 10] * 4
    assert sum(1 for _, window in MODEL.model.calls if window is None) == 4  # the plain run: one call a step


async def test_ksampler_with_wan_windows_on_a_5d_latent_through_the_executor(tmp_path):
    prompt = {
        "m": {"class_type": "TestVideoFrameModel", "inputs": {}},
        "c": {"class_type": "TestTextCond", "inputs": {}},
        "l": {"class_type": "TestVideoLatent", "inputs": {}},
        "w": {"class_type": "WanContextWindowsManual", "inputs": {
            "model": ["m", 0], "context_length": 13, "context_overlap": 5, "context_schedule": "standard_static",
            "context_stride": 1, "closed_loop": False, "fuse_method": "overlap-linear", "freenoise": False,
            "retain_first_frame": False, "split_conds_to_windows": False}},
        "s1": _sampler(["w", 0], ["l", 0], "windowed"),
        "s2": _sampler(["m", 0], ["l", 0], "plain"),
        "o1": {"class_type": "TestCaptureLatent", "inputs": {"samples": ["s1", 0], "key": "windowed"}},
        "o2": {"class_type": "TestCaptureLatent", "inputs": {"samples": ["s2", 0], "key": "plain"}},
    }
    VIDEO_MODEL.model.calls.clear()
    outcome = await _run(tmp_path, prompt)
    assert outcome.status == "success", outcome.messages
    windowed, plain = CAPTURED.pop("windowed"), CAPTURED.pop("plain")
    assert windowed.shape == (1, 4, 9, 2, 3)
    torch.testing.assert_close(windowed, plain, atol=1e-5, rtol=1e-5)
    # 13 frames -> 4 latent frames, overlap 5 -> 1: windows [0..3], [3..6], [5..8], the later two run with the
    # frame before them (5 frames)
    seen = [(window.index_list, shape[2]) for shape, window in VIDEO_MODEL.model.calls if window is not None]
    assert seen[:3] == [([0, 1, 2, 3], 4), ([3, 4, 5, 6], 5), ([5, 6, 7, 8], 5)]


def test_euler_with_windows_on_a_5d_latent_equals_euler_without():
    """The library's sampler API: `sample_euler` over CFG's `sampling_function`, whose cond
    batching runs the handler; conds carry a per-frame concat latent that each window must get
    its own frames of."""
    torch.manual_seed(0)
    dm = FrameDenoiser()
    sigmas = torch.tensor([8.0, 3.0, 1.0, 0.3, 0.0])
    concat = torch.randn(1, 4, 11, 2, 2)
    pos = [{"model_conds": {"c_crossattn": torch.full((1, 7, 8), 0.4), "c_concat": concat}}]
    neg = [{"model_conds": {"c_crossattn": torch.full((1, 7, 8), -0.2), "c_concat": concat}}]
    x0 = torch.randn(1, 4, 11, 2, 2) * sigmas[0]

    def run(model_options):
        def denoise(x, sigma, **_):
            return cfg.sampling_function(dm, x, sigma, neg, pos, 3.0, model_options)

        return sample_euler(denoise, x0.clone(), sigmas)

    plain = run({"transformer_options": {"sample_sigmas": sigmas}})
    (patched,) = cw.wan_context_windows_manual(MODEL, 17, 5, "standard_uniform", 1, False, "relative")
    dm.calls.clear()
    windowed = run({**patched.model_options, "transformer_options": {"sample_sigmas": sigmas}})
    # 17 frames -> 5 latent frames, 6 with the causal fix frame of a window not at frame 0
    assert dm.calls and all(shape[2] == (5 if window.index_list[0] == 0 else 6) for shape, window in dm.calls)
    torch.testing.assert_close(windowed, plain, atol=1e-5, rtol=1e-5)


def test_a_tiny_wan_i2v_samples_in_windows_with_its_concat_conditioning_cut_per_window(tmp_path):
    """The real Wan DiT (a tiny random Wan 2.1 i2v file through the diffusion-model loader):
    WanImageToVideo's keys (`concat_latent_image`, `concat_mask`, a CLIP-vision output) become
    the model's 5-D concat input, which each window gets its frames of; windows as long as the
    video change nothing, shorter ones change the result (attention sees fewer frames)."""
    from comfy_core.wrappers import add_callback_with_key
    from comfy_core.sampling.context_windows import IndexListCallbacks
    from comfy_core.split.diffusion_model import load_diffusion_model
    from nodes.sampling import ksampler
    from tests.fixtures.wan_files import write_tiny_wan

    model = load_diffusion_model(write_tiny_wan(tmp_path / "i2v.safetensors", "i2v"))
    g = torch.Generator().manual_seed(5)

    class ClipVisionOutput:
        penultimate_hidden_states = torch.randn(1, 257, 48, generator=g)

    mask = torch.ones(1, 1, 5, 4, 6)
    mask[:, :, 0] = 0.0
    keys = {"concat_latent_image": torch.randn(1, 16, 5, 4, 6, generator=g), "concat_mask": mask,
            "clip_vision_output": ClipVisionOutput()}
    positive = [[torch.randn(1, 8, 32, generator=g), dict(keys)]]
    negative = [[torch.zeros(1, 8, 32), dict(keys)]]
    latent = {"samples": torch.zeros(1, 16, 5, 4, 6)}  # 17 video frames

    def sample(m):
        return ksampler(m, 2, 2, 4.0, "euler", "simple", positive, negative, latent)[0]["samples"]

    plain = sample(model)
    (whole,) = cw.wan_context_windows_manual(model, 17, 5, "standard_static", 1, False, "pyramid")
    torch.testing.assert_close(sample(whole), plain)  # 5 latent frames fit in one window
    (windowed,) = cw.wan_context_windows_manual(model, 9, 5, "standard_static", 1, False, "pyramid")
    concat_frames = []
    add_callback_with_key(IndexListCallbacks.COMBINE_CONTEXT_WINDOW_RESULTS, "t",
                          lambda h, x, out, sub_conds, window, *rest: concat_frames.append(
                              (window.index_list, tuple(sub_conds[0][0]["model_conds"]["c_concat"].shape))),
                          windowed.model_options["context_handler"].callbacks)
    out = sample(windowed)
    assert out.shape == plain.shape and torch.isfinite(out).all()
    assert (out - plain).abs().max() > 1e-3
    # 9 frames -> 3 latent frames, overlap 5 -> 1: windows [0, 1, 2], [2, 3, 4] every step, with a
    # [1, 20, 3, h, w] concat (4 mask channels + 16 image latent channels), 4 frames with the causal fix frame
    assert concat_frames == [([0, 1, 2], (1, 20, 3, 4, 6)), ([2, 3, 4], (1, 20, 4, 4, 6))] * 2

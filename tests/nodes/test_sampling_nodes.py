"""KSampler / KSamplerAdvanced nodes: ComfyUI's sockets, seeded noise, progress + previews per step,
interrupt mid-sampling with patches restored, and a real run on a tiny SD1 checkpoint."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from comfy_core.patching import ModelPatcher
from comfy_core.models.model_sampling import ModelSampling
from comfy_core.sampling.samplers.registry import SAMPLER_NAMES
from comfy_core.sampling.schedulers import SCHEDULER_NAMES
from graph.context import Interrupted, NodeContext, reset_current, set_current
from graph.native import spec_of
from nodes.errors import NodeInputError
from nodes.sampling import ksampler, ksampler_advanced

S = 0.5
RGB = [[0.3512, 0.2297, 0.3227], [0.3250, 0.4974, 0.2350], [-0.2829, 0.1762, 0.2721], [-0.2120, -0.2616, -0.7177]]


class FakeDiffusionModel(nn.Module):
    """DiffusionModel contract; an ideal Gaussian denoiser with data mean = context mean + offset."""

    def __init__(self) -> None:
        super().__init__()
        self.offset = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.model_sampling = ModelSampling()
        self.latent_format = SimpleNamespace(channels=4, scale_factor=0.18215, latent_rgb_factors=RGB)
        self.offsets_seen: list[float] = []

    def apply_model(self, x, sigma, c_crossattn, y=None, transformer_options=None):
        self.offsets_seen.append(float(self.offset))
        mu = (c_crossattn.mean(dim=(1, 2)) + self.offset).view(-1, 1, 1, 1)
        sg = sigma.view(-1, 1, 1, 1)
        return (S * S * x + sg * sg * mu) / (S * S + sg * sg)

    def encode_adm(self, **_):
        return None


def cond(v: float) -> list:
    return [[torch.full((1, 77, 8), v), {}]]


def latent(b: int = 1, **extra) -> dict:
    return {"samples": torch.zeros(b, 4, 8, 8), **extra}


class Recorder:
    def __init__(self, interrupt_after: int | None = None) -> None:
        self.events: list[tuple] = []
        self.interrupt_after = interrupt_after

    def context(self, preview_method: str = "latent2rgb") -> NodeContext:
        return NodeContext("p1", "3", "3", None, SimpleNamespace(preview_method=preview_method),
                           report=lambda v, m, p: self.events.append((v, m, p)),
                           is_interrupted=lambda: self.interrupt_after is not None and len(self.events) >= self.interrupt_after)


def run_in_context(ctx: NodeContext, fn, *args, **kwargs):
    token = set_current(ctx)
    try:
        return fn(*args, **kwargs)
    finally:
        reset_current(token)


def test_ksampler_sockets_are_comfyuis() -> None:
    spec = spec_of(ksampler)
    assert spec.node_id == "KSampler" and spec.category == "sampling"
    names = [i.name for i in spec.inputs]
    assert names == ["model", "seed", "steps", "cfg", "sampler_name", "scheduler", "positive", "negative",
                     "latent_image", "denoise"]
    by = {i.name: i for i in spec.inputs}
    # live combos (packs may add names): callables evaluated when rendered or validated
    assert by["sampler_name"].type(None) == list(SAMPLER_NAMES) and by["scheduler"].type(None) == list(SCHEDULER_NAMES)
    assert by["seed"].options["max"] == 0xFFFFFFFFFFFFFFFF and by["seed"].options["control_after_generate"]
    assert by["steps"].options == {**by["steps"].options, "default": 20, "min": 1, "max": 10000}
    assert by["cfg"].options["default"] == 8.0 and by["cfg"].options["round"] == 0.01
    assert by["denoise"].options["default"] == 1.0
    assert [o.type for o in spec.outputs] == ["LATENT"]


def test_ksampler_advanced_sockets_are_comfyuis() -> None:
    spec = spec_of(ksampler_advanced)
    assert spec.node_id == "KSamplerAdvanced" and spec.display_name == "KSampler (Advanced)"
    assert [i.name for i in spec.inputs] == ["model", "add_noise", "noise_seed", "steps", "cfg", "sampler_name",
                                             "scheduler", "positive", "negative", "latent_image", "start_at_step",
                                             "end_at_step", "return_with_leftover_noise"]
    by = {i.name: i for i in spec.inputs}
    assert list(by["add_noise"].type) == ["enable", "disable"]
    assert list(by["return_with_leftover_noise"].type) == ["disable", "enable"]
    assert by["end_at_step"].options["default"] == 10000


def test_one_progress_event_per_step_with_jpeg_previews() -> None:
    rec = Recorder()
    model = ModelPatcher(FakeDiffusionModel())
    (out,) = run_in_context(rec.context(), ksampler, model, 5, 6, 7.0, "euler", "karras", cond(0.3), cond(0.0), latent(), 1.0)
    assert [(v, m) for v, m, _ in rec.events] == [(i, 6) for i in range(1, 7)]
    fmt, img, size = rec.events[0][2]
    assert fmt == "JPEG" and size == 512 and img.size == (8, 8)
    assert out["samples"].shape == (1, 4, 8, 8)


def test_preview_method_none_sends_progress_without_previews() -> None:
    rec = Recorder()
    run_in_context(rec.context("none"), ksampler, ModelPatcher(FakeDiffusionModel()), 5, 3, 7.0, "euler", "karras",
                   cond(0.3), cond(0.0), latent(), 1.0)
    assert [p for _, _, p in rec.events] == [None, None, None]


def test_interrupt_stops_within_one_step_and_restores_patches() -> None:
    base = FakeDiffusionModel()
    model = ModelPatcher(base).clone()
    model.add_patches({"offset": torch.tensor(0.75)})
    rec = Recorder(interrupt_after=2)
    with pytest.raises(Interrupted):
        run_in_context(rec.context(), ksampler, model, 1, 20, 7.0, "euler", "karras", cond(0.3), cond(0.0), latent(), 1.0)
    assert len(rec.events) == 2 and len(base.offsets_seen) == 3  # stopped at the third step's report
    assert set(base.offsets_seen) == {0.75} and float(base.offset) == 0.0


def test_seed_noise_and_batch_index() -> None:
    model = ModelPatcher(FakeDiffusionModel())
    a = ksampler(model, 42, 4, 3.0, "euler", "karras", cond(0.3), cond(0.0), latent(), 1.0)[0]["samples"]
    b = ksampler(model, 42, 4, 3.0, "euler", "karras", cond(0.3), cond(0.0), latent(), 1.0)[0]["samples"]
    c = ksampler(model, 43, 4, 3.0, "euler", "karras", cond(0.3), cond(0.0), latent(), 1.0)[0]["samples"]
    assert torch.equal(a, b) and not torch.equal(a, c)
    batch = ksampler(model, 42, 4, 3.0, "euler", "karras", cond(0.3), cond(0.0), latent(3), 1.0)[0]["samples"]
    torch.testing.assert_close(batch[:1], a)  # item 0 of a batch is the batch-1 image
    picked = ksampler(model, 42, 4, 3.0, "euler", "karras", cond(0.3), cond(0.0), latent(1, batch_index=[2]), 1.0)[0]
    torch.testing.assert_close(picked["samples"], batch[2:3])
    assert picked["batch_index"] == [2]  # other latent keys pass through


def test_ksampler_matches_the_noise_comfyui_would_draw() -> None:
    # euler on the ideal denoiser from sigma_max: the result is a known function of the noise
    model = ModelPatcher(FakeDiffusionModel())
    out = ksampler(model, 7, 60, 1.0, "heun", "karras", cond(0.3), cond(0.0), latent(), 1.0)[0]["samples"]
    torch.manual_seed(7)
    noise = torch.randn(1, 4, 8, 8)
    smax = float(ModelSampling().sigma_max)
    x_t = noise * (1 + smax * smax) ** 0.5
    x0 = 0.3 + (x_t - 0.3) * S / (S * S + smax * smax) ** 0.5
    torch.testing.assert_close(out, x0 / 0.18215, rtol=0, atol=0.2)


def test_advanced_split_equals_full_run_and_add_noise_disable() -> None:
    model = ModelPatcher(FakeDiffusionModel())
    full = ksampler(model, 9, 10, 4.0, "euler", "normal", cond(0.3), cond(0.0), latent(), 1.0)[0]
    first = ksampler_advanced(model, "enable", 9, 10, 4.0, "euler", "normal", cond(0.3), cond(0.0), latent(),
                              0, 6, "enable")[0]
    second = ksampler_advanced(model, "disable", 9, 10, 4.0, "euler", "normal", cond(0.3), cond(0.0), first,
                               6, 10000, "disable")[0]
    torch.testing.assert_close(second["samples"], full["samples"], rtol=1e-4, atol=1e-4)
    # without leftover noise the first half is fully denoised: differs from the noisy intermediate
    denoised = ksampler_advanced(model, "enable", 9, 10, 4.0, "euler", "normal", cond(0.3), cond(0.0), latent(),
                                 0, 6, "disable")[0]
    assert float((denoised["samples"] - first["samples"]).abs().max()) > 1.0


def test_bad_latent_raises_a_node_error(in_node) -> None:
    model = ModelPatcher(FakeDiffusionModel())
    with in_node("KSampler", "3"), pytest.raises(NodeInputError,
                                                 match=r"^KSampler \(node 3\): input 'latent_image' expected a LATENT"):
        ksampler(model, 0, 2, 1.0, "euler", "karras", cond(0.0), cond(0.0), {"no": 1}, 1.0)
    with pytest.raises(NodeInputError, match=r"input 'latent_image' expected LATENT samples .*shape"):
        ksampler_advanced(model, "enable", 0, 2, 1.0, "euler", "karras", cond(0.0), cond(0.0),
                          {"samples": torch.zeros(4, 8, 8)}, 0, 2, "disable")


def test_ksampler_on_a_tiny_sd1_checkpoint(tiny_sd1_ckpt) -> None:
    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    model, clip, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    positive = clip_text_encode("a red cube", clip)[0]
    negative = clip_text_encode("", clip)[0]
    rec = Recorder()
    out = run_in_context(rec.context(), ksampler, model, 0, 2, 7.0, "dpmpp_2m", "karras", positive, negative,
                         {"samples": torch.zeros(1, 4, 8, 8)}, 1.0)[0]["samples"]
    assert out.shape == (1, 4, 8, 8) and bool(torch.isfinite(out).all())
    assert [(v, m) for v, m, _ in rec.events] == [(1, 2), (2, 2)]
    assert rec.events[0][2][0] == "JPEG"


# -- through the executor ----------------------------------------------------------------------

def _graph_registry(model: ModelPatcher):
    from graph.native import Input, Output as Out, node as declare
    from graph.registry import Registry
    from nodes import register_builtin_nodes

    @declare("TestSamplingModel", outputs=[Out("MODEL")])
    def test_model():
        return (model,)

    @declare("TestSamplingCond", inputs=[], outputs=[Out("CONDITIONING")])
    def test_cond():
        return (cond(0.3),)

    @declare("TestSamplingSink", inputs=[Input("samples", "LATENT")], output_node=True)
    def test_sink(samples):
        return {"ui": {"shape": list(samples["samples"].shape)}}

    registry = Registry()
    register_builtin_nodes(registry)
    for fn in (test_model, test_cond, test_sink):
        registry.add_native(fn, builtin=False)
    return registry


PROMPT = {
    "1": {"class_type": "TestSamplingModel", "inputs": {}},
    "2": {"class_type": "TestSamplingCond", "inputs": {}},
    "3": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    "4": {"class_type": "KSampler", "inputs": {"model": ["1", 0], "seed": 1, "steps": 6, "cfg": 7.0,
                                               "sampler_name": "euler", "scheduler": "karras",
                                               "positive": ["2", 0], "negative": ["2", 0],
                                               "latent_image": ["3", 0], "denoise": 1.0}},
    "5": {"class_type": "TestSamplingSink", "inputs": {"samples": ["4", 0]}},
}


async def test_executor_progress_previews_and_interrupt() -> None:
    from graph.executor import Executor
    from graph.validation import validate_prompt

    base = FakeDiffusionModel()
    model = ModelPatcher(base).clone()
    model.add_patches({"offset": torch.tensor(0.5)})
    registry = _graph_registry(model)
    env = SimpleNamespace(preview_method="latent2rgb")
    check = await validate_prompt(PROMPT, registry)
    assert check.ok, check.node_errors

    events = []
    outcome = await Executor(registry, env=env).execute(PROMPT, "p1", outputs=check.outputs, sink=events.append)
    assert outcome.status == "success"
    progress = [e.data for e in events if e.type == "progress" and e.data.get("node") == "4"]
    assert [(p["value"], p["max"]) for p in progress] == [(i, 6) for i in range(1, 7)]
    assert sum(1 for e in events if e.type == "preview") == 6

    class InterruptAfterTwoModelCalls:
        """The interrupt request arrives while the second step runs (as POST /interrupt would)."""

        def is_set(self) -> bool:
            return len(base.offsets_seen) >= 2

    base.offsets_seen.clear()
    prompt = {**PROMPT, "4": {**PROMPT["4"], "inputs": {**PROMPT["4"]["inputs"], "seed": 2}}}
    outcome = await Executor(registry, env=env).execute(prompt, "p2", outputs=check.outputs, sink=lambda e: None,
                                                        interrupt=InterruptAfterTwoModelCalls())
    assert outcome.status == "interrupted"
    assert any(t == "execution_interrupted" for t, _ in outcome.messages)
    assert len(base.offsets_seen) == 2  # stopped at the end of the step that saw the request
    assert float(base.offset) == 0.0  # patches removed


async def test_readme_demo_workflow_runs_from_the_command_line(tmp_path, tiny_sd1_ckpt) -> None:
    """CheckpointLoaderSimple -> CLIPTextEncode x2 -> KSampler <- EmptyLatentImage -> VAEDecode -> SaveImage,
    headless (`python main.py run`), on a generated tiny checkpoint."""
    import io
    import json
    import shutil

    from web.config import ServerConfig
    from web.headless import run_workflow

    (tmp_path / "models" / "checkpoints").mkdir(parents=True)
    shutil.copy(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")
    workflow = {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a red cube", "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "blurry", "clip": ["4", 1]}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "3": {"class_type": "KSampler", "inputs": {"model": ["4", 0], "seed": 5, "steps": 2, "cfg": 8.0,
                                                   "sampler_name": "euler", "scheduler": "normal",
                                                   "positive": ["6", 0], "negative": ["7", 0],
                                                   "latent_image": ["5", 0], "denoise": 1.0}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "demo", "images": ["8", 0]}},
    }
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(workflow))
    out, err = io.StringIO(), io.StringIO()
    code = await run_workflow(ServerConfig(base_dir=tmp_path, output_dir=tmp_path / "out"), path, out=out, err=err)
    assert code == 0, err.getvalue()
    saved = list((tmp_path / "out").glob("demo_*.png"))
    assert len(saved) == 1 and "KSampler (node 3)" in err.getvalue()


def test_ksampler_on_a_tiny_sdxl_checkpoint_feeds_the_label_embedding(tiny_sdxl_ckpt) -> None:
    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    model, clip, _ = load_checkpoint(tiny_sdxl_ckpt, output_vae=False)
    positive = clip_text_encode("a red cube", clip)[0]
    negative = clip_text_encode("", clip)[0]
    seen = []

    def wrapper(apply_model, args):
        seen.append(tuple(args["c"]["y"].shape))
        return apply_model(args["input"], args["timestep"], **args["c"])

    patched = model.clone()
    patched.set_option("model_function_wrapper", wrapper)
    out = ksampler(patched, 0, 1, 5.0, "euler", "normal", positive, negative,
                   {"samples": torch.zeros(1, 4, 8, 8)}, 1.0)[0]["samples"]
    assert out.shape == (1, 4, 8, 8) and bool(torch.isfinite(out).all())
    assert seen == [(2, 64 + 6 * 256)]  # pooled text + 6 size embeddings, cond and uncond in one batch
    assert "model_function_wrapper" not in model.model_options  # the clone's option did not leak

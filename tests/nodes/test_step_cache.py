"""EasyCache and LazyCache nodes on the tiny SD1 checkpoint: a clone carries the cache (the input
MODEL is unchanged), sampling with it evaluates the network fewer times, a threshold of 0 or a
window that starts past its end gives the uncached result exactly, and no state is carried from
one run (or prompt) to the next. The maths itself: tests/comfy_core/model_patches/test_patch_step_cache.py."""
from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from comfy_core.model_patches import step_cache as sc
from comfy_core.wrappers import WrappersMP
from graph.executor import Executor
from graph.native import Input, node
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.step_cache import easy_cache, lazy_cache
from tests.nodes.model_patch_helpers import sample, snapshot

STEPS = 8
NODES = {"EasyCache": easy_cache, "LazyCache": lazy_cache}


@pytest.fixture(scope="module")
def sd1(sd1_with_prompts):
    return sd1_with_prompts


def counted(model):
    """A clone whose network calls are counted (the innermost `diffusion_model` wrapper, so a
    step a cache answers is not counted)."""
    calls = [0]

    def count(executor, *args, **kwargs):
        calls[0] += 1
        return executor(*args, **kwargs)

    clone = model.clone()
    clone.add_wrapper_with_key(WrappersMP.DIFFUSION_MODEL, "test_count", count)
    return clone, calls


@pytest.fixture(scope="module")
def plain(sd1):
    model, calls = counted(sd1.model)
    return sample(model, sd1, steps=STEPS), calls[0]


def test_node_module_imports_without_torch():
    code = "import sys, nodes.step_cache; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(Path(__file__).parents[2]))


@pytest.mark.parametrize("name", NODES)
def test_the_cache_is_on_a_clone_and_the_input_is_unchanged(sd1, name):
    before = snapshot(sd1.model)
    wrappers_before = {k: {kk: list(v) for kk, v in d.items()} for k, d in sd1.model.wrappers.items()}
    (patched,) = NODES[name](sd1.model, 0.2, 0.15, 0.95, False)
    assert patched is not sd1.model
    assert snapshot(sd1.model) == before and sd1.model.wrappers == wrappers_before
    holder = patched.model_options["transformer_options"][sc.HOLDER_KEY]
    assert holder.name == name
    assert (holder.reuse_threshold, holder.start_percent, holder.end_percent) == (0.2, 0.15, 0.95)
    assert holder.output_channels == 4  # SD1's latent channels
    kinds = {WrappersMP.OUTER_SAMPLE, WrappersMP.CALC_COND_BATCH, WrappersMP.DIFFUSION_MODEL} if name == "EasyCache" \
        else {WrappersMP.OUTER_SAMPLE, WrappersMP.PREDICT_NOISE}
    assert {k for k, by_key in patched.wrappers.items() if by_key} == kinds


@pytest.mark.parametrize("name", NODES)
def test_equal_settings_give_equal_cache_signatures(sd1, name):
    """The executor keys cached MODELs on this: a rerun with the same settings is the same MODEL."""
    fn = NODES[name]
    first, again = fn(sd1.model, 0.2, 0.15, 0.95, False)[0], fn(sd1.model, 0.2, 0.15, 0.95, False)[0]
    assert first.cache_signature() is not None and first.cache_signature() == again.cache_signature()
    assert fn(sd1.model, 0.3, 0.15, 0.95, False)[0].cache_signature() != first.cache_signature()
    other = next(f for n, f in NODES.items() if n != name)
    assert other(sd1.model, 0.2, 0.15, 0.95, False)[0].cache_signature() != first.cache_signature()


@pytest.mark.parametrize("name", NODES)
def test_sampling_with_the_cache_calls_the_network_fewer_times(sd1, plain, name, caplog):
    expected, plain_calls = plain
    assert plain_calls == STEPS  # cond and uncond batched: one network call per step
    model, calls = counted(NODES[name](sd1.model, 0.2, 0.15, 0.95, False)[0])
    with caplog.at_level(logging.INFO, logger=sc.__name__):
        out = sample(model, sd1, steps=STEPS)
    assert 0 < calls[0] < STEPS
    assert out.shape == expected.shape and torch.isfinite(out).all() and not torch.equal(out, expected)
    skipped = STEPS - calls[0]
    assert f"{name} enabled - threshold: 0.2, start_percent: 0.15, end_percent: 0.95" in caplog.text
    assert f"{name} - skipped {skipped}/{STEPS} steps ({STEPS / calls[0]:.2f}x speedup)." in caplog.text


@pytest.mark.parametrize("name", NODES)
@pytest.mark.parametrize("settings", [(0.0, 0.0, 1.0), (3.0, 0.9, 0.1)], ids=["threshold 0", "start past end"])
def test_no_reuse_gives_the_uncached_result_exactly(sd1, plain, name, settings):
    expected, plain_calls = plain
    model, calls = counted(NODES[name](sd1.model, *settings, False)[0])
    assert torch.equal(sample(model, sd1, steps=STEPS), expected)
    assert calls[0] == plain_calls


@pytest.mark.parametrize("name", NODES)
def test_no_state_is_kept_between_runs(sd1, name, caplog):
    (patched,) = NODES[name](sd1.model, 0.5, 0.0, 1.0, True)
    template = patched.model_options["transformer_options"][sc.HOLDER_KEY]
    model, calls = counted(patched)
    with caplog.at_level(logging.INFO, logger=sc.__name__):
        first = sample(model, sd1, steps=STEPS)
    first_calls = calls[0]
    assert f"{name} [verbose] - output_change_rates" in caplog.text  # verbose: the measured rates
    # the template the MODEL carries measured nothing: each run had its own clone
    assert template.x_prev_subsampled is None and template.total_steps_skipped == 0
    assert template.output_change_rates == [] and getattr(template, "uuid_cache_diffs", {}) == {}
    # another prompt with the same MODEL, then the first again: the same result, the same calls
    other = sample(model, sd1, steps=STEPS, positive=sd1.negative)
    calls[0] = 0
    assert torch.equal(sample(model, sd1, steps=STEPS), first) and calls[0] == first_calls
    fresh, _ = counted(NODES[name](sd1.model, 0.5, 0.0, 1.0, True)[0])
    assert torch.equal(sample(fresh, sd1, steps=STEPS, positive=sd1.negative), other)


@pytest.mark.parametrize("name", NODES)
def test_a_latent_batch_is_cached_as_a_whole(sd1, name):
    """Two latents (cond and uncond of each in one network call): fewer calls with the cache, and
    exactly the uncached batch with threshold 0."""
    latent = {"samples": torch.zeros(2, 4, 8, 8)}  # 8 px: the batch is what matters, not the size
    base, base_calls = counted(sd1.model)
    expected = sample(base, sd1, steps=STEPS, latent=latent)
    model, calls = counted(NODES[name](sd1.model, 0.2, 0.15, 0.95, False)[0])
    out = sample(model, sd1, steps=STEPS, latent=latent)
    assert out.shape == expected.shape == (2, 4, 8, 8) and torch.isfinite(out).all()
    assert 0 < calls[0] < base_calls[0]
    exact, _ = counted(NODES[name](sd1.model, 0.0, 0.15, 0.95, False)[0])
    assert torch.equal(sample(exact, sd1, steps=STEPS, latent=latent), expected)


@pytest.mark.parametrize("name", NODES)
def test_bad_input_is_a_node_error(sd1, name):
    fn = NODES[name]
    with pytest.raises(NodeInputError, match="reuse_threshold"):
        fn(sd1.model, 3.5, 0.15, 0.95, False)
    with pytest.raises(NodeInputError, match="start_percent"):
        fn(sd1.model, 0.2, float("nan"), 0.95, False)
    with pytest.raises(NodeInputError, match="end_percent"):
        fn(sd1.model, 0.2, 0.15, "0.95", False)
    with pytest.raises(NodeInputError, match="verbose"):
        fn(sd1.model, 0.2, 0.15, 0.95, "yes")
    with pytest.raises(NodeInputError, match="model"):
        fn("not a model", 0.2, 0.15, 0.95, False)
    (cached,) = fn(sd1.model, 0.2, 0.15, 0.95, False)
    for other in NODES.values():  # one step cache per model: they share the holder key
        with pytest.raises(NodeInputError, match="already carries"):
            other(cached, 0.2, 0.15, 0.95, False)


CAPTURED: dict[int, torch.Tensor] = {}


@node("TestCaptureStepCacheLatent", inputs=[Input("samples", "LATENT"), Input("tag", "INT")], output_node=True)
def capture_latent(samples, tag):
    CAPTURED[tag] = samples["samples"]
    return {"ui": {"tag": [tag]}}


def _workflow(tag: int, text: str, cache: str) -> dict:
    return {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
        "10": {"class_type": cache, "inputs": {"model": ["4", 0], "reuse_threshold": 0.5, "start_percent": 0.0,
                                               "end_percent": 1.0, "verbose": False}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": text, "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "3": {"class_type": "KSampler", "inputs": {"model": ["10", 0], "seed": 1, "steps": 6, "cfg": 5.0,
                                                   "sampler_name": "euler", "scheduler": "normal",
                                                   "positive": ["6", 0], "negative": ["7", 0],
                                                   "latent_image": ["5", 0], "denoise": 1.0}},
        "9": {"class_type": "TestCaptureStepCacheLatent", "inputs": {"samples": ["3", 0], "tag": tag}},
    }


@pytest.mark.parametrize("name", NODES)
async def test_prompts_sharing_the_cached_node_output_do_not_share_state(tmp_path, tiny_sd1_ckpt, name):
    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    (tmp_path / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(capture_latent)
    calls: Counter = Counter()
    executor = Executor(registry, env=env, before_node_call=[lambda n, _i, _g: calls.update([n])])

    async def run(tag: int, text: str) -> set:
        calls.clear()
        prompt = _workflow(tag, text, name)
        checked = await validate_prompt(prompt, registry, env=env)
        assert checked.ok, checked.node_errors
        out = await executor.execute(prompt, f"p{tag}", outputs=checked.outputs)
        assert out.status == "success", out.error
        return set(calls)

    assert "10" in await run(1, "a lighthouse")
    assert "10" not in await run(2, "a red cube")  # the cache node's MODEL is reused from the cache
    assert "10" not in await run(3, "a lighthouse")
    assert not torch.equal(CAPTURED[2], CAPTURED[1])
    assert torch.equal(CAPTURED[3], CAPTURED[1])


@pytest.mark.parametrize("name", NODES)
def test_a_flow_dit_model_is_cached_too(name):
    """The tiny Flux (a DiT, 16 latent channels, flow sigmas in 0..1 for the window), cfg 1 (only
    the positive conditioning runs): fewer network calls, and threshold 0 gives the uncached run."""
    from comfy_core.sampling.ksampler import sample as ksample
    from comfy_core.sampling.noise import prepare_noise
    from tests.fixtures.dit_loras import tiny_flux_model

    flux = tiny_flux_model(seed=3)
    g = torch.Generator().manual_seed(0)
    pooled = {"pooled_output": torch.randn(1, 24, generator=g), "guidance": 3.5}
    positive = [[torch.randn(1, 4, 32, generator=g), pooled]]
    latent = torch.zeros(1, 16, 8, 8)
    noise = prepare_noise(latent, 0)

    def run(model):
        model, calls = counted(model)
        return ksample(model, noise, 10, 1.0, "euler", "simple", positive, positive, latent), calls[0]

    expected, plain_calls = run(flux)
    assert NODES[name](flux, 0.2, 0.15, 0.95, False)[0].model_options["transformer_options"][
        sc.HOLDER_KEY].output_channels == 16
    out, calls = run(NODES[name](flux, 3.0, 0.15, 0.95, False)[0])
    assert calls < plain_calls == 10 and torch.isfinite(out).all()
    exact, exact_calls = run(NODES[name](flux, 0.0, 0.15, 0.95, False)[0])
    assert torch.equal(exact, expected) and exact_calls == plain_calls

"""The first-block cache (comfy_core/model_patches/first_block_cache.py) and its hook point
(`run_split_blocks`, comfy_core/wrappers.py): decisions on scripted block functions, then whole
KSampler runs of tiny Flux, Wan and Qwen-Image models (threshold 0 is bit-exact; a skipped step reuses the
residual: the last block runs fewer times than the first), and the ApplyFBCacheOnModel node."""
from __future__ import annotations

import pytest
import torch

from comfy_core.model_patches.first_block_cache import (FirstBlockCache, FirstBlockCacheError,
                                                        apply_first_block_cache, relative_l1)
from comfy_core.split.diffusion_model import load_diffusion_model
from comfy_core.wrappers import BLOCK_SPLIT, run_split_blocks
from nodes.errors import NodeInputError
from tests.fixtures.flux_files import write_tiny_flux
from tests.fixtures.qwen_image_files import TXT_WIDTH, write_qwen_image_unet
from tests.fixtures.wan_files import write_tiny_wan


# -- the hook on scripted blocks ------------------------------------------------------------------

class Blocks:
    """first: img + a (a scripted per call); rest: img * 2 + txt-free; counts the rest's runs."""

    def __init__(self) -> None:
        self.a = 1.0
        self.rest_runs = 0

    def first(self, s: dict) -> dict:
        return {"img": s["img"] + self.a}

    def rest(self, s: dict) -> dict:
        self.rest_runs += 1
        return {"img": s["img"] * 2}


def _call(hook, blocks: Blocks, img: torch.Tensor, sigma: float, uuids=("c",)) -> torch.Tensor:
    options = {BLOCK_SPLIT: hook, "sigmas": torch.tensor([sigma]), "uuids": list(uuids)}
    return run_split_blocks(options, blocks.first, blocks.rest, {"img": img})["img"]


def test_without_a_hook_it_is_first_then_rest():
    blocks = Blocks()
    out = run_split_blocks({}, blocks.first, blocks.rest, {"img": torch.ones(2)})["img"]
    assert torch.equal(out, torch.full((2,), 4.0)) and blocks.rest_runs == 1


def test_relative_l1():
    assert relative_l1(torch.tensor([2.0, -2.0]), torch.tensor([1.0, -2.0])) == 0.25
    assert relative_l1(torch.zeros(2), torch.zeros(2)) == float("inf")  # no change measured: never similar
    assert relative_l1(torch.zeros(2), torch.ones(2)) == float("inf")


def test_a_first_part_that_does_nothing_never_allows_reuse():
    hook, blocks = FirstBlockCache(10.0).clone_for_run(), Blocks()
    blocks.a = 0.0  # e.g. Chroma told to skip block 0: the first residual is all zeros
    for sigma in (0.9, 0.8, 0.7):
        _call(hook, blocks, torch.ones(2), sigma)
    assert blocks.rest_runs == 3 and hook.cached_calls == 0


def test_reuse_follows_the_first_residual_change_and_adds_the_cached_residual():
    hook, blocks = FirstBlockCache(0.1).clone_for_run(), Blocks()
    x = torch.ones(3)
    assert torch.equal(_call(hook, blocks, x, 0.9), torch.full((3,), 4.0))  # nothing cached: runs
    blocks.a = 1.05  # first residual changed by 5% < 10%: reuse (x + 1.05) + cached (4 - 2)
    out = _call(hook, blocks, x, 0.8)
    assert torch.allclose(out, torch.full((3,), 4.05)) and blocks.rest_runs == 1
    blocks.a = 1.2  # 20% from the last *full* step's residual (1.0): runs
    assert torch.allclose(_call(hook, blocks, x, 0.7), torch.full((3,), 4.4)) and blocks.rest_runs == 2
    assert (hook.full_calls, hook.cached_calls, hook.steps_skipped) == (2, 1, 1)


def test_the_steps_first_call_decides_and_other_calls_follow():
    hook, blocks = FirstBlockCache(0.5).clone_for_run(), Blocks()
    x = torch.ones(3)
    _call(hook, blocks, x, 0.9, ["c"])
    _call(hook, blocks, x, 0.9, ["u"])  # same sigma: the step's second call
    assert blocks.rest_runs == 2
    _call(hook, blocks, x, 0.8, ["c"])
    _call(hook, blocks, x, 0.8, ["u"])
    assert blocks.rest_runs == 2 and hook.cached_calls == 2 and hook.steps_skipped == 1
    blocks.a = 5.0  # the deciding call runs; the follower runs too though its own change is also large
    _call(hook, blocks, x, 0.7, ["c"])
    blocks.a = 1.0
    _call(hook, blocks, x, 0.7, ["u"])
    assert blocks.rest_runs == 4


def test_window_cap_and_a_rising_sigma():
    class Sampling:
        def percent_to_sigma(self, p: float) -> float:
            return 1.0 - p

    hook, blocks = FirstBlockCache(10.0, start=0.3, end=0.8, max_consecutive_cache_hits=1).clone_for_run(Sampling()), \
        Blocks()
    x = torch.ones(2)
    for sigma in (0.95, 0.9, 0.6, 0.5, 0.45, 0.4, 0.1):
        _call(hook, blocks, x, sigma)
    # 0.95, 0.9: outside [0.2, 0.7]; 0.6 reuses, 0.5 runs (cap 1), 0.45 reuses, 0.4 runs, 0.1 outside
    assert blocks.rest_runs == 5 and hook.steps_skipped == 2
    _call(hook, blocks, x, 0.6)  # sigma rose: a new pass, nothing cached
    assert blocks.rest_runs == 6 and hook.steps_skipped == 0


def test_a_template_runs_plainly_and_settings_are_checked():
    template, blocks = FirstBlockCache(10.0), Blocks()
    for sigma in (0.9, 0.8):
        _call(template, blocks, torch.ones(2), sigma)
    assert blocks.rest_runs == 2 and template.entries == {}
    for bad in (dict(residual_diff_threshold=-1.0), dict(residual_diff_threshold=float("nan")),
                dict(residual_diff_threshold=0.1, start=1.5), dict(residual_diff_threshold=0.1,
                                                                     max_consecutive_cache_hits=-2)):
        with pytest.raises(FirstBlockCacheError):
            FirstBlockCache(**bad)


# -- whole runs on tiny DiTs ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def flux(tmp_path_factory):
    path = write_tiny_flux(tmp_path_factory.mktemp("fbc") / "flux.safetensors", depth=2, depth_single=2)
    return load_diffusion_model(path)


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    return load_diffusion_model(write_tiny_wan(tmp_path_factory.mktemp("fbc") / "wan.safetensors", "t2v"))


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    return load_diffusion_model(write_qwen_image_unet(tmp_path_factory.mktemp("fbc"), seed=1))


def _qwen_run(model, steps: int = 4):
    from nodes.sampling import ksampler

    gen = torch.Generator().manual_seed(7)
    positive = [[torch.randn(1, 6, TXT_WIDTH, generator=gen), {}]]
    negative = [[torch.randn(1, 6, TXT_WIDTH, generator=gen), {}]]
    latent = {"samples": torch.zeros(1, 16, 8, 8)}
    return ksampler(model, 4, steps, 2.5, "euler", "simple", positive, negative, latent)[0]["samples"]


def _flux_run(model, steps: int = 6):
    from nodes.sampling import ksampler

    gen = torch.Generator().manual_seed(2)
    cond = [[torch.randn(1, 4, 32, generator=gen), {"pooled_output": torch.randn(1, 24, generator=gen),
                                                    "guidance": 3.5}]]
    latent = {"samples": torch.zeros(1, 16, 8, 8)}
    return ksampler(model, 1, steps, 1.0, "euler", "simple", cond, cond, latent)[0]["samples"]


def _wan_run(model, steps: int = 5):
    from nodes.sampling import ksampler

    gen = torch.Generator().manual_seed(5)
    positive = [[torch.randn(1, 8, 32, generator=gen), {}]]
    negative = [[torch.zeros(1, 8, 32), {}]]
    latent = {"samples": torch.zeros(1, 16, 2, 4, 6)}
    return ksampler(model, 3, steps, 5.0, "euler", "simple", positive, negative, latent)[0]["samples"]


def _counted(model, last_key: tuple) -> tuple:
    patched = model.clone()
    counts = {"first": 0, "last": 0}

    def counter(name: str):
        def replace(args, extra):
            counts[name] += 1
            return extra["original_block"](args)
        return replace

    options = patched.model_options.setdefault("transformer_options", {})
    replace = dict((options.get("patches_replace") or {}).get("dit") or {})
    replace[("double_block", 0)] = counter("first")
    replace[last_key] = counter("last")
    options["patches_replace"] = {**(options.get("patches_replace") or {}), "dit": replace}
    return patched, counts


FLUX_LAST = ("single_block", 1)
LAST_DOUBLE = ("double_block", 1)  # Wan's and Qwen-Image's tiny models have two blocks


def _family(name: str, flux, wan, qwen) -> tuple:
    """(model, run, last block key, steps)"""
    return {"flux": (flux, _flux_run, FLUX_LAST, 6), "wan": (wan, _wan_run, LAST_DOUBLE, 5),
            "qwen_image": (qwen, _qwen_run, LAST_DOUBLE, 4)}[name]


@pytest.mark.parametrize("family", ["flux", "wan", "qwen_image"])
def test_threshold_zero_is_the_uncached_output_bit_for_bit(family, flux, wan, qwen):
    model, run, last, _steps = _family(family, flux, wan, qwen)
    plain = run(model)
    counted, counts = _counted(apply_first_block_cache(model, 0.0), last)
    assert torch.equal(run(counted), plain)
    assert counts["first"] == counts["last"] > 0


@pytest.mark.parametrize("family", ["flux", "wan", "qwen_image"])
def test_skipped_steps_reuse_the_residual(family, flux, wan, qwen):
    model, run, last, steps = _family(family, flux, wan, qwen)
    plain = run(model)
    counted, counts = _counted(apply_first_block_cache(model, 1e6), last)
    cached = run(counted, steps)
    # one call per step (cond and uncond in one batch; Flux at cfg 1 runs the cond alone):
    # the first step runs every block, the others only the first block
    assert counts == {"first": steps, "last": 1}
    assert torch.isfinite(cached).all() and (cached - plain).abs().max() > 1e-4
    capped, counts = _counted(apply_first_block_cache(model, 1e6, max_consecutive_cache_hits=1), last)
    run(capped, steps)
    assert counts == {"first": steps, "last": (steps + 1) // 2}


def test_the_input_model_is_untouched_and_a_second_install_is_refused(flux):
    before = dict(flux.model_options.get("transformer_options") or {})
    patched = apply_first_block_cache(flux, 0.1)
    assert dict(flux.model_options.get("transformer_options") or {}) == before
    with pytest.raises(FirstBlockCacheError):
        apply_first_block_cache(patched, 0.2)


def test_node(flux):
    from nodes.first_block_cache import apply_fbcache_on_model

    assert apply_fbcache_on_model(flux, "diffusion_model", 0.0, 0.0, 1.0, -1)[0] is flux
    assert apply_fbcache_on_model(flux, "diffusion_model", 0.1, 0.0, 1.0, 0)[0] is flux
    patched = apply_fbcache_on_model(flux, "diffusion_model", 0.12, 0.1, 0.9, 3)[0]
    holder = patched.model_options["transformer_options"][BLOCK_SPLIT]
    assert (holder.residual_diff_threshold, holder.start, holder.end, holder.max_consecutive_cache_hits) == \
        (0.12, 0.1, 0.9, 3)
    with pytest.raises(NodeInputError):
        apply_fbcache_on_model(flux, "model", 0.1, 0.0, 1.0, -1)
    with pytest.raises(NodeInputError):
        apply_fbcache_on_model(patched, "diffusion_model", 0.1, 0.0, 1.0, -1)

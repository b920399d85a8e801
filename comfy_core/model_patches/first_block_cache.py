"""First-block cache for DiTs: run the first transformer block every step, and when its residual
changed little since the last full step, reuse the other blocks' residual instead of running them.

The method of ParaAttention's "First Block Cache" as WaveSpeed's ComfyUI pack runs it
(chengzeyi/Comfy-WaveSpeed, `ApplyFBCacheOnModel`: fbcache_nodes.py / first_block_cache.py, read
for behaviour; written here afresh). It is the TeaCache idea (Liu et al. 2024, "Timestep Embedding
Tells: It's Time to Cache for Video Diffusion Model", arXiv 2411.19108) measured on the first
block's output instead of the modulated input, so it needs no per-model polynomial.

At each network call the hook (comfy_core/wrappers.py `run_split_blocks`, called by the families'
block loops) gets the token streams before the first block and:

1. runs the first block; `r1 = img_after_first - img_before` (the first residual);
2. compares it with the first residual of the last *full* call for the same conditionings:
   `mean|r1_prev - r1| / mean|r1_prev|` (relative L1, over the whole call's batch);
3. under `residual_diff_threshold` (and inside the sigma window, and under the cap of consecutive
   reuses): the output is `streams_after_first + cached_rest_residual` for each stream the rest
   returns; else the rest of the blocks run and `rest_out - streams_after_first` is cached.

The first call of a step (a new sigma) decides for the whole step; the step's other calls (another
cond batch, a split batch) follow it when they have a cached residual of the same shape, else run.
The sigma rising starts a fresh state (a new pass of sampling), as the pack does.

State: the MODEL carries a *template* holder (settings only) under
`transformer_options[BLOCK_SPLIT]`; a template runs the blocks plainly. The `outer_sample`
wrapper gives each sampling run its own live clone (with the run's sigma window) and drops it
at the end, so nothing is kept between runs and the input MODEL is never touched (the node
installs on a clone). Threshold 0 never reuses, so it gives the uncached result bit for bit (the
blocks run in the same order on the same tensors).
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable, Hashable

import torch

from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.wrappers import BLOCK_SPLIT, WrappersMP, copy_nested_dicts

log = logging.getLogger(__name__)

WRAPPER_KEY = "fbcache"


class FirstBlockCacheError(ModelPatchError):
    """Settings the first-block cache cannot run with, or a model it cannot be installed on."""


def relative_l1(previous: torch.Tensor, current: torch.Tensor) -> float:
    """`mean|previous - current| / mean|previous|`; inf when `previous` is all zeros (a first
    "block" that did nothing, e.g. Chroma skipping block 0, measures no change and must never
    allow reuse)."""
    norm = float(previous.abs().mean())
    if norm == 0.0:
        return math.inf
    return float((previous - current).abs().mean()) / norm


class _Entry:
    """What one set of conditionings left at its last full call."""

    __slots__ = ("first_residual", "rest_residual")

    def __init__(self, first_residual: torch.Tensor, rest_residual: dict[str, torch.Tensor] | None) -> None:
        self.first_residual = first_residual
        self.rest_residual = rest_residual  # None: the rest changed a stream's shape, nothing to reuse

    def fits(self, first_residual: torch.Tensor, after: dict) -> bool:
        if self.rest_residual is None or self.first_residual.shape != first_residual.shape:
            return False
        return all(k in after and after[k].shape == r.shape for k, r in self.rest_residual.items())


class FirstBlockCache:
    """The hook of `run_split_blocks` with its settings and (for a live clone) its state.

    Counters for tests, benches and logs: `full_calls` (the rest of the blocks ran),
    `cached_calls` (a cached residual was used), `steps_skipped` (steps whose deciding call reused)."""

    name = "FBCache"

    def __init__(self, residual_diff_threshold: float, start: float = 0.0, end: float = 1.0,
                 max_consecutive_cache_hits: int = -1) -> None:
        _check(residual_diff_threshold, start, end, max_consecutive_cache_hits)
        self.residual_diff_threshold = float(residual_diff_threshold)
        self.start = float(start)
        self.end = float(end)
        self.max_consecutive_cache_hits = int(max_consecutive_cache_hits)
        self.live = False               # a template runs the blocks plainly
        self.start_sigma = math.inf     # the run's window (prepare); the whole run until then
        self.end_sigma = -math.inf
        self.reset()

    def clone_for_run(self, model_sampling: Any | None = None) -> "FirstBlockCache":
        """A live holder with these settings and no state; its window from `model_sampling`'s
        `percent_to_sigma` (none: every sigma is in the window)."""
        run = type(self)(self.residual_diff_threshold, self.start, self.end, self.max_consecutive_cache_hits)
        run.live = True
        if model_sampling is not None:
            run.start_sigma = float(model_sampling.percent_to_sigma(self.start))
            run.end_sigma = float(model_sampling.percent_to_sigma(self.end))
        return run

    def cache_signature(self) -> Hashable:
        """Settings only (comfy_core/patching/signature.py): a template carries no state."""
        return (self.name, self.residual_diff_threshold, self.start, self.end, self.max_consecutive_cache_hits)

    def reset(self) -> None:
        self.entries: dict[Hashable, _Entry] = {}
        self.last_sigma: float | None = None
        self.use_cache = False
        self.consecutive_cache_hits = 0
        self.full_calls = 0
        self.cached_calls = 0
        self.steps_skipped = 0

    def in_window(self, sigma: float | None) -> bool:
        return sigma is None or self.end_sigma <= sigma <= self.start_sigma

    def __call__(self, first: Callable[[dict], dict], rest: Callable[[dict], dict], streams: dict,
                 options: dict) -> dict:
        if not self.live:
            return rest(first(streams))
        sigmas = options.get("sigmas")
        sigma = float(sigmas.reshape(-1)[0]) if isinstance(sigmas, torch.Tensor) else (
            float(sigmas) if isinstance(sigmas, (int, float)) else None)
        if sigma is not None and self.last_sigma is not None and sigma > self.last_sigma:
            self.reset()  # sampling started over (a new pass): nothing cached applies
        new_step = sigma is None or sigma != self.last_sigma
        self.last_sigma = sigma
        key = tuple(options.get("uuids") or ())

        before = streams["img"]
        after = first(streams)
        first_residual = after["img"] - before
        entry = self.entries.get(key)
        fits = entry is not None and entry.fits(first_residual, after)
        if new_step:
            use = (fits and relative_l1(entry.first_residual, first_residual) < self.residual_diff_threshold
                   and self.in_window(sigma)
                   and (self.max_consecutive_cache_hits < 0
                        or self.consecutive_cache_hits < self.max_consecutive_cache_hits))
            self.use_cache = use
            self.consecutive_cache_hits = self.consecutive_cache_hits + 1 if use else 0
            self.steps_skipped += int(use)
        else:
            use = self.use_cache and fits
        if use:
            self.cached_calls += 1
            return {k: after[k] + r for k, r in entry.rest_residual.items()}
        out = rest(after)
        self.full_calls += 1
        residual = None
        if all(k in after and after[k].shape == v.shape for k, v in out.items()):
            residual = {k: v - after[k] for k, v in out.items()}
        self.entries[key] = _Entry(first_residual, residual)
        return out


def _check(threshold: Any, start: Any, end: Any, hits: Any) -> None:
    def real(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if not real(threshold) or threshold < 0:
        raise FirstBlockCacheError(f"first-block cache: residual_diff_threshold must be a finite number >= 0, "
                                   f"got {threshold!r}")
    for label, value in (("start", start), ("end", end)):
        if not real(value) or not 0.0 <= value <= 1.0:
            raise FirstBlockCacheError(f"first-block cache: {label} must be in 0..1, got {value!r}")
    if isinstance(hits, bool) or not isinstance(hits, int) or hits < -1:
        raise FirstBlockCacheError(f"first-block cache: max_consecutive_cache_hits must be an int >= -1, "
                                   f"got {hits!r}")


def fbcache_sample_wrapper(executor: Callable, *args: Any, **kwargs: Any) -> Any:
    """`outer_sample` wrapper: the run gets a live holder (a clone of the MODEL's template with
    the run's sigma window) in its own copy of the guider's model_options; logged and dropped at
    the end."""
    guider = executor.class_obj
    original = guider.model_options
    run_options = copy_nested_dicts(original)
    template = run_options.get("transformer_options", {}).get(BLOCK_SPLIT)
    if not isinstance(template, FirstBlockCache):
        raise FirstBlockCacheError(f"first-block cache: the run's transformer_options hold no FirstBlockCache "
                                   f"under {BLOCK_SPLIT!r} (found {type(template).__name__})")
    patcher = guider.model_patcher
    sampling = getattr(patcher, "model_sampling", None) or patcher.model.model_sampling
    holder = template.clone_for_run(sampling)
    run_options["transformer_options"][BLOCK_SPLIT] = holder
    guider.model_options = run_options
    try:
        return executor(*args, **kwargs)
    finally:
        if holder.full_calls + holder.cached_calls == 0:
            log.warning("%s - the network never reached the first-block hook (its block loop does not call "
                        "run_split_blocks, e.g. a UNet): nothing was cached", holder.name)
        else:
            log.info("%s - %d full calls, %d cached calls (%d steps reused the cache)", holder.name,
                     holder.full_calls, holder.cached_calls, holder.steps_skipped)
        holder.reset()
        guider.model_options = original


def apply_first_block_cache(model: Any, residual_diff_threshold: float, start: float = 0.0, end: float = 1.0,
                            max_consecutive_cache_hits: int = -1) -> Any:
    """A clone of the MODEL patcher `model` with the first-block cache (the input is unchanged).
    The network must run its blocks through `run_split_blocks` (Flux, Chroma, Flux.2, Wan)."""
    holder = FirstBlockCache(residual_diff_threshold, start, end, max_consecutive_cache_hits)
    present = (model.model_options.get("transformer_options") or {}).get(BLOCK_SPLIT)
    if present is not None:
        raise FirstBlockCacheError(f"first-block cache: the model already carries a first-block hook "
                                   f"({type(present).__name__}) under transformer_options[{BLOCK_SPLIT!r}]")
    patched = model.clone()
    patched.model_options.setdefault("transformer_options", {})[BLOCK_SPLIT] = holder
    patched.add_wrapper_with_key(WrappersMP.OUTER_SAMPLE, WRAPPER_KEY, fbcache_sample_wrapper)
    return patched

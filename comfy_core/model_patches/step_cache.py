"""Step caching: skip whole network evaluations whose result can be predicted from the last one.

EasyCache (Zhou et al. 2025, "Less is Enough: Training-Free Video Diffusion Acceleration via
Runtime-Adaptive Caching", arXiv 2507.02860) and LazyCache, the coarser variant, as today's
ComfyUI runs them (comfy_extras/nodes_easycache.py, read for behaviour; written here afresh).

The idea: over a stretch of steps the network acts on its input almost like a constant shift,
`output ~ input + diff`. After each real evaluation we keep `diff = output - input` and a
*transformation rate* `k = |output change| / |input change|` between the last two real
evaluations (mean absolute values, on a strided subsample of the latent). At the next step the
output change is estimated as `k * |input change| / |last output|`; these estimates add up, and
while the sum stays under `reuse_threshold` the step reuses `input + diff` instead of running the
network. When it would pass the threshold the network runs and the sum starts again from 0.
Caching is only considered for sigmas in `(sigma(end_percent), sigma(start_percent)]`.

Two placements, two nodes:

* **EasyCache** works on the diffusion network's own call (the `diffusion_model` wrapper point,
  comfy_core/models/diffusion.py): input is the scaled latent the network sees, output its raw
  prediction. The first conditioning seen in the cached window (by its uuid) decides for the whole
  step: its decision is kept until the next `calc_cond_batch` (a wrapper there clears it), so the
  other conditionings of the step, batched with it or not, reuse their own `diff` too. The rates
  and the norm are measured on the deciding conditioning's part of the batch.
* **LazyCache** works on the guided prediction (the `predict_noise` wrapper point,
  comfy_core/sampling/guider.py): one `diff` for the whole CFG result, tracked from the first
  step, whatever the conditioning. Cheaper to hook, coarser.

State lives in a holder object. The MODEL carries a *template* holder (settings only) under
`transformer_options["easycache"]` (ComfyUI's key, for both nodes); the `outer_sample` wrapper
gives each sampling run a fresh clone with the run's sigma window and drops it at the end, so
nothing is kept between runs or prompts and the input MODEL is never touched (the nodes install
on a clone). Packs read the holders' attributes by ComfyUI's names, so those names are kept.

Differences from ComfyUI, on purpose: a holder reset mid-run (the latent's shape, dtype or device
changed) starts with no transformation rate (ComfyUI's sets it to 0, which makes the step after
the reset a forced reuse); a skipped EasyCache step builds its result out of place (ComfyUI adds
the cached diff into the network's input tensor); a model carrying one of the two caches refuses
the other (they share the holder key: ComfyUI fails at the first step). ComfyUI's list-valued
network input (LTX-2's audio-video pair) is not handled: no model of ours produces one.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable, Hashable

import torch

from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.wrappers import WrappersMP, copy_nested_dicts

log = logging.getLogger(__name__)

HOLDER_KEY = "easycache"          # transformer_options key of both holders (ComfyUI's)
EASYCACHE_KEY = "easycache"       # wrapper keys on the patcher (ComfyUI's)
LAZYCACHE_KEY = "lazycache"
SUBSAMPLE_FACTOR = 8              # the nodes' stride for the change measurements (ComfyUI's)


class StepCacheError(ModelPatchError):
    """Settings a step cache cannot run with, or a model it cannot be installed on."""


# -- pure maths ------------------------------------------------------------------------------------

def subsample(x: torch.Tensor, factor: int) -> torch.Tensor:
    """Every `factor`-th element of the last two dims (a view): `[..., h, w] -> [..., h/f, w/f]`."""
    return x[..., ::factor, ::factor] if factor > 1 else x


def mean_abs(x: torch.Tensor) -> torch.Tensor:
    """Mean absolute value, a 0-dim tensor (the paper's L1 norm, divided by the element count)."""
    return x.abs().mean()


def tail_slices(big: torch.Size, small: torch.Size) -> tuple[slice, ...]:
    """Slices of every dim after the batch that pick the last `small[d]` entries of `big[d]`
    (ComfyUI's rule when a network returns fewer frames than it was given: the leading ones are
    conditioning frames, e.g. Cosmos' video-to-world)."""
    return tuple(slice(b - s, None) if b != s else slice(None) for b, s in zip(big[1:], small[1:]))


def add_into_tail(x: torch.Tensor, diff: torch.Tensor) -> torch.Tensor:
    """`x + diff` where their shapes agree; else `x` with `diff` added to its last entries."""
    if x.shape[1:] == diff.shape[1:]:
        return x + diff
    out = x.clone()
    index = (slice(None),) + tail_slices(x.shape, diff.shape)
    out[index] += diff
    return out


def input_aligned(x: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """`x` cut to `output`'s shape (its last entries) when the network changed the shape."""
    if x.shape[1:] == output.shape[1:]:
        return x
    return x[(slice(None),) + tail_slices(x.shape, output.shape)]


def batch_chunks(x: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """`x [parts * b, ...]` as `parts` views `[b, ...]`, one per conditioning of a cond batch."""
    size = x.shape[0] // parts
    return [x[i * size:(i + 1) * size] for i in range(parts)]


def _first(t: Any) -> torch.Tensor:
    """The step's sigma: the first entry of a sigma batch (every entry is the same sigma), kept a
    tensor so the window's bounds are compared in its dtype, as ComfyUI compares them."""
    if isinstance(t, torch.Tensor):
        return t.reshape(-1)[0]
    return torch.tensor(float(t))


# -- holders ---------------------------------------------------------------------------------------

class _ChangeRateCache:
    """The estimate both caches share: settings, the sigma window, and the change tracking.

    Attribute names are ComfyUI's (`reuse_threshold`, `relative_transformation_rate`,
    `cumulative_change_rate`, `x_prev_subsampled`, `output_prev_norm`, `total_steps_skipped`, ...):
    packs read them."""

    name = "StepCache"

    def __init__(self, reuse_threshold: float, start_percent: float, end_percent: float,
                 subsample_factor: int = SUBSAMPLE_FACTOR, offload_cache_diff: bool = False,
                 verbose: bool = False, output_channels: int | None = None) -> None:
        _check_settings(reuse_threshold, start_percent, end_percent, subsample_factor, output_channels)
        self.reuse_threshold = float(reuse_threshold)
        self.start_percent = float(start_percent)
        self.end_percent = float(end_percent)
        self.subsample_factor = int(subsample_factor)
        self.offload_cache_diff = bool(offload_cache_diff)  # ComfyUI's, unused there too
        self.verbose = bool(verbose)
        self.output_channels = output_channels
        # the run's sigma window (prepare_timesteps); until then nothing is cached
        self.start_t = 0.0
        self.end_t = 0.0
        self.reset()

    # settings and lifecycle

    def clone(self) -> "_ChangeRateCache":
        """The same settings, no state (what a sampling run starts from)."""
        return type(self)(self.reuse_threshold, self.start_percent, self.end_percent, self.subsample_factor,
                          self.offload_cache_diff, self.verbose, self.output_channels)

    def cache_signature(self) -> Hashable:
        """Settings only: a template holder carries no state (comfy_core/patching/signature.py)."""
        return (self.name, self.reuse_threshold, self.start_percent, self.end_percent, self.subsample_factor,
                self.verbose, self.output_channels)

    def prepare_timesteps(self, model_sampling: Any) -> "_ChangeRateCache":
        """The window's sigmas from its percents (percent 0: above any sigma; 1: sigma 0)."""
        self.start_t = float(model_sampling.percent_to_sigma(self.start_percent))
        self.end_t = float(model_sampling.percent_to_sigma(self.end_percent))
        return self

    def reset(self) -> "_ChangeRateCache":
        """Forget everything measured (settings and the sigma window stay)."""
        self.relative_transformation_rate: torch.Tensor | None = None
        self.cumulative_change_rate: torch.Tensor | float = 0.0
        self.initial_step = True
        self.skip_current_step = False
        self.x_prev_subsampled: torch.Tensor | None = None
        self.output_prev_subsampled: torch.Tensor | None = None
        self.output_prev_norm: torch.Tensor | None = None
        self.output_change_rates: list[float] = []
        self.approx_output_change_rates: list[float] = []
        self.total_steps_skipped = 0
        self.state_metadata: tuple | None = None
        return self

    # the window

    def is_past_end_timestep(self, timestep: Any) -> bool:
        """At or below the end sigma: the network always runs."""
        return not bool(_first(timestep) > self.end_t)

    def should_do_easycache(self, timestep: Any) -> bool:
        """At or below the start sigma: caching may apply."""
        return bool(_first(timestep) <= self.start_t)

    # the estimate

    def input_change(self, x_sub: torch.Tensor) -> torch.Tensor | None:
        """Mean |x - x_prev| on the subsample, None before the first tracked step."""
        if self.x_prev_subsampled is None:
            return None
        return mean_abs(x_sub - self.x_prev_subsampled)

    def decide_reuse(self, input_change: torch.Tensor | None, can_reuse: bool = True) -> bool:
        """Add this step's estimated output change; True (reuse) while the sum stays under the
        threshold, else the sum restarts (the network runs). Needs a rate and a previous output."""
        if input_change is None or self.output_prev_norm is None or self.relative_transformation_rate is None:
            return False
        estimate = self.relative_transformation_rate * input_change / self.output_prev_norm
        self.cumulative_change_rate = self.cumulative_change_rate + estimate
        if bool(self.cumulative_change_rate < self.reuse_threshold) and can_reuse:
            if self.verbose:
                log.info("%s [verbose] - skipping step; cumulative_change_rate: %s, reuse_threshold: %s",
                         self.name, float(self.cumulative_change_rate), self.reuse_threshold)
            return True
        if self.verbose:
            log.info("%s [verbose] - NOT skipping step; cumulative_change_rate: %s, reuse_threshold: %s",
                     self.name, float(self.cumulative_change_rate), self.reuse_threshold)
        self.cumulative_change_rate = 0.0
        return False

    def observe(self, x_sub: torch.Tensor, out_sub: torch.Tensor, out_norm: torch.Tensor,
                input_change: torch.Tensor | None) -> None:
        """After a real evaluation: the new rate `k = |output change| / |input change|` (when
        both are known), then this step becomes the reference."""
        if self.output_prev_norm is not None:
            output_change = mean_abs(out_sub - self.output_prev_subsampled)
            if self.verbose:
                self.output_change_rates.append(float(output_change / self.output_prev_norm))
            if self.relative_transformation_rate is not None and input_change is not None:
                approx = self.relative_transformation_rate * input_change / self.output_prev_norm
                self.approx_output_change_rates.append(float(approx))
                if self.verbose:
                    log.info("%s [verbose] - approx_output_change_rate: %s", self.name, float(approx))
            if input_change is not None:
                self.relative_transformation_rate = output_change / input_change
        self.x_prev_subsampled = x_sub.clone()
        self.output_prev_subsampled = out_sub.clone()
        self.output_prev_norm = out_norm

    def check_metadata(self, x: torch.Tensor, shape: tuple) -> bool:
        """Reset when the latent's device, dtype or shape changed since the last tracked step."""
        metadata = (x.device, x.dtype, tuple(shape))
        if self.state_metadata is None or self.state_metadata == metadata:
            self.state_metadata = metadata
            return True
        log.warning("%s - Tensor shape, dtype or device changed, resetting state", self.name)
        self.reset()
        self.state_metadata = metadata
        return False

    def channels(self, x: torch.Tensor) -> torch.Tensor:
        """The latent's own channels of a network input (an inpainting model's input also holds
        the concatenated mask and masked image)."""
        return x if self.output_channels is None else x[:, :self.output_channels]


class EasyCacheHolder(_ChangeRateCache):
    """EasyCache's state: one cached diff per conditioning (by uuid), decided by the first one."""

    name = "EasyCache"

    def reset(self) -> "EasyCacheHolder":
        super().reset()
        self.first_cond_uuid: Any = None
        self.uuid_cache_diffs: dict[Any, torch.Tensor] = {}
        return self

    def subsample(self, x: torch.Tensor, uuids: list) -> torch.Tensor:
        """The deciding conditioning's part of the batch, subsampled."""
        part = batch_chunks(x, len(uuids))[uuids.index(self.first_cond_uuid)]
        return subsample(part, self.subsample_factor)

    def can_apply_cache_diff(self, uuids: list) -> bool:
        return all(u in self.uuid_cache_diffs for u in uuids)

    def has_first_cond_uuid(self, uuids: list) -> bool:
        return self.first_cond_uuid in uuids

    def apply_cache_diff(self, x: torch.Tensor, uuids: list) -> torch.Tensor:
        """`x + diff` for each conditioning's part of the batch (a new tensor)."""
        if self.first_cond_uuid in uuids:
            self.total_steps_skipped += 1
        parts = [add_into_tail(part, self.uuid_cache_diffs[u].to(x.device))
                 for part, u in zip(batch_chunks(x, len(uuids)), uuids)]
        return torch.cat(parts)

    def update_cache_diff(self, output: torch.Tensor, x: torch.Tensor, uuids: list) -> None:
        diff = output - input_aligned(x, output)
        for part, u in zip(batch_chunks(diff, len(uuids)), uuids):
            self.uuid_cache_diffs[u] = part


class LazyCacheHolder(_ChangeRateCache):
    """LazyCache's state: one cached diff of the guided prediction."""

    name = "LazyCache"

    def reset(self) -> "LazyCacheHolder":
        super().reset()
        self.cache_diff: torch.Tensor | None = None
        return self

    def subsample(self, x: torch.Tensor) -> torch.Tensor:
        return subsample(x, self.subsample_factor)

    def apply_cache_diff(self, x: torch.Tensor) -> torch.Tensor:
        self.total_steps_skipped += 1
        return x + self.cache_diff.to(x.device)

    def update_cache_diff(self, output: torch.Tensor, x: torch.Tensor) -> None:
        self.cache_diff = output - x


def _check_settings(threshold: Any, start: Any, end: Any, factor: Any, channels: Any) -> None:
    def real(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if not real(threshold) or threshold < 0:
        raise StepCacheError(f"step cache: reuse_threshold must be a finite number >= 0, got {threshold!r}")
    for label, value in (("start_percent", start), ("end_percent", end)):
        if not real(value) or not 0.0 <= value <= 1.0:
            raise StepCacheError(f"step cache: {label} must be in 0..1, got {value!r}")
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise StepCacheError(f"step cache: subsample_factor must be an int >= 1, got {factor!r}")
    if channels is not None and (isinstance(channels, bool) or not isinstance(channels, int) or channels < 1):
        raise StepCacheError(f"step cache: output_channels must be a positive int or None, got {channels!r}")


# -- wrappers (ComfyUI's calling conventions, comfy_core/wrappers.py) -------------------------------

def _network_options(args: tuple, kwargs: dict) -> dict | None:
    """The transformer_options of a diffusion-network call: its last positional argument, the
    keyword, or the one before the last (ComfyUI's order of looking)."""
    if args and isinstance(args[-1], dict):
        return args[-1]
    if isinstance(kwargs.get("transformer_options"), dict):
        return kwargs["transformer_options"]
    if len(args) > 1 and isinstance(args[-2], dict):
        return args[-2]
    return None


def easycache_forward_wrapper(executor: Callable, *args: Any, **kwargs: Any) -> Any:
    """`diffusion_model` wrapper: args `(x [B, C, ...], timesteps, context, ..., transformer_options)`."""
    options = _network_options(args, kwargs)
    holder = None if options is None else options.get(HOLDER_KEY)
    sigmas, uuids = (None, None) if options is None else (options.get("sigmas"), options.get("uuids"))
    if not isinstance(holder, EasyCacheHolder) or not uuids or sigmas is None:
        return executor(*args, **kwargs)  # not a cond-batch call of a run with EasyCache on
    if holder.is_past_end_timestep(sigmas):
        return executor(*args, **kwargs)
    x = holder.channels(args[0])
    first_present = holder.has_first_cond_uuid(uuids)
    input_change = None
    if holder.should_do_easycache(sigmas):
        holder.check_metadata(x, x.shape[1:])
        first_present = holder.has_first_cond_uuid(uuids)
        can_apply = holder.can_apply_cache_diff(uuids)
        if holder.skip_current_step and can_apply:  # the deciding conditioning reused this step
            if holder.verbose:
                log.info("EasyCache [verbose] - was marked to skip this step by %s. Present uuids: %s",
                         holder.first_cond_uuid, uuids)
            return holder.apply_cache_diff(x, uuids)
        if holder.initial_step:
            holder.first_cond_uuid = uuids[0]
            first_present = True
            holder.initial_step = False
        if first_present:
            input_change = holder.input_change(holder.subsample(x, uuids))
            if holder.decide_reuse(input_change, can_apply):
                holder.skip_current_step = True
                return holder.apply_cache_diff(x, uuids)
    output = executor(*args, **kwargs)
    out = holder.channels(output)
    holder.update_cache_diff(out, x, uuids)
    if first_present:
        holder.observe(holder.subsample(x, uuids), holder.subsample(out, uuids), mean_abs(out), input_change)
    return output


def easycache_calc_cond_batch_wrapper(executor: Callable, *args: Any, **kwargs: Any) -> Any:
    """`calc_cond_batch` wrapper: a new step, so no decision yet. args `(model, conds, x, sigma, model_options)`."""
    model_options = args[-1] if args and isinstance(args[-1], dict) else kwargs.get("model_options", {})
    holder = model_options.get("transformer_options", {}).get(HOLDER_KEY)
    if isinstance(holder, EasyCacheHolder):
        holder.skip_current_step = False
    return executor(*args, **kwargs)


def lazycache_predict_noise_wrapper(executor: Callable, *args: Any, **kwargs: Any) -> Any:
    """`predict_noise` wrapper: args `(x [B, C, ...], timestep [B], model_options, seed)`."""
    x_in, timestep = args[0], args[1]
    model_options = args[2] if len(args) > 2 and isinstance(args[2], dict) else kwargs.get("model_options")
    holder = (model_options or {}).get("transformer_options", {}).get(HOLDER_KEY)
    if not isinstance(holder, LazyCacheHolder):
        guider_options = getattr(getattr(executor, "class_obj", None), "model_options", None) or {}
        holder = guider_options.get("transformer_options", {}).get(HOLDER_KEY)
    if not isinstance(holder, LazyCacheHolder) or holder.is_past_end_timestep(timestep):
        return executor(*args, **kwargs)
    x = holder.channels(x_in)
    input_change = None
    if holder.should_do_easycache(timestep):
        holder.check_metadata(x, x.shape)
        input_change = holder.input_change(holder.subsample(x))
        if holder.decide_reuse(input_change):
            holder.skip_current_step = True
            return holder.apply_cache_diff(x)
    output = executor(*args, **kwargs)
    holder.update_cache_diff(output, x)
    holder.observe(holder.subsample(x), holder.subsample(output), mean_abs(output), input_change)
    return output


def step_cache_sample_wrapper(executor: Callable, *args: Any, **kwargs: Any) -> Any:
    """`outer_sample` wrapper: the run gets its own holder (a clone of the MODEL's template, with
    the window's sigmas), in its own copy of the guider's model_options; at the end the skip count
    is logged and the holder dropped. args `(noise, latent_image, sampler, sigmas, ...)`."""
    guider = executor.class_obj
    original = guider.model_options
    run_options = copy_nested_dicts(original)
    template = run_options.get("transformer_options", {}).get(HOLDER_KEY)
    if not isinstance(template, _ChangeRateCache):
        raise StepCacheError("step cache: the run's transformer_options hold no step-cache holder "
                             f"under {HOLDER_KEY!r} (found {type(template).__name__})")
    holder = template.clone().prepare_timesteps(_model_sampling(guider))
    run_options["transformer_options"][HOLDER_KEY] = holder
    guider.model_options = run_options
    log.info("%s enabled - threshold: %s, start_percent: %s, end_percent: %s", holder.name,
             holder.reuse_threshold, holder.start_percent, holder.end_percent)
    try:
        return executor(*args, **kwargs)
    finally:
        if holder.verbose:
            log.info("%s [verbose] - output_change_rates %d: %s", holder.name, len(holder.output_change_rates),
                     holder.output_change_rates)
            log.info("%s [verbose] - approx_output_change_rates %d: %s", holder.name,
                     len(holder.approx_output_change_rates), holder.approx_output_change_rates)
        sigmas = args[3] if len(args) > 3 else kwargs.get("sigmas")
        total = max(len(sigmas) - 1, 0) if sigmas is not None else 0
        log.info("%s - skipped %d/%d steps (%.2fx speedup).", holder.name, holder.total_steps_skipped, total,
                 speedup(total, holder.total_steps_skipped))
        holder.reset()
        guider.model_options = original


def speedup(total_steps: int, skipped: int) -> float:
    """Steps over evaluated steps (1.0 when nothing ran, as ComfyUI's log line)."""
    evaluated = total_steps - skipped
    return total_steps / evaluated if evaluated else 1.0


def _model_sampling(guider: Any) -> Any:
    """The run's model sampling, with the MODEL's object patches (ModelSampling* nodes) applied."""
    patcher = guider.model_patcher
    sampling = getattr(patcher, "model_sampling", None)
    return sampling if sampling is not None else patcher.model.model_sampling


# -- installing on a clone -------------------------------------------------------------------------

def _latent_channels(model: Any) -> int | None:
    latent_format = getattr(getattr(model, "model", None), "latent_format", None)
    channels = getattr(latent_format, "latent_channels", None)
    return channels if isinstance(channels, int) else None


def _install(model: Any, holder: _ChangeRateCache, key: str, wrappers: list[tuple[str, Callable]]) -> Any:
    present = (model.model_options.get("transformer_options") or {}).get(HOLDER_KEY)
    if present is not None:
        raise StepCacheError(f"{holder.name}: the model already carries "
                             f"{getattr(present, 'name', type(present).__name__)} (one step cache per model: "
                             f"both keep their state under transformer_options[{HOLDER_KEY!r}])")
    patched = model.clone()
    patched.model_options.setdefault("transformer_options", {})[HOLDER_KEY] = holder
    for kind, fn in wrappers:
        patched.add_wrapper_with_key(kind, key, fn)
    return patched


def apply_easycache(model: Any, reuse_threshold: float, start_percent: float, end_percent: float,
                    verbose: bool = False, subsample_factor: int = SUBSAMPLE_FACTOR) -> Any:
    """A clone of the MODEL patcher `model` running EasyCache (the input is unchanged)."""
    holder = EasyCacheHolder(reuse_threshold, start_percent, end_percent, subsample_factor, False, verbose,
                             _latent_channels(model))
    return _install(model, holder, EASYCACHE_KEY, [
        (WrappersMP.OUTER_SAMPLE, step_cache_sample_wrapper),
        (WrappersMP.CALC_COND_BATCH, easycache_calc_cond_batch_wrapper),
        (WrappersMP.DIFFUSION_MODEL, easycache_forward_wrapper)])


def apply_lazycache(model: Any, reuse_threshold: float, start_percent: float, end_percent: float,
                    verbose: bool = False, subsample_factor: int = SUBSAMPLE_FACTOR) -> Any:
    """A clone of the MODEL patcher `model` running LazyCache (the input is unchanged)."""
    holder = LazyCacheHolder(reuse_threshold, start_percent, end_percent, subsample_factor, False, verbose,
                             _latent_channels(model))
    return _install(model, holder, LAZYCACHE_KEY, [
        (WrappersMP.OUTER_SAMPLE, step_cache_sample_wrapper),
        (WrappersMP.PREDICT_NOISE, lazycache_predict_noise_wrapper)])

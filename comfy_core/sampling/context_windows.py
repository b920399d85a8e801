"""Context windows: one model call on a latent longer than the model's window, as several calls
on overlapping windows of frames whose outputs are fused with per-frame weights.

Mirrors ComfyUI 0.3.64 `comfy/context_windows.py` (`IndexListContextHandler`,
`IndexListContextWindow`, the callbacks and the `prepare_sampling` wrapper) and where
`comfy/samplers.py` calls it: a handler in `model_options["context_handler"]` (a patch on a MODEL
clone, nodes/context_windows.py) takes over `calc_cond_batch` (comfy_core/sampling/cond_batch.py)
when the latent's `dim` is longer than `context_length`. Each window gets its slice of x, of the
per-frame timestep (dim 0 only) and of every conditioning tensor that carries that axis, runs
through the ordinary cond batching, and adds its output times the fuse weights; the sums are
divided by the summed weights (or blended by "relative" bias). `dim` 0 is AnimateDiff's
batch-as-frames `[T, C, h, w]`, `dim` 2 the video latents `[B, C, T, h, w]` (Wan).

Where this differs from 0.3.64, in each case where 0.3.64 fails or ignores the frame axis:
- model conds (`c_concat`, Wan's concat latent and mask, VACE frames, per-frame embeddings) are
  sliced when their `dim` axis has the latent's length (0.3.64's test `ndim < dim` never holds,
  so a window's model got the whole video's concat latent; later ComfyUI slices them per cond type);
- the step (for the uniform schedules' shifts) is the last sample sigma at or above the current
  one, so samplers that evaluate between steps (DPM++ 2S, Heun-type midpoints) keep working;
- the timestep is sliced by the window only when the windows run along dim 0 (the batch).

Today's ComfyUI adds (read in a copy of its comfy/context_windows.py; its nodes in
nodes/context_windows.py), each built here:
- `causal_window_fix` (default on): a window not starting at frame 0 runs with the frame before it
  prepended (x, per-frame conds, the dim-0 timestep), and that frame's output is dropped before fusing;
- `latent_retain_index_list` / `cond_retain_index_list` ("0,2"): sub-position i of every window's x /
  model conds holds frame i of the whole latent (an I2V start frame kept in every window);
- `split_conds_to_windows`: a conditioning of several entries (ConditioningCombine) gives each window
  one entry, the region `int(center_ratio * n)` of its centre `(first + last) / (2 * frames)`;
- `freenoise` (FreeNoise, Qiu et al. 2023, as AnimateDiff-Evolved applies it): before sampling, each
  window's frames past the previous window's end are a seeded permutation of the `length - overlap`
  frames starting where the previous window started (a `sampler_sample` wrapper).
- the RESIZE_COND_ITEM callbacks (`IndexListCallbacks.RESIZE_COND_ITEM`): every model cond is offered
  to them first, shown as ComfyUI's cond objects (`CondView`: `.cond`, `_copy_with`), and the first
  non-None answer is the window's value (ComfyUI-WanVaceAdvanced cuts VACE's context and strengths so);
  VACE's `vace_context` is cut on its own frame axis 3, `audio_embed` on axis 1.
Not built: ComfyUI's multimodal windows (packed audio-video latents) and LTX guide-frame injection.
"""
from __future__ import annotations

import collections
import logging
from abc import ABC, abstractmethod
from typing import Any, Callable

import torch

from comfy_core.wrappers import WrappersMP, get_all_callbacks
from comfy_core.sampling.context_schedules import (  # noqa: F401  (re-exported: ComfyUI keeps them in one module)
    CONTEXT_MAPPING, FUSE_MAPPING, OVERLAPPING_SCHEDULES, ContextFuseMethod, ContextFuseMethods, ContextSchedule,
    ContextSchedules, ContextWindowError, create_weights_flat, create_weights_overlap_linear, create_weights_pyramid,
    create_windows_batched, create_windows_default, create_windows_static_standard, create_windows_uniform_looped,
    create_windows_uniform_standard, get_context_weights, get_matching_context_schedule, get_matching_fuse_method,
    get_missing_indexes, ordered_halving, shift_window_to_end, shift_window_to_start,
)
from comfy_core.sampling.context_schedules import window_rolls_over as does_window_roll_over  # ComfyUI's name

log = logging.getLogger(__name__)

# The transformer_options key under which the model sees the window being run (ComfyUI's).
CONTEXT_WINDOW_OPTION = "context_window"
# Model conds whose frame axis is their own, not the latent's `dim` (today's ComfyUI cuts these two
# so): VACE's context [B, n, 96, T, H, W] and the audio embeddings [B, T, ...] of HuMo / S2V.
_FRAME_AXIS_OF_COND = {"vace_context": 3, "audio_embed": 1}


class ContextWindowABC(ABC):
    @abstractmethod
    def get_tensor(self, full: torch.Tensor) -> torch.Tensor:
        """The part of `full` in this window."""

    @abstractmethod
    def add_window(self, full: torch.Tensor, to_add: torch.Tensor) -> torch.Tensor:
        """Add `to_add` to this window's part of `full`, in place; returns `full`."""


class ContextHandlerABC(ABC):
    @abstractmethod
    def should_use_context(self, model: Any, conds: list, x_in: torch.Tensor, timestep: torch.Tensor,
                           model_options: dict) -> bool: ...

    @abstractmethod
    def get_resized_cond(self, cond_in: list[dict] | None, x_in: torch.Tensor, window: ContextWindowABC,
                         device: Any = None) -> list | None: ...

    @abstractmethod
    def execute(self, calc_cond_batch: Callable, model: Any, conds: list, x_in: torch.Tensor,
                timestep: torch.Tensor, model_options: dict) -> list[torch.Tensor]: ...


def _index(dim: int, index: Any) -> tuple:
    return (slice(None),) * dim + (index,)


class IndexListContextWindow(ContextWindowABC):
    """A window as the list of frame positions it holds along `dim`, of a latent of `total_frames`.
    `causal_anchor_index` (set by a handler with `causal_window_fix`) is a frame prepended to every
    slice this window takes."""

    def __init__(self, index_list: list[int], dim: int = 0, total_frames: int = 0, context_overlap: int = 0) -> None:
        self.index_list = index_list
        self.context_length = len(index_list)
        self.context_overlap = context_overlap
        self.dim = dim
        self.total_frames = total_frames
        # where the window's centre lies in the video, 0..1 (split_conds_to_windows picks a region by it)
        self.center_ratio = ((min(index_list) + max(index_list)) / (2 * total_frames)
                             if total_frames > 0 and index_list else None)
        self.causal_anchor_index: int | None = None

    def get_tensor(self, full: torch.Tensor, device: Any = None, dim: int | None = None,
                   retain_index_list: Any = ()) -> torch.Tensor:
        """This window's frames of `full` along `dim` (the anchor frame first if one is set); with
        `retain_index_list`, sub-position i holds frame i of `full` instead."""
        dim = self.dim if dim is None else dim
        if dim == 0 and full.shape[0] == 1:  # one row shared by every frame (one prompt for the batch)
            return full
        indices = list(self.index_list)
        if self.causal_anchor_index is not None and self.causal_anchor_index >= 0:
            indices = [self.causal_anchor_index] + indices
        window = full[_index(dim, indices)]  # advanced indexing: a copy, `full` is never written
        if retain_index_list:
            for i in retain_index_list:
                if not 0 <= i < min(len(indices), full.shape[dim]):
                    raise ContextWindowError(f"retain index {i} lies outside a window of {len(indices)} frames "
                                             f"of a latent of {full.shape[dim]}")
            window[_index(dim, list(retain_index_list))] = full[_index(dim, list(retain_index_list))]
        return window.to(device)

    def get_region_index(self, num_regions: int) -> int:
        """The region (of `num_regions` equal parts of the video) holding this window's centre."""
        if self.center_ratio is None:
            raise ContextWindowError("a window built without total_frames has no region")
        return min(max(int(self.center_ratio * num_regions), 0), num_regions - 1)

    def add_window(self, full: torch.Tensor, to_add: torch.Tensor, dim: int | None = None) -> torch.Tensor:
        dim = self.dim if dim is None else dim
        full[_index(dim, self.index_list)] += to_add
        return full


class IndexListCallbacks:
    """Callback kinds a handler runs (its `callbacks`, filled with comfy.patcher_extension's
    `add_callback_with_key(kind, key, fn, handler.callbacks)`)."""

    EVALUATE_CONTEXT_WINDOWS = "evaluate_context_windows"  # fn(handler, model, x_in, conds, timestep, model_options, window_idx, window, model_options, device, first_device)
    COMBINE_CONTEXT_WINDOW_RESULTS = "combine_context_window_results"  # fn(handler, x_in, sub_conds_out, sub_conds, window, window_idx, total_windows, timestep, conds_final, counts_final, biases_final)
    EXECUTE_START = "execute_start"  # fn(handler, model, x_in, conds, timestep, model_options)
    EXECUTE_CLEANUP = "execute_cleanup"  # same arguments, after the fuse (also on error)
    # fn(cond_key, cond_value, window, x_in, device, new_cond_item) -> the window's value, or None
    # to leave it to the next callback and then to the handler (today's ComfyUI: a pack's own model
    # cond, or VACE's, cut its way); `cond_value` has ComfyUI's `.cond` / `_copy_with` (`CondView`)
    RESIZE_COND_ITEM = "resize_cond_item"

    def init_callbacks(self) -> dict:
        return {}


ContextResults = collections.namedtuple("ContextResults", ["window_idx", "sub_conds_out", "sub_conds", "window"])


class CondView:
    """A plain model-cond value as ComfyUI's `comfy.conds` objects show it to RESIZE_COND_ITEM
    callbacks: the value as `.cond`, `_copy_with(new)` a view of `new`. Our model conds are the
    values themselves (tensors, VACE's strength list); ComfyUI's are CONDRegular / CONDConstant
    objects, which callbacks read through `.cond` and rebuild with `_copy_with`."""

    __slots__ = ("cond",)

    def __init__(self, cond: Any) -> None:
        self.cond = cond

    def _copy_with(self, cond: Any) -> "CondView":
        return CondView(cond)


def _as_cond_object(value: Any) -> Any:
    return value if callable(getattr(value, "_copy_with", None)) else CondView(value)


def _from_cond_object(result: Any, original: Any) -> Any:
    """A callback's result in the form the model cond had: a plain value stays plain."""
    if isinstance(result, CondView) or (not callable(getattr(original, "_copy_with", None))
                                        and callable(getattr(result, "_copy_with", None)) and hasattr(result, "cond")):
        return result.cond
    return result


def match_weights_to_dim(weights: Any, x_in: torch.Tensor, dim: int, device: Any = None) -> torch.Tensor:
    """Per-frame weights shaped to broadcast against x along `dim` (size 1 elsewhere)."""
    w = torch.as_tensor(weights, dtype=torch.float32, device=device)
    return w.reshape(get_shape_for_dim(x_in, dim, len(w)))


def get_shape_for_dim(x_in: torch.Tensor, dim: int, size: int | None = None) -> list[int]:
    """`[1, ..., n, ..., 1]`: x's rank, `n` (x's length along `dim` by default) at `dim`."""
    shape = [1] * x_in.ndim
    shape[dim] = x_in.shape[dim] if size is None else size
    return shape


class IndexListContextHandler(ContextHandlerABC):
    """Windows from `context_schedule`, fused by `fuse_method`, along `dim` of the latent."""

    def __init__(self, context_schedule: ContextSchedule, fuse_method: ContextFuseMethod, context_length: int = 1,
                 context_overlap: int = 0, context_stride: int = 1, closed_loop: bool = False, dim: int = 0,
                 freenoise: bool = False, cond_retain_index_list: Any = "", split_conds_to_windows: bool = False,
                 latent_retain_index_list: Any = "", causal_window_fix: bool = True) -> None:
        for name, value, least in (("context_length", context_length, 1), ("context_overlap", context_overlap, 0),
                                   ("context_stride", context_stride, 1), ("dim", dim, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ContextWindowError(f"{name} must be an integer >= {least}, got {value!r}")
        if context_schedule.name in OVERLAPPING_SCHEDULES and context_overlap >= context_length:
            # the windows would not advance (ComfyUI: range() step 0, or no windows and 0/0)
            raise ContextWindowError(f"context_overlap ({context_overlap}) must be smaller than context_length "
                                     f"({context_length}) for the {context_schedule.name} schedule")
        self.context_schedule = context_schedule
        self.fuse_method = fuse_method
        self.context_length = context_length
        self.context_overlap = context_overlap
        self.context_stride = context_stride
        self.closed_loop = closed_loop
        self.dim = dim
        self._step = 0
        self.callbacks: dict = {}
        for name, value in (("freenoise", freenoise), ("split_conds_to_windows", split_conds_to_windows),
                            ("causal_window_fix", causal_window_fix)):
            if not isinstance(value, bool):
                raise ContextWindowError(f"{name} must be a bool, got {value!r}")
        self.freenoise = freenoise
        self.split_conds_to_windows = split_conds_to_windows
        self.causal_window_fix = causal_window_fix
        self.cond_retain_index_list = parse_index_list(cond_retain_index_list, "cond_retain_index_list")
        self.latent_retain_index_list = parse_index_list(latent_retain_index_list, "latent_retain_index_list")

    def should_use_context(self, model: Any, conds: list, x_in: torch.Tensor, timestep: torch.Tensor,
                           model_options: dict) -> bool:
        if self.dim >= x_in.ndim:
            raise ContextWindowError(f"context windows along dim {self.dim}, but the latent has {x_in.ndim} "
                                     f"dims {tuple(x_in.shape)}")
        if x_in.size(self.dim) > self.context_length:
            log.debug("Using context windows %d for %d frames.", self.context_length, x_in.size(self.dim))
            return True
        return False

    def prepare_control_objects(self, control: Any, device: Any = None) -> Any:
        """ControlNets are handed through unchanged (as 0.3.64); the chain is walked for packs
        that override this to cut their hints per window."""
        previous = getattr(control, "previous_controlnet", None)
        if previous is not None:
            self.prepare_control_objects(previous, device)
        return control

    def _has_frame_axis(self, value: Any, x_in: torch.Tensor) -> bool:
        return (isinstance(value, torch.Tensor) and self.dim < value.ndim
                and value.size(self.dim) == x_in.size(self.dim))

    def _resize_model_cond(self, value: Any, x_in: torch.Tensor, window: IndexListContextWindow, device: Any) -> Any:
        """One model input for a window: tensors (and lists of them) that carry the frame axis
        sliced; ComfyUI-style CONDRegular objects (a `.cond` tensor) likewise. Both keep
        `cond_retain_index_list` (ComfyUI's model conds are all CONDRegular objects; ours are tensors)."""
        retain = self.cond_retain_index_list
        if self._has_frame_axis(value, x_in):
            return window.get_tensor(value, device, retain_index_list=retain)
        if isinstance(value, list):
            return [self._resize_model_cond(v, x_in, window, device) for v in value]
        cond = getattr(value, "cond", None)
        if self._has_frame_axis(cond, x_in) and callable(getattr(value, "_copy_with", None)):
            return value._copy_with(window.get_tensor(cond, device, retain_index_list=retain))
        return value

    def _resize_by_callbacks(self, key: str, value: Any, window: IndexListContextWindow, x_in: torch.Tensor,
                             device: Any, new_cond_item: dict) -> Any:
        """The first RESIZE_COND_ITEM callback's non-None answer for one model cond (today's
        ComfyUI asks them before its own rules), or None when none handles it."""
        callbacks = get_all_callbacks(IndexListCallbacks.RESIZE_COND_ITEM, self.callbacks)
        if not callbacks:
            return None
        shown = _as_cond_object(value)
        for callback in callbacks:
            result = callback(key, shown, window, x_in, device, new_cond_item)
            if result is not None:
                return _from_cond_object(result, value)
        return None

    def _resize_on_own_axis(self, key: str, value: Any, x_in: torch.Tensor, window: IndexListContextWindow,
                            device: Any) -> Any:
        """A model cond whose frames lie on an axis of its own (`_FRAME_AXIS_OF_COND`), cut to the
        window when that axis has the latent's length (today's ComfyUI; VACE's context keeps
        `cond_retain_index_list`, the audio does not)."""
        axis = _FRAME_AXIS_OF_COND[key]
        cond = getattr(value, "cond", value)
        if not (isinstance(cond, torch.Tensor) and axis < cond.ndim and cond.size(axis) == x_in.size(self.dim)):
            return value
        retain = self.cond_retain_index_list if key == "vace_context" else ()
        sliced = window.get_tensor(cond, device, dim=axis, retain_index_list=retain)
        return value._copy_with(sliced) if cond is not value else sliced

    def get_resized_cond(self, cond_in: list[dict] | None, x_in: torch.Tensor, window: IndexListContextWindow,
                         device: Any = None) -> list | None:
        """The entries of one conditioning list for a window: a copy of each entry with its
        tensors (mask, ...) and model conds cut to the window where they carry the frame axis;
        SVD's `num_video_frames` becomes the window's length. Each model cond is first offered to
        the handler's RESIZE_COND_ITEM callbacks (a pack's own cond, VACE's as a pack cuts it);
        VACE's `vace_context` is cut on its axis 3 and `audio_embed` on its axis 1."""
        if cond_in is None:
            return None
        if self.split_conds_to_windows and len(cond_in) > 1:  # one combined conditioning per region
            cond_in = [cond_in[window.get_region_index(len(cond_in))]]
        resized = []
        for entry in cond_in:
            out = dict(entry)
            for key, item in entry.items():
                if isinstance(item, torch.Tensor):
                    out[key] = (window.get_tensor(item) if self._has_frame_axis(item, x_in) else item).to(device)
                elif key == "control":
                    out[key] = self.prepare_control_objects(item, device)
                elif isinstance(item, dict):
                    sub = dict(item)
                    for sub_key, value in item.items():
                        handled = self._resize_by_callbacks(sub_key, value, window, x_in, device, sub)
                        if handled is not None:
                            sub[sub_key] = handled
                        elif sub_key == "num_video_frames":
                            sub[sub_key] = _with_frames(value, window.context_length)
                        elif sub_key in _FRAME_AXIS_OF_COND:
                            sub[sub_key] = self._resize_on_own_axis(sub_key, value, x_in, window, device)
                        else:
                            sub[sub_key] = self._resize_model_cond(value, x_in, window, device)
                    out[key] = sub
            resized.append(out)
        return resized

    def set_step(self, timestep: torch.Tensor, model_options: dict) -> None:
        """The sampling step of `timestep` among `transformer_options["sample_sigmas"]` (the uniform
        schedules shift their windows by it)."""
        sample_sigmas = model_options.get("transformer_options", {}).get("sample_sigmas")
        if sample_sigmas is None:
            raise ContextWindowError("context windows: model_options['transformer_options']['sample_sigmas'] "
                                     "is missing (the sampler's guider sets it)")
        sigma = timestep.reshape(-1)[0].to(sample_sigmas)
        matches = torch.nonzero(torch.isclose(sample_sigmas, sigma, rtol=1e-4)).flatten()
        if matches.numel():
            self._step = int(matches[0])
            return
        above = torch.nonzero(sample_sigmas > sigma).flatten()
        if above.numel() == 0:
            raise ContextWindowError(f"context windows: sigma {float(sigma):g} lies above every sample sigma")
        self._step = int(above[-1])

    def get_context_windows(self, model: Any, x_in: torch.Tensor, model_options: dict) -> list[IndexListContextWindow]:
        full_length = x_in.size(self.dim)
        lists = self.context_schedule.func(full_length, self, model_options)
        return [IndexListContextWindow(w, dim=self.dim, total_frames=full_length, context_overlap=self.context_overlap)
                for w in lists]

    def execute(self, calc_cond_batch: Callable, model: Any, conds: list, x_in: torch.Tensor,
                timestep: torch.Tensor, model_options: dict) -> list[torch.Tensor]:
        self.set_step(timestep, model_options)
        windows = list(enumerate(self.get_context_windows(model, x_in, model_options)))
        relative = self.fuse_method.name == ContextFuseMethods.RELATIVE
        conds_final = [torch.zeros_like(x_in) for _ in conds]
        fill = torch.ones if relative else torch.zeros
        counts_final = [fill(get_shape_for_dim(x_in, self.dim), device=x_in.device) for _ in conds]
        biases_final = [[0.0] * x_in.shape[self.dim] for _ in conds]
        for callback in get_all_callbacks(IndexListCallbacks.EXECUTE_START, self.callbacks):
            callback(self, model, x_in, conds, timestep, model_options)
        transformer_options = model_options.setdefault("transformer_options", {})
        had_window, previous_window = CONTEXT_WINDOW_OPTION in transformer_options, transformer_options.get(
            CONTEXT_WINDOW_OPTION)
        try:
            for item in windows:
                for result in self.evaluate_context_windows(calc_cond_batch, model, x_in, conds, timestep, [item],
                                                            model_options):
                    self.combine_context_window_results(x_in, result.sub_conds_out, result.sub_conds, result.window,
                                                        result.window_idx, len(windows), timestep, conds_final,
                                                        counts_final, biases_final)
            if not relative:  # relative blends as it goes: already normalised
                for i in range(len(conds_final)):
                    conds_final[i] /= counts_final[i]
            return conds_final
        finally:
            if had_window:
                transformer_options[CONTEXT_WINDOW_OPTION] = previous_window
            else:
                transformer_options.pop(CONTEXT_WINDOW_OPTION, None)
            for callback in get_all_callbacks(IndexListCallbacks.EXECUTE_CLEANUP, self.callbacks):
                callback(self, model, x_in, conds, timestep, model_options)

    def evaluate_context_windows(self, calc_cond_batch: Callable, model: Any, x_in: torch.Tensor, conds: list,
                                 timestep: torch.Tensor, enumerated_context_windows: list, model_options: dict,
                                 device: Any = None, first_device: Any = None) -> list[ContextResults]:
        """Run the model on each window: its slice of x, of the timestep (dim 0) and of the conds."""
        results = []
        for window_idx, window in enumerated_context_windows:
            # causal_window_fix: the frame before the window rides along (x, conds, dim-0 timestep) and its
            # output is dropped below; set before the callbacks, which may read it
            anchor = window.index_list[0] - 1 if self.causal_window_fix else -1
            window.causal_anchor_index = anchor if 0 <= anchor < x_in.size(self.dim) else None
            for callback in get_all_callbacks(IndexListCallbacks.EVALUATE_CONTEXT_WINDOWS, self.callbacks):
                callback(self, model, x_in, conds, timestep, model_options, window_idx, window, model_options,
                         device, first_device)
            model_options["transformer_options"][CONTEXT_WINDOW_OPTION] = window
            sub_x = window.get_tensor(x_in, device, retain_index_list=self.latent_retain_index_list)
            sub_timestep = window.get_tensor(timestep, device, dim=0) if self.dim == 0 else timestep.to(device)
            sub_conds = [self.get_resized_cond(cond, x_in, window, device) for cond in conds]
            sub_conds_out = calc_cond_batch(model, sub_conds, sub_x, sub_timestep, model_options)
            if window.causal_anchor_index is not None:
                sub_conds_out = [o.narrow(self.dim, 1, o.shape[self.dim] - 1) for o in sub_conds_out]
            if device is not None:
                sub_conds_out = [o.to(x_in.device) for o in sub_conds_out]
            results.append(ContextResults(window_idx, sub_conds_out, sub_conds, window))
        return results

    def combine_context_window_results(self, x_in: torch.Tensor, sub_conds_out: list, sub_conds: list,
                                       window: IndexListContextWindow, window_idx: int, total_windows: int,
                                       timestep: torch.Tensor, conds_final: list, counts_final: list,
                                       biases_final: list) -> None:
        """Add one window's outputs: weighted sums (divided by the weights at the end), or for
        "relative" a running blend in which each frame's weight falls linearly from the window's
        middle (1) to its edges (at least 0.01)."""
        if self.fuse_method.name == ContextFuseMethods.RELATIVE:
            first, last = window.index_list[0], window.index_list[-1]
            for pos, idx in enumerate(window.index_list):
                bias = max(1e-2, 1 - abs(idx - (first + last) / 2) / ((last - first + 1e-2) / 2))
                for i in range(len(sub_conds_out)):
                    total = biases_final[i][idx]
                    at, src = _index(self.dim, idx), _index(self.dim, pos)
                    conds_final[i][at] = (conds_final[i][at] * (total / (total + bias))
                                          + sub_conds_out[i][src] * (bias / (total + bias)))
                    biases_final[i][idx] = total + bias
        else:
            weights = get_context_weights(window.context_length, x_in.shape[self.dim], window.index_list, self,
                                          sigma=timestep)
            w = match_weights_to_dim(weights, x_in, self.dim, device=x_in.device)
            for i in range(len(sub_conds_out)):
                window.add_window(conds_final[i], sub_conds_out[i] * w)
                window.add_window(counts_final[i], w)
        for callback in get_all_callbacks(IndexListCallbacks.COMBINE_CONTEXT_WINDOW_RESULTS, self.callbacks):
            callback(self, x_in, sub_conds_out, sub_conds, window, window_idx, total_windows, timestep, conds_final,
                     counts_final, biases_final)


def _with_frames(value: Any, frames: int) -> Any:
    """SVD's frame count input set to the window's length (an int, or a ComfyUI CONDConstant)."""
    if callable(getattr(value, "_copy_with", None)):
        copied = value._copy_with(getattr(value, "cond", None))
        copied.cond = frames
        return copied
    return frames


def _prepare_sampling_wrapper(executor: Any, model: Any, noise_shape: Any, *args: Any, **kwargs: Any) -> Any:
    """PREPARE_SAMPLING wrapper: memory is planned for one window's latent, not the whole video."""
    model_options = kwargs.get("model_options")
    if model_options is None:
        raise ContextWindowError("context windows: the prepare_sampling wrapper was called without model_options")
    handler = model_options.get("context_handler")
    if handler is not None:
        noise_shape = list(noise_shape)
        noise_shape[handler.dim] = min(noise_shape[handler.dim], handler.context_length)
    return executor(model, noise_shape, *args, **kwargs)


def create_prepare_sampling_wrapper(model: Any) -> None:
    """Add the wrapper above to a MODEL patcher (the context-window nodes do, on their clone)."""
    model.add_wrapper_with_key(WrappersMP.PREPARE_SAMPLING, "ContextWindows_prepare_sampling",
                               _prepare_sampling_wrapper)


def parse_index_list(value: Any, name: str) -> list[int]:
    """ComfyUI's retain lists: "0, 2" (or, from a pack, a list of ints); "" or [] for none."""
    if isinstance(value, str):
        parts = [part.strip() for part in value.split(",")] if value.strip() else []
        if not all(part.isdigit() for part in parts):
            raise ContextWindowError(f"{name} must be comma-separated frame indices >= 0 like '0,2', got {value!r}")
        return [int(part) for part in parts]
    if isinstance(value, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                for i in value):
        return list(value)
    raise ContextWindowError(f"{name} must be comma-separated frame indices >= 0 like '0,2', got {value!r}")


def apply_freenoise(noise: torch.Tensor, dim: int, context_length: int, context_overlap: int,
                    seed: int) -> torch.Tensor:
    """FreeNoise's noise rescheduling (Qiu et al., "FreeNoise", 2023; the loop of AnimateDiff-Evolved's
    sample_settings.py that ComfyUI uses): walking windows of `context_length` by `length - overlap`,
    the frames after each window (up to one step) become a permutation, drawn from a CPU generator
    seeded with `seed`, of the as many frames starting where that window starts; in order, so a later
    step may copy frames an earlier one placed (an overlap longer than the window, which only the batched
    schedule allows, walks nowhere: unchanged). A new tensor; `noise` is not changed."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ContextWindowError(f"freenoise needs the sampling seed (an int), got {seed!r}")
    out = noise.clone()
    generator = torch.Generator(device="cpu").manual_seed(seed)
    frames, step = out.shape[dim], context_length - context_overlap
    if step == 0:  # the windows would not advance (ComfyUI: range() with step 0 raises)
        raise ContextWindowError(f"freenoise: context_overlap ({context_overlap}) must differ from "
                                 f"context_length ({context_length})")
    for start in range(0, frames - context_length, step):
        place = start + context_length
        count = min(step, frames - place)
        if count <= 0:
            break
        source = torch.randperm(count, generator=generator, device="cpu") + start
        out[_index(dim, slice(place, place + count))] = out[_index(dim, source.to(out.device))]
    return out


def _sampler_sample_wrapper(executor: Any, guider: Any, sigmas: Any, extra_args: dict, callback: Any, noise: Any,
                            *args: Any, **kwargs: Any) -> Any:
    """SAMPLER_SAMPLE wrapper: the initial noise rescheduled by FreeNoise when the handler asks for it."""
    handler = extra_args.get("model_options", {}).get("context_handler")
    if handler is None:
        raise ContextWindowError("context windows: the sampler_sample wrapper found no context_handler")
    if handler.freenoise:
        noise = apply_freenoise(noise, handler.dim, handler.context_length, handler.context_overlap,
                                extra_args.get("seed"))
    return executor(guider, sigmas, extra_args, callback, noise, *args, **kwargs)


def create_sampler_sample_wrapper(model: Any) -> None:
    """Add the FreeNoise wrapper above to a MODEL patcher (the nodes do, with `freenoise` on)."""
    model.add_wrapper_with_key(WrappersMP.SAMPLER_SAMPLE, "ContextWindows_sampler_sample", _sampler_sample_wrapper)


def context_handler(context_schedule: str, fuse_method: str, context_length: int, context_overlap: int,
                    context_stride: int = 1, closed_loop: bool = False, dim: int = 0, *, freenoise: bool = False,
                    cond_retain_index_list: Any = "", split_conds_to_windows: bool = False,
                    latent_retain_index_list: Any = "", causal_window_fix: bool = True) -> IndexListContextHandler:
    """A handler from the nodes' names and numbers (today's ComfyUI's defaults)."""
    return IndexListContextHandler(get_matching_context_schedule(context_schedule),
                                   get_matching_fuse_method(fuse_method), context_length=context_length,
                                   context_overlap=context_overlap, context_stride=context_stride,
                                   closed_loop=closed_loop, dim=dim, freenoise=freenoise,
                                   cond_retain_index_list=cond_retain_index_list,
                                   split_conds_to_windows=split_conds_to_windows,
                                   latent_retain_index_list=latent_retain_index_list,
                                   causal_window_fix=causal_window_fix)


def apply_context_windows(model_patcher: Any, handler: IndexListContextHandler) -> Any:
    """A clone of the MODEL patcher with `handler` in its model options (and the memory-planning
    wrapper, and FreeNoise's when the handler uses it); the input patcher is unchanged."""
    patched = model_patcher.clone()
    patched.model_options["context_handler"] = handler
    create_prepare_sampling_wrapper(patched)
    if handler.freenoise:
        create_sampler_sample_wrapper(patched)
    return patched

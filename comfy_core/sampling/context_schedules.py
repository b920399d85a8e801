"""Context-window schedules and fuse weights: which frames each window holds, and how much each
window's output counts per frame when windows overlap.

Mirrors ComfyUI 0.3.64 `comfy/context_windows.py` (its `create_windows_*` schedules, from
neggles' animatediff-cli `pipelines/context.py`, and its `create_weights_*` fuse methods; the
pyramid weighting is FreeNoise's, Qiu et al. 2023, "FreeNoise: Tuning-Free Longer Video Diffusion
via Noise Rescheduling"; overlap-linear is the ramp of kijai's WanVideoWrapper). Written here from
that behaviour. Pure functions of plain numbers: no torch except the overlap-linear ramp, which
ComfyUI returns as a tensor.

Schedules take `(num_frames, handler, model_options)`; they read the handler's
`context_length`, `context_overlap`, `context_stride`, `closed_loop` and `_step` (the sampling
step, which the uniform schedules use to shift their windows every step).

Differences from ComfyUI, each where ComfyUI would crash or divide by zero: overlap-linear with
`context_overlap` 0 gives flat weights (ComfyUI fails to assign an empty ramp to the whole window);
overlap-linear ramps no longer than the window; standard_uniform drops strided windows wider than
the video (ComfyUI leaves frames past the end in them) and covers the frames only they held; an overlap the schedule cannot step over is refused by the handler (`context_windows.py`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch


class ContextWindowError(ValueError):
    """Context-window settings that cannot describe windows (unknown schedule or fuse method,
    an overlap not smaller than the window, a dimension the latent does not have)."""


class ContextSchedules:
    """Schedule names, as ComfyUI spells them (the node's combo values)."""

    UNIFORM_LOOPED = "looped_uniform"
    UNIFORM_STANDARD = "standard_uniform"
    STATIC_STANDARD = "standard_static"
    BATCHED = "batched"


class ContextFuseMethods:
    """Fuse method names; LIST_STATIC is the nodes' combo order."""

    FLAT = "flat"
    PYRAMID = "pyramid"
    RELATIVE = "relative"
    OVERLAP_LINEAR = "overlap-linear"

    LIST = [PYRAMID, FLAT, OVERLAP_LINEAR]
    LIST_STATIC = [PYRAMID, RELATIVE, FLAT, OVERLAP_LINEAR]


@dataclass
class ContextSchedule:
    name: str
    func: Callable


@dataclass
class ContextFuseMethod:
    name: str
    func: Callable


def ordered_halving(val: int) -> float:
    """`val`'s 64 bits reversed, as a fraction of 2**64 (0, 1/2, 1/4, 3/4, 1/8, ... for 0, 1, 2, 3,
    4, ...): the van der Corput sequence, which spreads the uniform schedules' shifts evenly."""
    reversed_bits = int(format(val, "064b")[::-1], 2)
    return reversed_bits / (1 << 64)


def _uniform_windows(num_frames: int, handler: Any, end_offset: int) -> list[list[int]]:
    """Windows every `context_length * step - overlap` frames from a start shifted by the step's
    `ordered_halving`, for strides 1, 2, 4, ... (frames `step` apart), wrapping modulo the length."""
    length, overlap = handler.context_length, handler.context_overlap
    levels = min(handler.context_stride, math.ceil(math.log2(num_frames / length)) + 1)
    shift = ordered_halving(handler._step)
    windows = []
    for level in range(levels):
        step = 1 << level
        pad = int(round(num_frames * shift))
        start = int(shift * step) + pad
        for j in range(start, num_frames + pad + end_offset, length * step - overlap):
            windows.append([e % num_frames for e in range(j, j + length * step, step)])
    return windows


def create_windows_uniform_looped(num_frames: int, handler: Any, model_options: dict | None = None) -> list[list[int]]:
    """Uniform windows that may wrap from the last frame to the first; with `closed_loop` the
    schedule runs one overlap further, so the end is blended into the start."""
    if num_frames < handler.context_length:
        return [list(range(num_frames))]
    return _uniform_windows(num_frames, handler, 0 if handler.closed_loop else -handler.context_overlap)


def window_rolls_over(window: list[int], num_frames: int) -> tuple[bool, int]:
    """(True, position) of the first frame smaller than the one before it (the window wrapped)."""
    previous = -1
    for pos, value in enumerate(window):
        value %= num_frames
        if value < previous:
            return True, pos
        previous = value
    return False, -1


def shift_window_to_start(window: list[int], num_frames: int) -> None:
    """In place: the window's frames relative to its first one, so it starts at frame 0."""
    first = window[0]
    for i, value in enumerate(window):
        window[i] = (value - first + num_frames) % num_frames


def shift_window_to_end(window: list[int], num_frames: int) -> None:
    """In place: the window unwrapped and slid so that it ends on the last frame."""
    shift_window_to_start(window, num_frames)
    delta = num_frames - window[-1] - 1
    for i in range(len(window)):
        window[i] += delta


def create_windows_uniform_standard(num_frames: int, handler: Any, model_options: dict | None = None) -> list[list[int]]:
    """Uniform windows without wrapping: a window that would wrap is slid to end on the last
    frame (and, when the next window lacks the frame it wrapped to, a window starting there is
    added after it); windows equal to an earlier one are dropped."""
    if num_frames <= handler.context_length:
        return [list(range(num_frames))]
    windows = _uniform_windows(num_frames, handler, -handler.context_overlap)
    duplicates = []
    i = 0
    while i < len(windows):
        rolls, pos = window_rolls_over(windows[i], num_frames)
        if rolls:
            wrapped_to = windows[i][pos]  # not always 0 when frames are `step` apart
            shift_window_to_end(windows[i], num_frames)
            if wrapped_to not in windows[(i + 1) % len(windows)]:
                windows.insert(i + 1, list(range(wrapped_to, wrapped_to + handler.context_length)))
        if any(windows[i] == windows[j] for j in range(i)):
            duplicates.append(i)
        i += 1
    for i in reversed(duplicates):
        windows.pop(i)
    # A strided window wider than the video wraps more than once and cannot be slid into it
    # (ComfyUI keeps it, frames past the end, and fails indexing): dropped, and any frame only it
    # held gets a window of its own (else that frame's weights would sum to 0).
    windows = [w for w in windows if all(0 <= i < num_frames for i in w)]
    for frame in get_missing_indexes(windows, num_frames):
        if frame not in {i for w in windows for i in w}:
            start = min(frame, num_frames - handler.context_length)
            windows.append(list(range(start, start + handler.context_length)))
    return windows


def create_windows_static_standard(num_frames: int, handler: Any, model_options: dict | None = None) -> list[list[int]]:
    """The same windows every step: one every `context_length - overlap` frames, the last one
    moved back so it ends on the last frame."""
    length = handler.context_length
    if num_frames <= length:
        return [list(range(num_frames))]
    windows = []
    for start in range(0, num_frames, length - handler.context_overlap):
        if start + length >= num_frames:
            windows.append(list(range(num_frames - length, num_frames)))
            break
        windows.append(list(range(start, start + length)))
    return windows


def create_windows_batched(num_frames: int, handler: Any, model_options: dict | None = None) -> list[list[int]]:
    """Consecutive windows without overlap; the last one is shorter when the length does not divide."""
    length = handler.context_length
    if num_frames <= length:
        return [list(range(num_frames))]
    return [list(range(s, min(s + length, num_frames))) for s in range(0, num_frames, length)]


def create_windows_default(num_frames: int, handler: Any = None) -> list[list[int]]:
    """One window over every frame."""
    return [list(range(num_frames))]


CONTEXT_MAPPING: dict[str, Callable] = {
    ContextSchedules.UNIFORM_LOOPED: create_windows_uniform_looped,
    ContextSchedules.UNIFORM_STANDARD: create_windows_uniform_standard,
    ContextSchedules.STATIC_STANDARD: create_windows_static_standard,
    ContextSchedules.BATCHED: create_windows_batched,
}

# Schedules that step `context_length - overlap` frames (times the stride) from window to window.
OVERLAPPING_SCHEDULES = frozenset({ContextSchedules.UNIFORM_LOOPED, ContextSchedules.UNIFORM_STANDARD,
                                   ContextSchedules.STATIC_STANDARD})


def get_matching_context_schedule(context_schedule: str) -> ContextSchedule:
    func = CONTEXT_MAPPING.get(context_schedule)
    if func is None:
        raise ContextWindowError(f"Unknown context_schedule '{context_schedule}' "
                                 f"(known: {', '.join(CONTEXT_MAPPING)}).")
    return ContextSchedule(context_schedule, func)


def create_weights_flat(length: int, **kwargs: Any) -> list[float]:
    """Every frame of the window counts the same."""
    return [1.0] * length


def create_weights_pyramid(length: int, **kwargs: Any) -> list[float]:
    """1, 2, ... up to the middle and back down: frames near a window's edge count less
    (FreeNoise's weighted average). An even length has two equal middle weights."""
    half = length // 2
    rising = list(range(1, half + 1))
    middle = [half + 1] if length % 2 else []
    return [float(w) for w in rising + middle + rising[::-1]]


def create_weights_overlap_linear(length: int, full_length: int, idxs: list[int], handler: Any,
                                  **kwargs: Any) -> torch.Tensor:
    """1 everywhere except the `context_overlap` frames shared with a neighbour: a linear ramp from
    ~0 up to 1 at the start of every window but the first, and down at the end of every window but
    the last (the ramps end at 1e-37, not 0, so no frame's total weight is 0)."""
    weights = torch.ones(length)
    overlap = min(handler.context_overlap, length)  # a short last window (batched) takes what fits
    if overlap <= 0:
        return weights
    if min(idxs) > 0:
        weights[:overlap] = torch.linspace(1e-37, 1, overlap)
    if max(idxs) < full_length - 1:
        weights[-overlap:] = torch.linspace(1, 1e-37, overlap)
    return weights


FUSE_MAPPING: dict[str, Callable] = {
    ContextFuseMethods.FLAT: create_weights_flat,
    ContextFuseMethods.PYRAMID: create_weights_pyramid,
    ContextFuseMethods.RELATIVE: create_weights_pyramid,  # relative fuses by its own bias (context_windows.py)
    ContextFuseMethods.OVERLAP_LINEAR: create_weights_overlap_linear,
}


def get_matching_fuse_method(fuse_method: str) -> ContextFuseMethod:
    func = FUSE_MAPPING.get(fuse_method)
    if func is None:
        raise ContextWindowError(f"Unknown fuse_method '{fuse_method}' (known: {', '.join(FUSE_MAPPING)}).")
    return ContextFuseMethod(fuse_method, func)


def get_context_weights(length: int, full_length: int, idxs: list[int], handler: Any,
                        sigma: torch.Tensor | None = None) -> Any:
    """The handler's fuse weights for one window of `length` frames at positions `idxs`."""
    return handler.fuse_method.func(length, sigma=sigma, handler=handler, full_length=full_length, idxs=idxs)


def get_missing_indexes(windows: list[list[int]], num_frames: int) -> list[int]:
    """Frames no window covers."""
    covered = {v for w in windows for v in w}
    return [i for i in range(num_frames) if i not in covered]

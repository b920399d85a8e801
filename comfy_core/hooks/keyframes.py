"""Hook keyframes: a strength multiplier scheduled over the sampling percent.

After ComfyUI's comfy/hooks.py (`HookKeyframe`, `HookKeyframeGroup`, `InterpolationMethod`).
Keyframes here are values: a `HookKeyframeGroup` holds an immutable, start-sorted tuple, and
"adding" returns a new group. What ComfyUI keeps on the keyframe objects while sampling (current
keyframe, steps used, last sigma) lives in a per-run `KeyframeCursor` (comfy_core/hooks/cursor.py),
so a HOOKS value never changes when a run uses it.

The identity of a group object still matters, as in ComfyUI: hooks that share one group object
(every hook `SetHookKeyframes` touched) share one cursor during a run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import torch


@dataclass(frozen=True)
class HookKeyframe:
    """From `start_percent` on, hooks run at `strength` times their own strength.

    `guarantee_steps`: how many steps this keyframe is kept once reached, before a later one may
    take over (0: it can be skipped within one step).
    """

    strength: float
    start_percent: float = 0.0
    guarantee_steps: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "strength", float(self.strength))
        object.__setattr__(self, "start_percent", float(self.start_percent))
        object.__setattr__(self, "guarantee_steps", int(self.guarantee_steps))


class HookKeyframeGroup:
    """An ordered set of keyframes (stable by `start_percent`: equal starts keep insertion order)."""

    __slots__ = ("keyframes", "__weakref__")

    def __init__(self, keyframes: Iterable[HookKeyframe] = ()) -> None:
        # sorted() is stable: keyframes with the same start keep the order they were added in,
        # ComfyUI's get_sorted_list_via_attr rule.
        self.keyframes: tuple[HookKeyframe, ...] = tuple(sorted(keyframes, key=lambda k: k.start_percent))

    def added(self, keyframe: HookKeyframe) -> "HookKeyframeGroup":
        """A new group with `keyframe` added."""
        return HookKeyframeGroup(self.keyframes + (keyframe,))

    def clone(self) -> "HookKeyframeGroup":
        """A new group object with the same keyframes (a new cursor identity)."""
        return HookKeyframeGroup(self.keyframes)

    def is_empty(self) -> bool:
        return not self.keyframes

    def has_guarantee_steps(self) -> bool:
        return any(k.guarantee_steps > 0 for k in self.keyframes)

    @property
    def resting_strength(self) -> float:
        """The strength before a run moves on: the first keyframe's, 1.0 without keyframes."""
        return self.keyframes[0].strength if self.keyframes else 1.0

    def __len__(self) -> int:
        return len(self.keyframes)

    def __repr__(self) -> str:
        return f"HookKeyframeGroup({list(self.keyframes)!r})"


INTERPOLATIONS = ("linear", "ease_in", "ease_out", "ease_in_out")


def interpolate(num_from: float, num_to: float, length: int, method: str, reverse: bool = False) -> list[float]:
    """`length` values from `num_from` to `num_to` along `method` (ComfyUI's
    `InterpolationMethod.get_weights`), computed as it computes them: a float32 `torch.linspace`
    for the positions and float32 NumPy arithmetic for the easing curves."""
    if method == "linear":
        weights = torch.linspace(num_from, num_to, length).numpy()
    else:
        index = torch.linspace(0, 1, length).numpy()  # float32
        diff = num_to - num_from
        if method == "ease_in":
            weights = diff * np.power(index, 2) + num_from
        elif method == "ease_out":
            weights = diff * (1 - np.power(1 - index, 2)) + num_from
        elif method == "ease_in_out":
            weights = diff * ((1 - np.cos(index * np.pi)) / 2) + num_from
        else:
            raise ValueError(f"unknown interpolation method {method!r}; known: {list(INTERPOLATIONS)}")
    if reverse:
        weights = weights[::-1]
    return [float(w) for w in weights]


def keyframes_over_range(strengths: Iterable[float], start_percent: float, end_percent: float,
                         previous: HookKeyframeGroup | None = None) -> tuple[HookKeyframeGroup, list[tuple[float, float]]]:
    """Keyframes with `strengths` at evenly spaced percents from start to end; the first one
    guarantees 1 step, the others none (ComfyUI's CreateHookKeyframesInterpolated and
    CreateHookKeyframesFromFloats). Returns the group and the (percent, strength) pairs."""
    strengths = [float(s) for s in strengths]
    percents = interpolate(start_percent, end_percent, len(strengths), "linear")
    group = previous.clone() if previous is not None else HookKeyframeGroup()
    pairs = []
    for i, (percent, strength) in enumerate(zip(percents, strengths)):
        group = group.added(HookKeyframe(strength, percent, 1 if i == 0 else 0))
        pairs.append((percent, strength))
    return group, pairs

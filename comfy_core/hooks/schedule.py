"""The CLIP schedule of a hook group: which keyframe each hook is at over which percent range.

After ComfyUI's `HookGroup.get_hooks_for_clip_schedule` (comfy/hooks.py), which
`CLIP.encode_from_tokens_scheduled` (comfy/sd.py) encodes once per range of:

- each weight hook's keyframes become ranges `[start, next start)` where the strength changes
  (a later keyframe at the same start replaces an earlier one; one with the same strength
  extends the range), the last one running to 1.0; a hook without keyframes covers (0, 1) with
  no keyframe (multiplier 1);
- the boundaries of every hook's ranges, plus 0.0, cut (0, 1) into the encoding ranges, and each
  hook gets the keyframe of its first range overlapping each one (None where none does).
"""
from __future__ import annotations

import itertools
import math
from typing import Any

from comfy_core.hooks.hook import EnumHookType, HookGroup
from comfy_core.hooks.keyframes import HookKeyframe

Range = tuple[float, float]
Schedule = list[tuple[Range, list[tuple[Any, HookKeyframe | None]]]]


def _hook_ranges(keyframes: tuple[HookKeyframe, ...]) -> list[tuple[Range, HookKeyframe | None]]:
    if not keyframes:
        return [((0.0, 1.0), None)]
    ranges = []
    prev = keyframes[0]
    for kf in keyframes:
        if kf.start_percent > prev.start_percent and not math.isclose(kf.strength, prev.strength):
            ranges.append(((prev.start_percent, kf.start_percent), prev))
            prev = kf
        elif kf.start_percent == prev.start_percent:
            prev = kf
    if not math.isclose(prev.start_percent, 1.0):
        ranges.append(((prev.start_percent, 1.0), prev))
    return ranges


def clip_schedule(hooks: HookGroup) -> Schedule:
    """`[((start, end), [(hook, keyframe or None), ...]), ...]` in percent order."""
    per_hook = {hook: _hook_ranges(hook.hook_keyframe.keyframes) for hook in hooks.get_type(EnumHookType.Weight)}
    boundaries = sorted(set(itertools.chain.from_iterable(r for ranges in per_hook.values() for r, _ in ranges)) | {0.0})
    schedule: Schedule = []
    for lo, hi in zip(boundaries, boundaries[1:]):
        chosen = []
        for hook, ranges in per_hook.items():
            keyframe = next((kf for (a, b), kf in ranges if a < hi and b > lo), None)
            chosen.append((hook, keyframe))
        schedule.append(((lo, hi), chosen))
    return schedule

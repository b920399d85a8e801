"""Where a keyframe group stands during one sampling run.

After ComfyUI's comfy/hooks.py (`HookKeyframeGroup.prepare_current_keyframe`,
`HookKeyframe.get_effective_guarantee_steps`, `initialize_timesteps`): keyframe starts are turned
into sigmas once per run; at each new sigma the cursor moves on to the last keyframe that has
started, unless the current one still has guaranteed steps left, stopping at the first keyframe
that guarantees steps. Sigmas are compared as ComfyUI compares them (0-dim tensors against
Python floats, so in the sigma tensor's precision).
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.hooks.keyframes import HookKeyframe, HookKeyframeGroup


class KeyframeCursor:
    """The current keyframe of one `HookKeyframeGroup` object during one run."""

    def __init__(self, group: HookKeyframeGroup, model_sampling: Any) -> None:
        self.group = group
        self.starts = [model_sampling.percent_to_sigma(k.start_percent) for k in group.keyframes]
        self.index = 0
        self.used_steps = 0
        self._last_sigma: Any = -1.0
        self._moved_strength: float | None = None

    @property
    def current(self) -> HookKeyframe | None:
        return self.group.keyframes[self.index] if self.group.keyframes else None

    @property
    def strength(self) -> float:
        """The multiplier in force (1.0 for a group without keyframes)."""
        current = self.current
        return 1.0 if current is None else current.strength

    def _guarantee(self, index: int, max_sigma: torch.Tensor) -> int:
        # A keyframe that starts before the run's first sigma (a run that begins mid-schedule)
        # guarantees nothing.
        if self.starts[index] > max_sigma:
            return 0
        return self.group.keyframes[index].guarantee_steps

    def step(self, sigma: torch.Tensor, sample_sigmas: torch.Tensor) -> bool:
        """Advance for the step at `sigma` (0-dim); True when the strength changed."""
        if not self.group.keyframes or bool(sigma == self._last_sigma):
            return False
        max_sigma = torch.max(sample_sigmas)
        before_index, before_strength = self.index, self._moved_strength
        if self.used_steps >= self._guarantee(self.index, max_sigma):
            for i in range(self.index + 1, len(self.group.keyframes)):
                # Sigmas fall as sampling goes on: a keyframe has started when its sigma is >= ours.
                if not bool(self.starts[i] >= sigma):
                    break
                self.index = i
                self._moved_strength = self.group.keyframes[i].strength
                self.used_steps = 0
                if self._guarantee(i, max_sigma) > 0:
                    break
        self.used_steps += 1
        self._last_sigma = sigma
        return before_index != self.index and before_strength != self._moved_strength

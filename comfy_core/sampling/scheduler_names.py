"""ComfyUI's scheduler names, in ComfyUI's order (comfy/samplers.py `SCHEDULER_NAMES`),
importable without torch: the node layer declares its combos from them before torch loads.
`comfy_core.sampling.schedulers` (which imports torch) implements one schedule per name.
"""
from __future__ import annotations

from typing import Sequence

from comfy_core import extension_points

SCHEDULER_NAMES: tuple[str, ...] = (
    "simple", "sgm_uniform", "karras", "exponential", "ddim_uniform", "beta", "normal",
    "linear_quadratic", "kl_optimal",
)


def scheduler_names() -> Sequence[str]:
    """The scheduler names on offer now: the host's live list (ComfyUI's `SCHEDULER_NAMES`, also
    `KSampler.SCHEDULERS`, as its packs left it; comfy_core/extension_points.py) or ours."""
    names = extension_points.current().scheduler_names
    return SCHEDULER_NAMES if names is None else names

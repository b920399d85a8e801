"""ComfyUI's scheduler names, in ComfyUI's order (comfy/samplers.py `SCHEDULER_NAMES`),
importable without torch: the node layer declares its combos from them before torch loads.
`comfy_core.sampling.schedulers` (which imports torch) implements one schedule per name.
"""
from __future__ import annotations

SCHEDULER_NAMES: tuple[str, ...] = (
    "simple", "sgm_uniform", "karras", "exponential", "ddim_uniform", "beta", "normal",
    "linear_quadratic", "kl_optimal",
)

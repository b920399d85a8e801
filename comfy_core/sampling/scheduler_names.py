"""ComfyUI's scheduler names, in ComfyUI's order (comfy/samplers.py `SCHEDULER_NAMES`),
importable without torch: the node layer declares its combos from them before torch loads.
`comfy_core.sampling.schedulers` (which imports torch) implements one schedule per name.
"""
from __future__ import annotations

SCHEDULER_NAMES: tuple[str, ...] = (
    "simple", "sgm_uniform", "karras", "exponential", "ddim_uniform", "beta", "normal",
    "linear_quadratic", "kl_optimal",
)

# The live list: ComfyUI's `comfy.samplers.SCHEDULER_NAMES` (also `KSampler.SCHEDULERS`) is a
# mutable list packs extend, next to a handler in `SCHEDULER_HANDLERS`
# (comfy_core.sampling.schedulers); the compat surface hands out this object and the built-in
# nodes read their scheduler combos from it.
SCHEDULER_NAME_LIST: list[str] = list(SCHEDULER_NAMES)

"""ComfyUI's `comfy.samplers` names for node packs (compat/models.py); importable without torch."""
from typing import Any

from comfy_core.sampling.samplers.registry import KSAMPLER_NAMES as _KSAMPLER_NAMES
from compat.models import KSampler, calculate_sigmas, ksampler, runtime_class, sampler_object  # noqa: F401

SAMPLER_NAMES = list(KSampler.SAMPLERS)
SCHEDULER_NAMES = list(KSampler.SCHEDULERS)
KSAMPLER_NAMES = list(_KSAMPLER_NAMES)  # SAMPLER_NAMES less ddim, uni_pc, uni_pc_bh2, as in ComfyUI


def __getattr__(name: str) -> Any:
    # KSAMPLER and CFGGuider need torch: resolved when a pack first reads them.
    return runtime_class(name)

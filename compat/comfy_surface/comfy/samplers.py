"""ComfyUI's `comfy.samplers` names for node packs (compat/models.py)."""
from compat.models import KSampler, calculate_sigmas

SAMPLER_NAMES = list(KSampler.SAMPLERS)
SCHEDULER_NAMES = list(KSampler.SCHEDULERS)
KSAMPLER_NAMES = [n for n in SAMPLER_NAMES if n not in ("ddim", "uni_pc", "uni_pc_bh2")]

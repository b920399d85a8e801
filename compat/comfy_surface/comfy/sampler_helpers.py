"""ComfyUI's `comfy.sampler_helpers` for node packs (compat/samplers_helpers.py)."""
from compat.facade import facade

_HELPERS = "compat.samplers_helpers"

facade(__name__, {name: f"{_HELPERS}:{name}" for name in (
    "prepare_mask", "get_models_from_cond", "convert_cond", "get_additional_models", "cleanup_additional_models",
    "cleanup_models", "estimate_memory", "prepare_sampling",
)})

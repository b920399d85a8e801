"""ComfyUI's `comfy.sample` for node packs: `sample` (KSampler semantics), `sample_custom`,
`prepare_noise`, `fix_empty_latent_channels` over comfy_core.sampling (ksampler, noise).

`comfy.sample.sample = f` (Impact-Pack's error enhancer) sets the session's `sample_steps`
extension point, which the KSampler nodes call (nodes/sampling.py).
"""
import numpy as np  # noqa: F401  (ComfyUI's module exposes it; a pack reads comfy.sample.np)

from compat.facade import facade, point

_HELPERS = "compat.samplers_helpers"

facade(__name__, {
    "sample": point("sample_steps", "comfy_core.sampling.ksampler:sample"),
    "sample_custom": "comfy_core.sampling.ksampler:sample_custom",
    "prepare_noise": "compat.samplers_api:prepare_noise",
    "fix_empty_latent_channels": f"{_HELPERS}:fix_empty_latent_channels",
    "prepare_mask": f"{_HELPERS}:prepare_mask",
    "get_models_from_cond": f"{_HELPERS}:get_models_from_cond",
    "prepare_sampling": f"{_HELPERS}:sample_prepare_sampling",
    "cleanup_additional_models": f"{_HELPERS}:sample_cleanup_additional_models",
})

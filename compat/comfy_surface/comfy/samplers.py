"""ComfyUI's `comfy.samplers` for node packs: our sampler objects, guider, CFG, batching and
schedulers under ComfyUI's names (comfy_core.sampling; ComfyUI-signature adapters in
compat/samplers_api.py). Importable without torch: the name lists and the `KSampler` class are
torch-free, every other name resolves on first read (compat/facade.py).

What packs change here changes the active session's extension points (compat/samplers_points.py,
comfy_core/extension_points.py) and no module of comfy_core: the name lists are the session's live
ones, which the built-in nodes' combos read (`KSampler.SAMPLERS is SAMPLER_NAMES`, as in ComfyUI);
`SCHEDULER_HANDLERS[name] = ...` adds a schedule; assigning `sampling_function`, `cfg_function`,
`calc_cond_batch`, `sample` or `KSampler.sample` replaces it where our runtime calls it.
"""
import sys

from comfy.k_diffusion import sampling as k_diffusion_sampling  # noqa: F401  (ComfyUI's module name)
from compat.facade import facade, point
from compat.samplers_points import KSampler, SamplersModule  # noqa: F401  (torch-free; packs read KSampler.SAMPLERS)

_CORE = "comfy_core.sampling"
_API = "compat.samplers_api"

facade(__name__, {
    "SchedulerHandler": f"{_CORE}.schedulers:SchedulerHandler",
    "calculate_sigmas": f"{_CORE}.schedulers:calculate_sigmas",
    "sample": point("sample", f"{_CORE}.ksampler:guided_sample"),
    "CFGGuider": f"{_CORE}.guider:CFGGuider",
    "Sampler": f"{_CORE}.guider:Sampler",
    "KSAMPLER": f"{_CORE}.guider:SamplerObject",
    "KSamplerX0Inpaint": f"{_CORE}.guider:InpaintDenoiser",
    "ksampler": f"{_CORE}.guider:ksampler",
    "sampler_object": f"{_CORE}.guider:sampler_object",
    "sampling_function": point("sampling_function", f"{_CORE}.cfg:sampling_function"),
    "cfg_function": point("cfg_function", f"{_CORE}.cfg:cfg_function"),
    "calc_cond_batch": point("calc_cond_batch", f"{_CORE}.cond_batch:calc_cond_batch"),
    "calc_cond_uncond_batch": f"{_API}:calc_cond_uncond_batch",
    "get_area_and_mult": f"{_API}:get_area_and_mult",
    "can_concat_cond": f"{_API}:can_concat_cond",
    "cond_cat": f"{_API}:cond_cat",
    "resolve_areas_and_cond_masks_multidim": f"{_API}:resolve_areas_and_cond_masks_multidim",
    "resolve_areas_and_cond_masks": f"{_API}:resolve_areas_and_cond_masks",
    "create_cond_with_same_area_if_none": f"{_API}:create_cond_with_same_area_if_none",
    "calculate_start_end_timesteps": f"{_API}:calculate_start_end_timesteps",
    "pre_run_control": f"{_API}:pre_run_control",
    "apply_empty_x_to_equal_area": f"{_API}:apply_empty_x_to_equal_area",
    "encode_model_conds": f"{_API}:encode_model_conds",
    "process_conds": f"{_API}:process_conds",
    "get_mask_aabb": f"{_API}:get_mask_aabb",
    "simple_scheduler": f"{_API}:simple_scheduler",
    "ddim_scheduler": f"{_API}:ddim_scheduler",
    "normal_scheduler": f"{_API}:normal_scheduler",
    "beta_scheduler": f"{_API}:beta_scheduler",
    "linear_quadratic_schedule": f"{_API}:linear_quadratic_schedule",
    "kl_optimal_scheduler": f"{_API}:kl_optimal_scheduler",
    # today's hook helpers (guiders that replace CFGGuider.sample: ComfyUI-NAG)
    **{name: f"compat.samplers_helpers:{name}" for name in (
        "preprocess_conds_hooks", "filter_registered_hooks_on_conds", "get_total_hook_groups_in_conds",
        "cast_to_load_options")},
})
sys.modules[__name__].__class__ = SamplersModule

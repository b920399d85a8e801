"""ComfyUI's `comfy.ldm.modules.diffusionmodules.util` for node packs: the UNet's helpers and
latent-diffusion's DDPM / DDIM schedule helpers. `make_beta_schedule` computes with the schedules
our models' sampling tables are built with (comfy_core.models.beta_schedules), returning ComfyUI's
types (float64 tensors; "squaredcos_cap_v2" a NumPy array); `betas_for_alpha_bar`,
`make_ddim_timesteps`, `make_ddim_sampling_parameters` return NumPy arrays, as ComfyUI's."""
from compat.facade import facade

facade(__name__, {
    "timestep_embedding": "comfy_core.models.unet_blocks:timestep_embedding",
    "avg_pool_nd": "comfy_core.models.unet_blocks:avg_pool_nd",
    "AlphaBlender": "comfy_core.models.video_blocks:AlphaBlender",
    "zero_module": "compat.ldm_util:zero_module",
    "scale_module": "compat.ldm_util:scale_module",
    "conv_nd": "compat.ldm_util:conv_nd",
    "linear": "compat.ldm_util:linear",
    "normalization": "compat.ldm_util:normalization",
    "checkpoint": "compat.ldm_util:checkpoint",
    "mean_flat": "compat.ldm_util:mean_flat",
    "extract_into_tensor": "compat.ldm_util:extract_into_tensor",
    **{name: "compat.ldm_util:" + name for name in (
        "make_beta_schedule", "betas_for_alpha_bar", "make_ddim_timesteps", "make_ddim_sampling_parameters", "noise_like")},
})

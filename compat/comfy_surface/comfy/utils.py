"""ComfyUI's `comfy.utils` for node packs: every public name of ComfyUI 0.3.64's module but the
PixArt / AuraFlow name tables and the `MMDIT_MAP_*` sets (families this engine does not have).
`flux_to_diffusers` / `mmdit_to_diffusers` are the diffusers -> BFL / SAI key maps our Flux and
SD3 loaders and LoRA key maps use (comfy_core/families/flux/keys.py, comfy_core/families/sd3/keys.py).

Homes: compat/tensors.py (weight files, resizing, batch repeat), compat/files_utils.py (state
dicts, attribute paths, name tables, masks, progress switches), compat/progress.py
(`ProgressBar`), comfy_core/upscale/tiling.py (tiled scaling), comfy_core/models/latent_resize.py
(`bislerp`), comfy_core/image/resize.py (`lanczos`). Today's `convert_old_quants` (legacy
scaled-fp8 and `_quantization_metadata` files to per-layer `comfy_quant` tensors) is in
compat/files_utils.py, and so is today's `model_trange` (the samplers' step loop: tqdm's `trange`,
ComfyUI's display without dynamic VRAM). A pack assigning one of these names (`comfy.utils.PROGRESS_BAR_ENABLED =
False`, `comfy.utils.UNET_MAP_BASIC = ...`) assigns it there.
"""
from compat.facade import facade
from compat.progress import ProgressBar  # noqa: F401 -- torch-free; packs subclass it


# The tiling functions import torch when called, not here: packs import comfy.utils at start-up.
def get_tiled_scale_steps(width, height, tile_x, tile_y, overlap):
    from comfy_core.upscale.tiling import get_tiled_scale_steps as steps

    return steps(width, height, tile_x, tile_y, overlap)


def tiled_scale_multidim(samples, function, tile=(64, 64), overlap=8, upscale_amount=4, out_channels=3,
                         output_device="cpu", downscale=False, index_formulas=None, pbar=None):
    from comfy_core.upscale.tiling import tiled_scale_multidim as scale

    return scale(samples, function, tile, overlap, upscale_amount, out_channels, output_device, downscale,
                 index_formulas, pbar)


def tiled_scale(samples, function, tile_x=64, tile_y=64, overlap=8, upscale_amount=4, out_channels=3,
                output_device="cpu", pbar=None):
    from comfy_core.upscale.tiling import tiled_scale as scale

    return scale(samples, function, tile_x, tile_y, overlap, upscale_amount, out_channels, output_device, pbar)


_FILES = "compat.files_utils"
facade(__name__, {
    "load_torch_file": "compat.tensors:load_torch_file",
    "common_upscale": "compat.tensors:common_upscale",
    "repeat_to_batch_size": "compat.tensors:repeat_to_batch_size",
    "bislerp": "comfy_core.models.latent_resize:bislerp",
    "lanczos": "comfy_core.image.resize:lanczos",
    "flux_to_diffusers": "comfy_core.families.flux.keys:flux_to_diffusers",
    "mmdit_to_diffusers": "comfy_core.families.sd3.keys:mmdit_to_diffusers",
    # today's ComfyUI: a nested latent's parts packed into one [B, 1, N] tensor for the samplers, and back
    "pack_latents": "comfy_core.latent.nested:pack_latents",
    "unpack_latents": "comfy_core.latent.nested:unpack_latents",
    **{name: f"{_FILES}:{name}" for name in (
        "MMAP_TORCH_FILES", "DISABLE_MMAP", "ALWAYS_SAFE_LOAD", "PROGRESS_BAR_ENABLED", "PROGRESS_BAR_HOOK",
        "set_progress_bar_enabled", "set_progress_bar_global_hook", "save_torch_file", "calculate_parameters",
        "weight_dtype", "state_dict_key_replace", "state_dict_prefix_replace", "convert_sd_to", "safetensors_header",
        "transformers_convert", "clip_text_transformers_convert", "UNET_MAP_ATTENTIONS", "TRANSFORMER_BLOCKS",
        "UNET_MAP_RESNET", "UNET_MAP_BASIC", "unet_to_diffusers", "swap_scale_shift", "resize_to_batch_size",
        "resize_list_to_batch_size", "get_attr", "set_attr", "set_attr_param", "copy_to_param", "reshape_mask",
        "upscale_dit_mask", "convert_old_quants", "model_trange")},
})

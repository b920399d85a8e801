"""ComfyUI's `comfy.utils` for node packs (compat/progress.py, compat/tensors.py, comfy_core/upscale/tiling.py)."""
from compat.progress import ProgressBar
from compat.tensors import common_upscale, load_torch_file, repeat_to_batch_size

PROGRESS_BAR_ENABLED = True


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

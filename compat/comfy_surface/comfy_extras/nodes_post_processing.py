"""ComfyUI's `comfy_extras.nodes_post_processing`: the facades of its nodes (Blur, Sharpen,
Quantize, ImageScaleToTotalPixels, ...) plus `gaussian_kernel(kernel_size, sigma, device=None,
dtype=torch.float32)`, the blur kernel packs build their own filters with (compat/extras_helpers.py,
over comfy_core.image.filters)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {"gaussian_kernel": "compat.extras_helpers:gaussian_kernel"})

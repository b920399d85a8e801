"""ComfyUI's `comfy.k_diffusion.utils`: the tensor helper samplers use (`append_dims`)."""
from compat.facade import facade

facade(__name__, {"append_dims": "comfy_core.sampling.samplers.common:append_dims"})

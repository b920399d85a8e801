"""ComfyUI's `comfy.k_diffusion` package (k-diffusion's samplers as ComfyUI ships them): `sampling`
and `utils` are facades over comfy_core.sampling.samplers, `deis` over our DEIS coefficients.
Submodules are attributes on first read (ComfyUI's sampling.py imports `deis`, so packs read
`comfy.k_diffusion.deis` after importing only the package or `sampling`)."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)

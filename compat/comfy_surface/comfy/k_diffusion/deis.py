"""ComfyUI's `comfy.k_diffusion.deis` for node packs: the DEIS coefficient helpers (`edm2t`,
`t2alpha_fn`, `cal_intergrand`, `cal_poly`, `get_deis_coeff_list` with `deis_mode` "tab" or
"rhoab"), compat/kdiffusion_deis.py over our DEIS sampler's coefficients
(comfy_core/sampling/samplers/deis.py). As in ComfyUI, where `comfy.k_diffusion.sampling` imports
it, it is an attribute of `comfy.k_diffusion` (read on first use)."""
from compat.facade import facade

facade(__name__, {name: f"compat.kdiffusion_deis:{name}" for name in (
    "edm2t", "t2alpha_fn", "cal_intergrand", "cal_poly", "get_deis_coeff_list", "torch", "np")})

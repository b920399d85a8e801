"""ComfyUI's `comfy.k_diffusion` package (k-diffusion's samplers as ComfyUI ships them): `sampling`
and `utils` are facades over comfy_core.sampling.samplers."""

"""Sampler functions with k-diffusion's calling convention:

    sample_X(model, x, sigmas, extra_args=None, callback=None, disable=None, **options) -> x

`model(x, sigma[B], **extra_args) -> denoised` is a denoiser (the x0 prediction, CFG applied);
`x` starts as noise scaled to `sigmas[0]`; `callback({"x", "i", "sigma", "sigma_hat", "denoised"})`
runs once per step. Stochastic samplers take `noise_sampler(sigma, sigma_next) -> noise` and, when
none is given, seed their own from `extra_args["seed"]` exactly as ComfyUI does.
`comfy_core.sampling.samplers.registry` maps ComfyUI's sampler names to these functions.
"""

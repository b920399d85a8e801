"""Sampling: the model's sigma table, schedulers, k-diffusion-convention samplers, CFG, noise,
latent previews and the sampling driver. Import submodules directly; nothing happens at import."""

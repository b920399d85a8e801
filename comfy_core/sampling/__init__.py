"""Sampling: the model's sigma table, schedulers, k-diffusion-convention samplers, CFG, noise,
latent previews, guiders and the KSampler path (docs/dev/sampling.md). Import submodules directly;
nothing happens at import."""

"""Diffusion-model components in the original (CompVis LDM / Stability SGM) weight layout:
the UNet (`unet.py`), the KL autoencoder (`vae.py`), the denoiser wrapper (`diffusion.py`) and the
latent formats (`latent_formats.py`). Importing this package imports nothing heavy by itself."""

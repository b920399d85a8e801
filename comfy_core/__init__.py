"""The diffusion runtime: model families, loaders, UNet/VAE/text encoders, patchers, samplers.

Usable as a library without the server. Never imports `graph` or `web`.
"""

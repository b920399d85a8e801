"""ComfyUI's `comfy.ldm.models.autoencoder` for node packs: the config-built autoencoders
(`AutoencodingEngine`, `AutoencodingEngineLegacy`, `AutoencoderKL(ddconfig=, embed_dim=)`) and their
regularisers as adapters onto our VAE networks (compat/ldm_autoencoder.py; behaviour of today's
ComfyUI `comfy/ldm/models/autoencoder.py`). `isinstance(vae, AutoencoderKL)` also holds for the
KL autoencoders our loaders build."""
from compat.facade import facade

_A = "compat.ldm_autoencoder:"
facade(__name__, {name: _A + name for name in (
    "AbstractAutoencoder", "AutoencodingEngine", "AutoencodingEngineLegacy", "AutoencoderKL",
    "DiagonalGaussianRegularizer", "EmptyRegularizer")})

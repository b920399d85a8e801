"""ComfyUI's `comfy.ldm.modules.distributions.distributions`: the KL autoencoder's latent
distributions (compat/ldm_distributions.py)."""
from compat.facade import facade

_HOME = "compat.ldm_distributions"
facade(__name__, {name: f"{_HOME}:{name}" for name in (
    "AbstractDistribution", "DiracDistribution", "DiagonalGaussianDistribution", "normal_kl")})

"""ComfyUI's `comfy.ldm.modules.distributions.distributions`: the latent distributions of the
KL autoencoder (Kingma & Welling 2014, "Auto-Encoding Variational Bayes", arXiv 1312.6114),
after the latent-diffusion code base ComfyUI keeps them from (ldm/modules/distributions).

`DiagonalGaussianDistribution(parameters)` splits an encoder's moments `[B, 2C, ...]` into mean
and log-variance along channels (log-variance clamped to [-30, 20], as there), samples with the
reparameterisation `mean + std * eps`, and gives the KL divergence and negative log-likelihood
summed over the non-batch dimensions. Written here from the formulas.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch


class AbstractDistribution:
    """A distribution a model returns: `sample()` draws, `mode()` is its most likely value."""

    def sample(self) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__}.sample")

    def mode(self) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__}.mode")


class DiracDistribution(AbstractDistribution):
    """All mass on `value`: sampling and the mode both give it."""

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value

    def sample(self) -> torch.Tensor:
        return self.value

    def mode(self) -> torch.Tensor:
        return self.value


class DiagonalGaussianDistribution:
    """A Gaussian with diagonal covariance from `parameters` [B, 2C, ...] (mean, log-variance);
    `deterministic` makes it a point mass at the mean (zero variance)."""

    def __init__(self, parameters: torch.Tensor, deterministic: bool = False) -> None:
        self.parameters = parameters
        self.mean, logvar = torch.chunk(parameters, 2, dim=1)
        self.logvar = torch.clamp(logvar, -30.0, 20.0)
        self.deterministic = deterministic
        self.std = torch.exp(0.5 * self.logvar)
        self.var = torch.exp(self.logvar)
        if deterministic:
            self.var = self.std = torch.zeros_like(self.mean)

    def sample(self) -> torch.Tensor:
        """`mean + std * eps`, eps ~ N(0, I) from torch's global generator."""
        noise = torch.randn(self.mean.shape, device=self.parameters.device, dtype=self.mean.dtype)
        return self.mean + self.std * noise

    def kl(self, other: "DiagonalGaussianDistribution | None" = None) -> torch.Tensor:
        """KL(self || other) per batch item (other: the standard normal when None)."""
        if self.deterministic:
            return torch.tensor([0.0])
        dims = list(range(1, self.mean.dim()))
        if other is None:
            return 0.5 * torch.sum(self.mean.pow(2) + self.var - 1.0 - self.logvar, dim=dims)
        return 0.5 * torch.sum((self.mean - other.mean).pow(2) / other.var + self.var / other.var - 1.0
                               - self.logvar + other.logvar, dim=dims)

    def nll(self, sample: torch.Tensor, dims: Sequence[int] = (1, 2, 3)) -> torch.Tensor:
        """Negative log-likelihood of `sample`, summed over `dims`."""
        if self.deterministic:
            return torch.tensor([0.0])
        return 0.5 * torch.sum(math.log(2.0 * math.pi) + self.logvar + (sample - self.mean).pow(2) / self.var,
                               dim=list(dims))

    def mode(self) -> torch.Tensor:
        return self.mean


def normal_kl(mean1: Any, logvar1: Any, mean2: Any, logvar2: Any) -> torch.Tensor:
    """KL divergence between two Gaussians given by mean and log-variance, elementwise (scalars
    are broadcast; at least one argument must be a tensor)."""
    reference = next((x for x in (mean1, logvar1, mean2, logvar2) if isinstance(x, torch.Tensor)), None)
    if reference is None:
        raise TypeError("normal_kl: at least one argument must be a tensor")
    logvar1, logvar2 = (x if isinstance(x, torch.Tensor) else torch.tensor(x).to(reference) for x in (logvar1, logvar2))
    return 0.5 * (-1.0 + logvar2 - logvar1 + torch.exp(logvar1 - logvar2)
                  + (mean1 - mean2) ** 2 * torch.exp(-logvar2))

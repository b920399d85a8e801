"""A discrete-time diffusion model's noise schedule, seen through k-diffusion's sigma lens.

SD1.x, SD2.x and SDXL are DDPMs trained on 1 000 timesteps with "scaled-linear" betas
(Ho et al. 2020, "Denoising Diffusion Probabilistic Models"; the schedule is the latent-diffusion
one, Rombach et al. 2022). Samplers work in the variance-exploding parametrisation of Karras et
al. 2022 ("Elucidating the Design Space of Diffusion-Based Generative Models"): `x = x0 + sigma*n`,
`sigma_t = sqrt((1 - alpha_bar_t) / alpha_bar_t)`. This object owns the 1 000-entry sigma table and
the maps between sigma, timestep and the model's input/output (eps or v prediction, Salimans & Ho
2022, "Progressive Distillation", for v).

Behaviour follows ComfyUI's `comfy/model_sampling.py` (`ModelSamplingDiscrete` with `EPS` or
`V_PREDICTION`): the table is computed in float64 and stored in float32, `timestep(sigma)` is
the index of the nearest log-sigma (an integer, no interpolation), `sigma(t)` interpolates in
log-sigma, and a "max denoise" start scales the noise by `sqrt(1 + sigma^2)`. Written here from
those semantics; see `shared/reference/samplers.md` section 2.
"""
from __future__ import annotations

import math
from typing import Literal

import torch

Prediction = Literal["eps", "v"]

# ComfyUI forces the last alpha_bar to this value when rescaling for zero terminal SNR.
_ZSNR_LAST_ALPHA_BAR = 4.8973451890853435e-08


class ModelSamplingError(ValueError):
    """Bad arguments to `ModelSampling` (unknown prediction type, bad schedule)."""


def scaled_linear_betas(timesteps: int, linear_start: float, linear_end: float) -> torch.Tensor:
    """Latent-diffusion betas: `linspace(sqrt(start), sqrt(end), T)^2` in float64, shape [T]."""
    return torch.linspace(linear_start ** 0.5, linear_end ** 0.5, timesteps, dtype=torch.float64) ** 2


def rescale_zero_terminal_snr(sigmas: torch.Tensor) -> torch.Tensor:
    """Shift and scale sqrt(alpha_bar) so the last timestep has zero SNR.

    Lin et al. 2023, "Common Diffusion Noise Schedules and Sample Steps are Flawed", Algorithm 1.
    As ComfyUI does, the last alpha_bar is then set to a tiny positive value so sigma stays finite.
    """
    alphas_cumprod = 1.0 / (sigmas * sigmas + 1.0)  # [T]
    sqrt_ab = alphas_cumprod.sqrt()
    first, last = sqrt_ab[0].clone(), sqrt_ab[-1].clone()
    sqrt_ab = (sqrt_ab - last) * first / (first - last)
    alphas_cumprod = sqrt_ab ** 2
    alphas_cumprod[-1] = _ZSNR_LAST_ALPHA_BAR
    return ((1.0 - alphas_cumprod) / alphas_cumprod) ** 0.5


def _per_sample(sigma: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """View a [B] (or scalar) sigma as [B, 1, 1, ...] to broadcast against `like` [B, C, ...]."""
    sigma = torch.as_tensor(sigma, device=like.device)
    if sigma.ndim == 0:
        return sigma
    return sigma.reshape(sigma.shape[:1] + (1,) * (like.ndim - 1))


class ModelSampling:
    """Sigma table and input/output scaling of a discrete-timestep eps- or v-prediction model.

    Attributes: `sigmas` [T] float32 ascending (index t = timestep t), `log_sigmas` [T],
    `sigma_data` (1.0), `prediction` ("eps" | "v"), `num_timesteps`.
    """

    sigma_data: float = 1.0

    def __init__(self, prediction: Prediction = "eps", linear_start: float = 0.00085,
                 linear_end: float = 0.012, timesteps: int = 1000, *, zsnr: bool = False) -> None:
        if prediction not in ("eps", "v"):
            raise ModelSamplingError(f"ModelSampling: prediction must be 'eps' or 'v', got {prediction!r}")
        if timesteps < 2:
            raise ModelSamplingError(f"ModelSampling: timesteps must be >= 2, got {timesteps}")
        if not 0.0 < linear_start < linear_end < 1.0:
            raise ModelSamplingError(
                f"ModelSampling: need 0 < linear_start < linear_end < 1, got {linear_start}, {linear_end}")
        self.prediction: Prediction = prediction
        self.linear_start = linear_start
        self.linear_end = linear_end
        self.num_timesteps = timesteps
        self.zsnr = zsnr
        betas = scaled_linear_betas(timesteps, linear_start, linear_end)  # [T] float64
        alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        sigmas = ((1.0 - alphas_cumprod) / alphas_cumprod) ** 0.5
        if zsnr:
            sigmas = rescale_zero_terminal_snr(sigmas)
        self.set_sigmas(sigmas)

    def set_sigmas(self, sigmas: torch.Tensor) -> None:
        """Install a sigma table (ascending); stored as float32 like ComfyUI's buffers."""
        self.sigmas = sigmas.float()  # [T]
        self.log_sigmas = sigmas.log().float()  # [T]

    def __repr__(self) -> str:
        return (f"ModelSampling(prediction={self.prediction!r}, linear_start={self.linear_start}, "
                f"linear_end={self.linear_end}, timesteps={self.num_timesteps}, zsnr={self.zsnr})")

    # -- the table -----------------------------------------------------------------------------

    @property
    def sigma_min(self) -> torch.Tensor:
        """Smallest sigma (timestep 0), a 0-d float32 tensor as in ComfyUI."""
        return self.sigmas[0]

    @property
    def sigma_max(self) -> torch.Tensor:
        """Largest sigma (last timestep), a 0-d float32 tensor as in ComfyUI."""
        return self.sigmas[-1]

    def timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        """Index of the nearest log-sigma: the integer timestep the UNet receives (int64, sigma's shape)."""
        sigma = torch.as_tensor(sigma)
        log_sigma = sigma.log().to(self.log_sigmas.device)
        dists = log_sigma.reshape(1, -1) - self.log_sigmas[:, None]  # [T, N]
        return dists.abs().argmin(dim=0).view(sigma.shape).to(sigma.device)

    def sigma(self, timestep: torch.Tensor) -> torch.Tensor:
        """Sigma at a (possibly fractional) timestep, interpolating linearly in log-sigma."""
        timestep = torch.as_tensor(timestep)
        t = timestep.float().to(self.log_sigmas.device).clamp(0, self.num_timesteps - 1)
        low, high, w = t.floor().long(), t.ceil().long(), t.frac()
        log_sigma = (1 - w) * self.log_sigmas[low] + w * self.log_sigmas[high]
        return log_sigma.exp().to(timestep.device)

    def percent_to_sigma(self, percent: float) -> float:
        """Sigma at a fraction of the sampling process (0 = start, 1 = end), as ComfyUI's."""
        if percent <= 0.0:
            return 999999999.9
        if percent >= 1.0:
            return 0.0
        return self.sigma(torch.tensor((1.0 - percent) * 999.0)).item()

    # -- model input / output ------------------------------------------------------------------

    def calculate_input(self, sigma: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The UNet's input `x / sqrt(sigma^2 + sigma_data^2)` (x [B, C, H, W], sigma [B])."""
        s = _per_sample(sigma, x)
        return x / (s * s + self.sigma_data ** 2) ** 0.5

    def calculate_denoised(self, sigma: torch.Tensor, model_output: torch.Tensor,
                           x: torch.Tensor) -> torch.Tensor:
        """The x0 prediction from the network output (eps or v) at noisy input `x` and `sigma`."""
        s = _per_sample(sigma, model_output)
        if self.prediction == "eps":
            return x - model_output * s
        sd2 = self.sigma_data ** 2
        return x * sd2 / (s * s + sd2) - model_output * s * self.sigma_data / (s * s + sd2) ** 0.5

    def noise_scaling(self, sigma: torch.Tensor, noise: torch.Tensor, latent: torch.Tensor,
                      max_denoise: bool = False) -> torch.Tensor:
        """Starting point `latent + noise*sigma`, or `latent + noise*sqrt(1+sigma^2)` at a max-denoise start."""
        s = _per_sample(sigma, noise)
        scale = torch.sqrt(1.0 + s * s) if max_denoise else s
        return noise * scale + latent

    def inverse_noise_scaling(self, sigma: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
        """Undo `noise_scaling` at the end of sampling: the identity for eps and v models."""
        return latent

    def is_max_denoise(self, sigma: float | torch.Tensor) -> bool:
        """True when a start at `sigma` counts as pure noise: within rel 1e-5 of sigma_max, or above."""
        sigma_max = float(self.sigma_max)
        s = float(sigma)
        return math.isclose(sigma_max, s, rel_tol=1e-05) or s > sigma_max

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

The other parametrisations ComfyUI's `ModelSampling*` nodes install (comfy_extras/
nodes_model_advanced.py) live here too, each a table class combined with a prediction:
x0 / img-to-img and LCM (latent consistency distillation, Luo et al. 2023) on the discrete
table; rectified flow ("CONST", Esser et al. 2024, "Scaling Rectified Flow Transformers") with
SD3's time shift or Flux's resolution shift; continuous EDM and continuous V tables; Stable
Cascade's shifted cosine schedule. They are plain data objects (equal settings give equal
`cache_signature()`), installed on a MODEL as the "model_sampling" object patch.
"""
from __future__ import annotations

import abc
import enum
import hashlib
import math
from typing import Any, Literal

import torch

from comfy_core.models.beta_schedules import BetaScheduleError, make_beta_schedule, sigmas_from_betas

Prediction = Literal["eps", "v"]
# Every parametrisation the classes below understand (ComfyUI's EPS, V_PREDICTION, EDM, X0,
# IMG_TO_IMG, LCM, CONST and COSMOS_RFLOW mixins).
PREDICTIONS = ("eps", "v", "edm", "x0", "img_to_img", "lcm", "const", "cosmos_rflow")

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


def _table_digest(sigmas: torch.Tensor) -> str:
    """A short digest of a sigma table's float32 values (a cache signature part)."""
    return hashlib.blake2b(sigmas.detach().to("cpu", torch.float32).contiguous().numpy().tobytes(),
                           digest_size=16).hexdigest()


def _per_sample(sigma: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """View a [B] (or scalar) sigma as [B, 1, 1, ...] to broadcast against `like` [B, C, ...]."""
    sigma = torch.as_tensor(sigma, device=like.device)
    if sigma.ndim == 0:
        return sigma
    return sigma.reshape(sigma.shape[:1] + (1,) * (like.ndim - 1))


class Parametrization(abc.ABC):
    """The model's input/output maths for `self.prediction`, shared by every table class.

    After ComfyUI's comfy/model_sampling.py mixins (EPS, V_PREDICTION, EDM, X0, IMG_TO_IMG, CONST,
    COSMOS_RFLOW) and comfy_extras/nodes_model_advanced.py's LCM. Subclasses set `prediction`,
    `sigma_data` and `sigmas` ([T] ascending), and give `timestep(sigma)`.
    """

    prediction: str = "eps"
    sigma_data: float = 1.0
    # ComfyUI's CONST `noise_scale` (ModelNoiseScale: the absolute noise scale a flow model was
    # trained with, HiDream-O1's 8 / 7.6): the noise a flow start or re-noising adds is multiplied by it.
    noise_scale: float = 1.0
    sigmas: torch.Tensor

    @property
    def sigma_min(self) -> torch.Tensor:
        """Smallest sigma of the table, a 0-d tensor as in ComfyUI."""
        return self.sigmas[0]

    @property
    def sigma_max(self) -> torch.Tensor:
        """Largest sigma of the table, a 0-d tensor as in ComfyUI."""
        return self.sigmas[-1]

    @abc.abstractmethod
    def timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        """The network's timestep input for `sigma` (each table has its own mapping)."""

    def calculate_input(self, sigma: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The network's input: `x / sqrt(sigma^2 + sigma_data^2)` (x itself for flow and img-to-img)."""
        if self.prediction in ("const", "img_to_img"):
            return x
        if self.prediction == "cosmos_rflow":
            t = _per_sample(torch.as_tensor(sigma) / (torch.as_tensor(sigma) + 1), x)
            return x * (1.0 - t)
        s = _per_sample(sigma, x)
        return x / (s * s + self.sigma_data ** 2) ** 0.5

    def calculate_denoised(self, sigma: torch.Tensor, model_output: torch.Tensor,
                           x: torch.Tensor) -> torch.Tensor:
        """The x0 prediction from the network output at noisy input `x` and `sigma`."""
        p = self.prediction
        if p in ("x0", "img_to_img"):
            return model_output
        if p == "cosmos_rflow":
            t = _per_sample(torch.as_tensor(sigma) / (torch.as_tensor(sigma) + 1), model_output)
            return x * (1.0 - t) - model_output * t
        s = _per_sample(sigma, model_output)
        if p in ("eps", "const"):
            return x - model_output * s
        if p == "lcm":
            return self._lcm_denoised(sigma, s, model_output, x)
        sd2 = self.sigma_data ** 2
        skip = x * sd2 / (s * s + sd2)
        out = model_output * s * self.sigma_data / (s * s + sd2) ** 0.5
        return skip + out if p == "edm" else skip - out  # EDM's F-prediction has the opposite sign to v

    def _lcm_denoised(self, sigma: torch.Tensor, s: torch.Tensor, model_output: torch.Tensor,
                      x: torch.Tensor) -> torch.Tensor:
        # LCM's consistency boundary condition (Luo et al. 2023, eq. 9): c_skip/c_out of the
        # timestep scaled by 10 with sigma_data 0.5, mixing the eps-derived x0 with the input.
        ts = _per_sample(self.timestep(torch.as_tensor(sigma)), model_output) * 10.0
        x0 = x - model_output * s
        c_skip = 0.5 ** 2 / (ts ** 2 + 0.5 ** 2)
        c_out = ts / (ts ** 2 + 0.5 ** 2) ** 0.5
        return c_out * x0 + c_skip * x

    def noise_scaling(self, sigma: torch.Tensor, noise: torch.Tensor, latent: torch.Tensor,
                      max_denoise: bool = False) -> torch.Tensor:
        """Starting point: `latent + noise*sigma` (`* sqrt(1+sigma^2)` at a max-denoise start);
        the interpolation `sigma*noise + (1-sigma)*latent` for flow models."""
        s = _per_sample(sigma, noise)
        if self.prediction == "const":
            scaled = noise if self.noise_scale == 1.0 else noise * self.noise_scale
            return s * scaled + (1.0 - s) * latent
        if self.prediction == "cosmos_rflow":
            return noise * s + latent
        scale = torch.sqrt(1.0 + s * s) if max_denoise else s
        return noise * scale + latent

    def inverse_noise_scaling(self, sigma: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
        """Undo `noise_scaling` at the end of sampling: `latent / (1 - sigma)` for flow, else identity."""
        if self.prediction == "const":
            return latent / (1.0 - _per_sample(sigma, latent))
        return latent

    def is_max_denoise(self, sigma: float | torch.Tensor) -> bool:
        """True when a start at `sigma` counts as pure noise: within rel 1e-5 of sigma_max, or above."""
        sigma_max = float(self.sigma_max)
        s = float(sigma)
        return math.isclose(sigma_max, s, rel_tol=1e-05) or s > sigma_max


class ModelSampling(Parametrization):
    """Sigma table and input/output scaling of a discrete-timestep eps- or v-prediction model.

    Attributes: `sigmas` [T] float32 ascending (index t = timestep t), `log_sigmas` [T],
    `sigma_data` (1.0), `prediction` ("eps" | "v"), `num_timesteps`.
    """

    sigma_data: float = 1.0
    # What a checkpoint's table is used with; ModelSamplingDiscrete's variants widen this.
    allowed_predictions: tuple[str, ...] = ("eps", "v")

    def __init__(self, prediction: Prediction = "eps", linear_start: float = 0.00085,
                 linear_end: float = 0.012, timesteps: int = 1000, *, zsnr: bool = False,
                 beta_schedule: str = "linear", given_betas: Any = None, cosine_s: float = 8e-3) -> None:
        if prediction not in self.allowed_predictions:
            raise ModelSamplingError(
                f"{type(self).__name__}: prediction must be one of {self.allowed_predictions}, got {prediction!r}")
        if timesteps < 2:
            raise ModelSamplingError(f"ModelSampling: timesteps must be >= 2, got {timesteps}")
        if given_betas is None and not 0.0 < linear_start < linear_end < 1.0:
            raise ModelSamplingError(
                f"ModelSampling: need 0 < linear_start < linear_end < 1, got {linear_start}, {linear_end}")
        self.prediction: Prediction = prediction
        self.linear_start = linear_start
        self.linear_end = linear_end
        self.zsnr = zsnr
        # ComfyUI's ModelSamplingDiscrete._register_schedule: explicit betas win over a named
        # schedule (AnimateDiff's "sqrt_linear", ...); the table's length is the betas' length.
        self.beta_schedule = "given" if given_betas is not None else beta_schedule
        if given_betas is not None:
            sigmas = sigmas_from_betas(given_betas)
        elif beta_schedule == "linear":
            sigmas = sigmas_from_betas(scaled_linear_betas(timesteps, linear_start, linear_end))  # [T] float64
        else:
            try:
                sigmas = sigmas_from_betas(make_beta_schedule(beta_schedule, timesteps, linear_start, linear_end,
                                                              cosine_s))
            except BetaScheduleError as error:
                raise ModelSamplingError(str(error)) from error
        self.num_timesteps = int(sigmas.shape[0])
        if zsnr:
            sigmas = rescale_zero_terminal_snr(sigmas)
        self.set_sigmas(sigmas)

    def set_sigmas(self, sigmas: torch.Tensor) -> None:
        """Install a sigma table (ascending); stored as float32 like ComfyUI's buffers."""
        self.sigmas = sigmas.float()  # [T]
        self.log_sigmas = sigmas.log().float()  # [T]

    def cache_signature(self) -> tuple:
        # The table itself is in the signature: packs replace it (`set_sigmas`, given betas).
        return (type(self).__name__, self.prediction, self.linear_start, self.linear_end, self.num_timesteps,
                self.zsnr, getattr(self, "beta_schedule", "linear"), _table_digest(self.sigmas))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(prediction={self.prediction!r}, linear_start={self.linear_start}, "
                f"linear_end={self.linear_end}, timesteps={self.num_timesteps}, zsnr={self.zsnr})")

    # -- the table -----------------------------------------------------------------------------

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



# -- ComfyUI's ModelSampling* node variants ---------------------------------------------------

class DiscreteModelSampling(ModelSampling):
    """ModelSamplingDiscrete's table with any of its predictions: eps, v, x0, img_to_img
    (x0 output, raw input) — after comfy_extras/nodes_model_advanced.py."""

    allowed_predictions = ("eps", "v", "x0", "img_to_img")


class DistilledModelSampling(ModelSampling):
    """LCM's table: the discrete table sampled every `T / 50` steps from the last (ComfyUI's
    `ModelSamplingDiscreteDistilled`), with LCM's boundary-condition denoiser.

    `timestep(sigma)` maps the nearest of the 50 entries back to the original timestep
    (`i * skip + skip - 1`); `sigma(t)` inverts that, interpolating in log-sigma.
    """

    allowed_predictions = ("lcm",)
    original_timesteps = 50

    def __init__(self, prediction: str = "lcm", linear_start: float = 0.00085, linear_end: float = 0.012,
                 timesteps: int = 1000, *, zsnr: bool = False, **schedule: Any) -> None:
        super().__init__(prediction, linear_start, linear_end, timesteps, zsnr=zsnr,  # type: ignore[arg-type]
                         **schedule)
        self.skip_steps = self.num_timesteps // self.original_timesteps
        if self.skip_steps < 1:
            raise ModelSamplingError(f"DistilledModelSampling: need >= {self.original_timesteps} timesteps")
        full = self.sigmas
        # Entry 49 - k is full[T - 1 - k * skip]: the last timestep and every skip-th one below it.
        picks = torch.tensor([self.num_timesteps - 1 - k * self.skip_steps
                              for k in range(self.original_timesteps - 1, -1, -1)])
        self.set_sigmas(full[picks])

    def timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        index = super().timestep(sigma)
        return index * self.skip_steps + (self.skip_steps - 1)

    def sigma(self, timestep: torch.Tensor) -> torch.Tensor:
        timestep = torch.as_tensor(timestep)
        t = ((timestep.float().to(self.log_sigmas.device) - (self.skip_steps - 1)) / self.skip_steps).float()
        t = t.clamp(0, len(self.sigmas) - 1)
        low, high, w = t.floor().long(), t.ceil().long(), t.frac()
        log_sigma = (1 - w) * self.log_sigmas[low] + w * self.log_sigmas[high]
        return log_sigma.exp().to(timestep.device)


def time_snr_shift(shift: float, t: Any) -> Any:
    """SD3's timestep shift `shift*t / (1 + (shift-1)*t)` (Esser et al. 2024, eq. 23); t itself at shift 1."""
    if shift == 1.0:
        return t
    return shift * t / (1 + (shift - 1) * t)


def flux_time_shift(mu: float, t: Any) -> Any:
    """Flux's shift `e^mu / (e^mu + (1/t - 1))` (the sigma = 1 case of its exponential shift)."""
    return math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** 1.0)


def flux_resolution_shift(width: int, height: int, base_shift: float, max_shift: float) -> float:
    """ModelSamplingFlux's mu: linear in the number of 2x2 patches of the 8x latent, from
    `base_shift` at 256 patches to `max_shift` at 4096 (comfy_extras/nodes_model_advanced.py)."""
    slope = (max_shift - base_shift) / (4096 - 256)
    intercept = base_shift - slope * 256
    return (width * height / (8 * 8 * 2 * 2)) * slope + intercept


class _Continuous(Parametrization):
    """Shared percent mapping of tables that end at sigma 1 (flow models)."""

    def percent_to_sigma(self, percent: float) -> float:
        if percent <= 0.0:
            return 1.0
        if percent >= 1.0:
            return 0.0
        return float(self._shifted(1.0 - percent))

    @abc.abstractmethod
    def _shifted(self, t: float) -> float:
        """The table's sigma at flow time `t` in 0..1 (SD3's time shift, or Flux's)."""


class FlowModelSampling(_Continuous):
    """Rectified flow with SD3's time shift (ComfyUI `ModelSamplingDiscreteFlow` + CONST): sigmas
    `shift(i / T)` for i = 1..T, timestep `sigma * multiplier` (1000 for SD3, 1 for AuraFlow)."""

    def __init__(self, shift: float = 1.0, multiplier: float = 1000, timesteps: int = 1000) -> None:
        self.prediction = "const"
        self.shift = shift
        self.multiplier = multiplier
        self.num_timesteps = timesteps
        self.sigmas = self.sigma((torch.arange(1, timesteps + 1, 1) / timesteps) * multiplier)  # [T] float32

    def set_parameters(self, shift: float = 1.0, timesteps: int = 1000, multiplier: float = 1000) -> None:
        """ComfyUI's `ModelSamplingDiscreteFlow.set_parameters`: the table rebuilt in place, on this
        object (packs call it on `get_model_object("model_sampling")`, ModelSamplingSD3's way)."""
        FlowModelSampling.__init__(self, shift, multiplier, timesteps)

    def timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(sigma) * self.multiplier

    def sigma(self, timestep: torch.Tensor) -> torch.Tensor:
        return time_snr_shift(self.shift, torch.as_tensor(timestep) / self.multiplier)

    def _shifted(self, t: float) -> float:
        return time_snr_shift(self.shift, t)

    def cache_signature(self) -> tuple:
        return (type(self).__name__, self.shift, self.multiplier, self.num_timesteps, self.noise_scale)

    def __repr__(self) -> str:
        return f"FlowModelSampling(shift={self.shift}, multiplier={self.multiplier}, noise_scale={self.noise_scale})"


class FluxModelSampling(_Continuous):
    """Rectified flow with Flux's shift (ComfyUI `ModelSamplingFlux` + CONST): sigmas
    `flux_time_shift(shift, i / T)` for i = 1..T (T = 10 000), timestep = sigma."""

    def __init__(self, shift: float = 1.15, timesteps: int = 10000) -> None:
        self.prediction = "const"
        self.shift = shift
        self.num_timesteps = timesteps
        self.sigmas = self.sigma(torch.arange(1, timesteps + 1, 1) / timesteps)  # [T] float32

    def set_parameters(self, shift: float = 1.15, timesteps: int = 10000) -> None:
        """ComfyUI's `ModelSamplingFlux.set_parameters`: the table rebuilt in place."""
        FluxModelSampling.__init__(self, shift, timesteps)

    def timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(sigma)

    def sigma(self, timestep: torch.Tensor) -> torch.Tensor:
        return flux_time_shift(self.shift, torch.as_tensor(timestep))

    def _shifted(self, t: float) -> float:
        return flux_time_shift(self.shift, t)

    def cache_signature(self) -> tuple:
        return (type(self).__name__, self.shift, self.num_timesteps)

    def __repr__(self) -> str:
        return f"FluxModelSampling(shift={self.shift})"


class ContinuousEDMModelSampling(Parametrization):
    """A continuous-time table (ComfyUI `ModelSamplingContinuousEDM`): 1 000 sigmas log-spaced
    from sigma_min to sigma_max, timestep `0.25 * ln(sigma)` (Karras et al. 2022, c_noise)."""

    allowed_predictions: tuple[str, ...] = ("eps", "v", "edm")

    def __init__(self, prediction: str = "edm", sigma_min: float = 0.002, sigma_max: float = 120.0,
                 sigma_data: float = 1.0) -> None:
        if prediction not in self.allowed_predictions:
            raise ModelSamplingError(
                f"{type(self).__name__}: prediction must be one of {self.allowed_predictions}, got {prediction!r}")
        if not (sigma_min > 0 and sigma_max > 0):
            raise ModelSamplingError(f"{type(self).__name__}: sigma_min and sigma_max must be > 0, "
                                     f"got {sigma_min}, {sigma_max}")
        self.prediction = prediction
        self.sigma_data = sigma_data
        self.sigmas = torch.linspace(math.log(sigma_min), math.log(sigma_max), 1000).exp()  # [1000] float32
        self.log_sigmas = self.sigmas.log()

    def set_parameters(self, sigma_min: float, sigma_max: float, sigma_data: float) -> None:
        """ComfyUI's `ModelSamplingContinuousEDM.set_parameters`: the table rebuilt in place."""
        ContinuousEDMModelSampling.__init__(self, self.prediction, sigma_min, sigma_max, sigma_data)

    def timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        return 0.25 * torch.as_tensor(sigma).log()

    def sigma(self, timestep: torch.Tensor) -> torch.Tensor:
        return (torch.as_tensor(timestep) / 0.25).exp()

    def percent_to_sigma(self, percent: float) -> float:
        """Log-linear between sigma_max (0) and sigma_min (1)."""
        if percent <= 0.0:
            return 999999999.9
        if percent >= 1.0:
            return 0.0
        log_min = math.log(self.sigma_min)
        return math.exp((math.log(self.sigma_max) - log_min) * (1.0 - percent) + log_min)

    def cache_signature(self) -> tuple:
        return (type(self).__name__, self.prediction, float(self.sigmas[0]), float(self.sigmas[-1]), self.sigma_data)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(prediction={self.prediction!r}, sigma_min={float(self.sigma_min)}, "
                f"sigma_max={float(self.sigma_max)}, sigma_data={self.sigma_data})")


class ContinuousVModelSampling(ContinuousEDMModelSampling):
    """ComfyUI `ModelSamplingContinuousV`: the EDM table with timestep `atan(sigma) * 2 / pi`."""

    allowed_predictions = ("v",)

    def timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(sigma).atan() / math.pi * 2

    def sigma(self, timestep: torch.Tensor) -> torch.Tensor:
        return (torch.as_tensor(timestep) * math.pi / 2).tan()


class CosmosRFlowModelSampling(ContinuousEDMModelSampling):
    """ComfyUI `ModelSamplingCosmosRFlow`: the EDM table read as rectified flow, t = sigma / (sigma + 1)."""

    allowed_predictions = ("cosmos_rflow",)

    def timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        sigma = torch.as_tensor(sigma)
        return sigma / (sigma + 1)

    def sigma(self, timestep: torch.Tensor) -> torch.Tensor:
        timestep = torch.as_tensor(timestep)
        sigma_max = self.sigma_max
        return torch.where(timestep >= sigma_max / (sigma_max + 1), sigma_max, timestep / (1 - timestep))


class StableCascadeModelSampling(ModelSampling):
    """Stable Cascade's shifted cosine schedule (ComfyUI `StableCascadeSampling` + EPS;
    Nichol & Dhariwal 2021 cosine alphas, log-SNR shifted by `-2 ln(shift)`), clamped to
    alpha_bar in [1e-4, 0.9999]; a 10 000-entry table for the schedulers, timestep in [0, 1]."""

    allowed_predictions = ("eps",)

    def __init__(self, shift: float = 1.0, cosine_s: float = 8e-3) -> None:
        self.prediction = "eps"
        self.zsnr = False
        self.linear_start, self.linear_end = 0.00085, 0.012
        self.shift = shift
        self.cosine_s = torch.tensor(cosine_s)
        self._init_alpha_cumprod = torch.cos(self.cosine_s / (1 + self.cosine_s) * torch.pi * 0.5) ** 2
        self.num_timesteps = 10000
        # One entry at a time, as ComfyUI fills it: torch's vectorised log/sigmoid kernels can differ
        # from the scalar ones in the last bit, and the table must match ComfyUI's exactly.
        sigmas = torch.empty(self.num_timesteps, dtype=torch.float32)
        for x in range(self.num_timesteps):
            sigmas[x] = self.sigma((x + 1) / self.num_timesteps)
        self.set_sigmas(sigmas)

    def set_parameters(self, shift: float = 1.0, cosine_s: float = 8e-3) -> None:
        """ComfyUI's `StableCascadeSampling.set_parameters`: the table rebuilt in place."""
        StableCascadeModelSampling.__init__(self, shift, cosine_s)

    def sigma(self, timestep: Any) -> torch.Tensor:
        alpha_cumprod = torch.cos((timestep + self.cosine_s) / (1 + self.cosine_s) * torch.pi * 0.5) ** 2 \
            / self._init_alpha_cumprod
        if self.shift != 1.0:
            log_snr = (alpha_cumprod / (1 - alpha_cumprod)).log() + 2 * torch.log(1.0 / torch.tensor(self.shift))
            alpha_cumprod = log_snr.sigmoid()
        alpha_cumprod = alpha_cumprod.clamp(0.0001, 0.9999)
        return ((1 - alpha_cumprod) / alpha_cumprod) ** 0.5

    def timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        var = (1 / (torch.as_tensor(sigma) ** 2 + 1)).clamp(0, 1.0)
        s, min_var = self.cosine_s.to(var.device), self._init_alpha_cumprod.to(var.device)
        return (((var * min_var) ** 0.5).acos() / (torch.pi * 0.5)) * (1 + s) - s

    def percent_to_sigma(self, percent: float) -> float:
        if percent <= 0.0:
            return 999999999.9
        if percent >= 1.0:
            return 0.0
        return float(self.sigma(torch.tensor(1.0 - percent)))

    def cache_signature(self) -> tuple:
        return (type(self).__name__, self.shift, float(self.cosine_s))

    def __repr__(self) -> str:
        return f"StableCascadeModelSampling(shift={self.shift})"


class ModelType(enum.Enum):
    """ComfyUI's `comfy.model_base.ModelType`: a model's parametrisation, with ComfyUI's values."""

    EPS = 1
    V_PREDICTION = 2
    V_PREDICTION_EDM = 3
    STABLE_CASCADE = 4
    EDM = 5
    FLOW = 6
    V_PREDICTION_CONTINUOUS = 7
    FLUX = 8
    IMG_TO_IMG = 9
    FLOW_COSMOS = 10
    FLOW_AV = 13  # today's ComfyUI: packed audio-video flow latents (comfy.model_sampling.ModelSamplingAV)


def model_type_of(sampling: Any) -> ModelType:
    """The `ModelType` a sampling object stands for (ComfyUI's `model_sampling(config, type)`
    inverted: the table class and the prediction together)."""
    p = getattr(sampling, "prediction", "eps")
    if isinstance(sampling, StableCascadeModelSampling):
        return ModelType.STABLE_CASCADE
    if isinstance(sampling, FluxModelSampling):
        return ModelType.FLUX
    if isinstance(sampling, FlowModelSampling) or p == "const":
        return ModelType.FLOW
    if isinstance(sampling, CosmosRFlowModelSampling) or p == "cosmos_rflow":
        return ModelType.FLOW_COSMOS
    if isinstance(sampling, ContinuousVModelSampling):
        return ModelType.V_PREDICTION_CONTINUOUS
    if isinstance(sampling, ContinuousEDMModelSampling):
        return ModelType.V_PREDICTION_EDM if p == "v" else ModelType.EDM
    by_prediction = {"eps": ModelType.EPS, "v": ModelType.V_PREDICTION, "img_to_img": ModelType.IMG_TO_IMG,
                     "edm": ModelType.EDM, "x0": ModelType.EPS, "lcm": ModelType.EPS}
    if p not in by_prediction:
        raise ModelSamplingError(f"model_type_of: no ComfyUI ModelType for prediction {p!r}")
    return by_prediction[p]

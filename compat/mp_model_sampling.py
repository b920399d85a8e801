"""ComfyUI's `comfy.model_sampling` classes over ours (comfy_core/models/model_sampling.py).

ComfyUI splits a sampling object into a table class (`ModelSamplingDiscrete`, ...) and a
prediction mixin (`EPS`, `V_PREDICTION`, ...) that packs combine:
`class ModelSamplingAdvanced(comfy.model_sampling.ModelSamplingDiscrete, comfy.model_sampling.EPS)`,
built from a model config (`ModelSamplingAdvanced(model.model.model_config)`) and installed with
`add_object_patch("model_sampling", ...)`. Here our mixins name a prediction, and each table
class is one of our table classes whose ComfyUI constructor `(model_config=None)` reads
`model_config.sampling_settings` and takes its prediction from the mixin in the class's MRO,
so the object a pack builds is one our sampler runs.

As in ComfyUI, whose tables define no prediction maths, a pack's own mixin (or the pack's class
itself) with its own `calculate_denoised` / `calculate_input` / `noise_scaling` /
`inverse_noise_scaling` is what answers in the combined class (`_ComfyTable`); with our mixins,
our table does the maths of the named prediction.

As ComfyUI's (`class ModelSamplingDiscrete(torch.nn.Module)`, ...), every table class here is a
`torch.nn.Module` whose `sigmas` / `log_sigmas` are buffers (`_SamplingModule`), so a pack's
subclass may `self.register_buffer("alphas_cumprod", ...)` after `super().__init__(model_config)`
(ComfyUI-TCD's `ModelSamplingDiscreteDistilledTCD`), move it with `.to(device)` and read its
`state_dict()`. `nn.Module` comes last in their MRO: our tables' own methods, `__init__` chains
and `__repr__` answer first, and each constructor runs `nn.Module.__init__` before anything is
set. The engine's classes (comfy_core/models/model_sampling.py) stay plain objects.
"""
from __future__ import annotations

import copy
from typing import Any

import torch

from comfy_core.models import model_sampling as ms
from comfy_core.models.model_sampling import ModelSamplingError, ModelType  # noqa: F401


def time_snr_shift(alpha: float, t: Any) -> Any:
    """SD3's timestep shift `alpha*t / (1 + (alpha-1)*t)` (comfy_core's, ComfyUI's parameter names)."""
    return ms.time_snr_shift(alpha, t)


def flux_time_shift(mu: float, sigma: float, t: Any) -> Any:
    """Flux's exponential shift `e^mu / (e^mu + (1/t - 1)^sigma)` (Esser et al. 2024; ComfyUI
    calls it with sigma 1, comfy_core's `flux_time_shift`)."""
    import math

    return math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** sigma)


def reshape_sigma(sigma: torch.Tensor, noise_dim: int) -> torch.Tensor:
    """`sigma` viewed to broadcast against a noise tensor of `noise_dim` dimensions: a 0-d view
    of a single value, else [B, 1, 1, ...]."""
    if sigma.nelement() == 1:
        return sigma.view(())
    return sigma.view(sigma.shape[:1] + (1,) * (noise_dim - 1))


class _PredictionView:
    """The object `obj` seen with another prediction: what a mixin's maths reads (`sigma_data`,
    `timestep`, ...) comes from `obj`, else from the parametrisation's defaults."""

    def __init__(self, obj: Any, prediction: str) -> None:
        self._obj = obj
        self.prediction = prediction

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._obj, name)
        except AttributeError:
            return getattr(ms.Parametrization, name)


class _Prediction:
    """Base of ComfyUI's prediction mixins. Each names a prediction, and has ComfyUI's maths
    methods for it (the parametrisation's, comfy_core/models/model_sampling.py), so a pack's own
    mixin may call `super().calculate_denoised(...)`; in a class combined with one of our table
    classes (listed first, as ComfyUI's classes are), the table's methods answer."""

    prediction = "eps"

    def _maths(self) -> Any:
        return _PredictionView(self, _prediction(type(self), "eps"))

    def calculate_input(self, sigma: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return ms.Parametrization.calculate_input(self._maths(), sigma, noise)

    def calculate_denoised(self, sigma: torch.Tensor, model_output: torch.Tensor,
                           model_input: torch.Tensor) -> torch.Tensor:
        return ms.Parametrization.calculate_denoised(self._maths(), sigma, model_output, model_input)

    def noise_scaling(self, sigma: torch.Tensor, noise: torch.Tensor, latent_image: torch.Tensor,
                      max_denoise: bool = False) -> torch.Tensor:
        return ms.Parametrization.noise_scaling(self._maths(), sigma, noise, latent_image, max_denoise)

    def inverse_noise_scaling(self, sigma: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
        return ms.Parametrization.inverse_noise_scaling(self._maths(), sigma, latent)


class EPS(_Prediction):
    prediction = "eps"


class V_PREDICTION(EPS):
    prediction = "v"


class EDM(V_PREDICTION):
    prediction = "edm"


class X0(EPS):
    prediction = "x0"


class IMG_TO_IMG(X0):
    prediction = "img_to_img"


class CONST(_Prediction):
    prediction = "const"


class COSMOS_RFLOW(_Prediction):
    prediction = "cosmos_rflow"


def _prediction(cls: type, default: str) -> str:
    """The prediction the first ComfyUI mixin in `cls`'s MRO names (ComfyUI's method lookup)."""
    for klass in cls.__mro__:
        if issubclass(klass, _Prediction) and "prediction" in klass.__dict__:
            return klass.__dict__["prediction"]
    return default


def _settings(model_config: Any) -> dict:
    return dict(getattr(model_config, "sampling_settings", None) or {})


class LCM(EPS):
    """ComfyUI's `comfy_extras.nodes_model_advanced.LCM`: eps output read through LCM's
    consistency boundary condition (comfy_core/models/model_sampling.py `_lcm_denoised`)."""

    prediction = "lcm"


_MATHS = ("calculate_input", "calculate_denoised", "noise_scaling", "inverse_noise_scaling")


def _ours(klass: type) -> bool:
    return klass.__module__ == __name__ or klass.__module__.startswith("comfy_core.")


class _SamplingModule(torch.nn.Module):
    """The `torch.nn.Module` side of the table classes below (last in their MRO). As ComfyUI's
    `set_sigmas` / `set_parameters` do with `register_buffer`, a tensor assigned to `sigmas` or
    `log_sigmas` (our tables assign them) becomes a buffer, so `.to()` moves it and
    `state_dict()` lists it; other attributes behave as `nn.Module` makes them (a tensor set on
    a registered buffer's name replaces the buffer)."""

    _BUFFER_NAMES = ("sigmas", "log_sigmas")

    def __setattr__(self, name: str, value: Any) -> None:
        buffers = self.__dict__.get("_buffers")
        if (buffers is not None and name in self._BUFFER_NAMES and name not in buffers
                and isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)):
            self.__dict__.pop(name, None)
            self.register_buffer(name, value)
            return
        super().__setattr__(name, value)

    def __copy__(self) -> "_SamplingModule":
        """A shallow copy (nodes copy a sampling object and change one setting, ModelNoiseScale)
        with its own buffer and parameter tables, so installing a table on the copy
        (`set_sigmas`) leaves the original's alone; the tensors themselves are shared."""
        new = self.__class__.__new__(self.__class__)
        new.__dict__.update(self.__dict__)
        for name in ("_buffers", "_parameters", "_modules", "_non_persistent_buffers_set"):
            if name in self.__dict__:
                new.__dict__[name] = copy.copy(self.__dict__[name])
        return new


class _ComfyTable:
    """Base of the table classes below. ComfyUI's tables define no prediction maths: in
    `class X(ModelSamplingDiscrete, PackEPS)` the maths methods come from the mixin. Ours do, so
    for a class combined with a pack's class, each maths method is taken, as ComfyUI's method
    lookup finds it, from the first class of the MRO that is not one of our tables: a pack's
    definition is set on the class; our mixins leave our table's maths."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in _MATHS:
            for klass in cls.__mro__:
                if name not in klass.__dict__ or (_ours(klass) and issubclass(klass, ms.Parametrization)):
                    continue
                if not _ours(klass) and klass is not cls:
                    setattr(cls, name, klass.__dict__[name])
                break


class ModelSamplingDiscrete(_ComfyTable, ms.DiscreteModelSampling, _SamplingModule):
    """ComfyUI's `ModelSamplingDiscrete(model_config=None, zsnr=None)`: the table of the config's
    `sampling_settings` (`beta_schedule`, `linear_start`, `linear_end`, `timesteps`, `zsnr`)."""

    allowed_predictions = ("eps", "v", "x0", "img_to_img", "lcm")

    def __init__(self, model_config: Any = None, zsnr: bool | None = None) -> None:
        torch.nn.Module.__init__(self)
        settings = _settings(model_config)
        if zsnr is None:
            zsnr = settings.get("zsnr", False)
        # As ComfyUI: the config's schedule, never its `given_betas` (packs pass those to
        # `_register_schedule` themselves, as AnimateDiff-Evolved does).
        self._register_schedule(given_betas=None, beta_schedule=settings.get("beta_schedule", "linear"),
                                timesteps=settings.get("timesteps", 1000),
                                linear_start=settings.get("linear_start", 0.00085),
                                linear_end=settings.get("linear_end", 0.012), cosine_s=8e-3, zsnr=bool(zsnr))

    def _register_schedule(self, given_betas: Any = None, beta_schedule: str = "linear", timesteps: int = 1000,
                           linear_start: float = 1e-4, linear_end: float = 2e-2, cosine_s: float = 8e-3,
                           zsnr: bool = False) -> None:
        """Build the table from betas (ComfyUI's method and defaults; packs call it to change the
        schedule): `given_betas` [T] if given, else the named `beta_schedule`."""
        if given_betas is not None and not hasattr(given_betas, "shape"):
            given_betas = torch.tensor(list(given_betas), dtype=torch.float64)
        super().__init__(_prediction(type(self), "eps"), linear_start, linear_end, timesteps, zsnr=bool(zsnr),
                         beta_schedule=beta_schedule, given_betas=given_betas, cosine_s=cosine_s)


class ModelSamplingDiscreteDistilled(ModelSamplingDiscrete, ms.DistilledModelSampling):
    """ComfyUI's `comfy_extras.nodes_model_advanced.ModelSamplingDiscreteDistilled`: the discrete
    table kept at `original_timesteps` (50) evenly spaced entries from the last, for LCM models.
    A subclass may set `self.original_timesteps` before calling this constructor
    (AnimateDiff-Evolved's 25- and 100-step variants)."""

    allowed_predictions = ("eps", "v", "x0", "img_to_img", "lcm")
    original_timesteps = 50


class ModelSamplingContinuousEDM(_ComfyTable, ms.ContinuousEDMModelSampling, _SamplingModule):
    """ComfyUI's `ModelSamplingContinuousEDM(model_config=None)`."""

    def __init__(self, model_config: Any = None) -> None:
        torch.nn.Module.__init__(self)
        s = _settings(model_config)
        super().__init__(_prediction(type(self), "edm"), s.get("sigma_min", 0.002), s.get("sigma_max", 120.0),
                         s.get("sigma_data", 1.0))


class ModelSamplingContinuousV(_ComfyTable, ms.ContinuousVModelSampling, _SamplingModule):
    """ComfyUI's `ModelSamplingContinuousV(model_config=None)`."""

    def __init__(self, model_config: Any = None) -> None:
        torch.nn.Module.__init__(self)
        s = _settings(model_config)
        super().__init__(_prediction(type(self), "v"), s.get("sigma_min", 0.002), s.get("sigma_max", 120.0),
                         s.get("sigma_data", 1.0))


class ModelSamplingDiscreteFlow(_ComfyTable, ms.FlowModelSampling, _SamplingModule):
    """ComfyUI's `ModelSamplingDiscreteFlow(model_config=None)` (with CONST)."""

    def __init__(self, model_config: Any = None) -> None:
        torch.nn.Module.__init__(self)
        s = _settings(model_config)
        super().__init__(s.get("shift", 1.0), s.get("multiplier", 1000))


class ModelSamplingAV(ModelSamplingDiscreteFlow):
    """Today's ComfyUI `ModelSamplingAV(model_config=None)` (comfy/model_sampling.py; with CONST it
    is `model_sampling(config, ModelType.FLOW_AV)`): the discrete flow table of packed audio-video
    latents whose audio stream has a flow shift of its own. `audio_shift` comes from the config's
    `sampling_settings` (None: the video's); `set_parameters(shift, audio_shift=None, timesteps,
    multiplier)` rebuilds the table as the flow table's does; `audio_scale` is `shift /
    audio_shift` (1.0 without an audio shift), what the audio part of the latent is scaled by."""

    def __init__(self, model_config: Any = None) -> None:
        super().__init__(model_config)
        self.audio_shift = _settings(model_config).get("audio_shift", None)

    def set_parameters(self, shift: float = 1.0, audio_shift: Any = None, timesteps: int = 1000,  # type: ignore[override]
                       multiplier: float = 1000) -> None:
        self.audio_shift = audio_shift
        super().set_parameters(shift=shift, timesteps=timesteps, multiplier=multiplier)

    @property
    def audio_scale(self) -> float:
        if self.audio_shift is None:
            return 1.0
        return self.shift / self.audio_shift

    def cache_signature(self) -> tuple:
        return super().cache_signature() + (self.audio_shift,)


class ModelSamplingFlux(_ComfyTable, ms.FluxModelSampling, _SamplingModule):
    """ComfyUI's `ModelSamplingFlux(model_config=None)` (with CONST)."""

    def __init__(self, model_config: Any = None) -> None:
        torch.nn.Module.__init__(self)
        super().__init__(_settings(model_config).get("shift", 1.15))


class StableCascadeSampling(_ComfyTable, ms.StableCascadeModelSampling, _SamplingModule):
    """ComfyUI's `StableCascadeSampling(model_config=None)`."""

    def __init__(self, model_config: Any = None) -> None:
        torch.nn.Module.__init__(self)
        super().__init__(_settings(model_config).get("shift", 1.0))


_BY_TYPE = {
    ModelType.EPS: (ModelSamplingDiscrete, EPS), ModelType.V_PREDICTION: (ModelSamplingDiscrete, V_PREDICTION),
    ModelType.V_PREDICTION_EDM: (ModelSamplingContinuousEDM, V_PREDICTION),
    ModelType.FLOW: (ModelSamplingDiscreteFlow, CONST), ModelType.STABLE_CASCADE: (StableCascadeSampling, EPS),
    ModelType.EDM: (ModelSamplingContinuousEDM, EDM),
    ModelType.V_PREDICTION_CONTINUOUS: (ModelSamplingContinuousV, V_PREDICTION),
    ModelType.FLUX: (ModelSamplingFlux, CONST), ModelType.IMG_TO_IMG: (ModelSamplingDiscrete, IMG_TO_IMG),
    ModelType.FLOW_AV: (ModelSamplingAV, CONST),
}


def sampling_for_type(model_config: Any, model_type: ModelType) -> Any:
    """ComfyUI's `comfy.model_base.model_sampling(config, type)`: table + mixin for the type."""
    if model_type not in _BY_TYPE:
        raise ModelSamplingError(f"model_sampling: ModelType {model_type} is not supported here")
    table, mixin = _BY_TYPE[model_type]
    return type("ModelSampling", (table, mixin), {})(model_config)

"""ComfyUI 0.3.64's comfy_extras/nodes_model_advanced.py: the ModelSampling* nodes, which give a
MODEL another noise parametrisation (discrete eps / v / LCM / x0 / img-to-img with optional zero
terminal SNR, rectified flow with SD3, AuraFlow or Flux shift, continuous EDM and V tables,
Stable Cascade's schedule), and RescaleCFG; today's ModelNoiseScale (a flow model's noise scale).

Each returns a clone carrying the new `comfy_core.models.model_sampling` object as the
"model_sampling" object patch (ComfyUI's `add_object_patch`): the shared diffusion model is never
touched, the sampler and the UNet wrapper see the patch while the clone is applied.
"""
from __future__ import annotations

import math
from typing import Any

from graph.native import MAX_RESOLUTION, Boolean, Combo, Float, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up).

MODULE = "comfy_extras.nodes_model_advanced"
CATEGORY = "advanced/model"
DISCRETE_SAMPLINGS = ["eps", "v_prediction", "lcm", "x0", "img_to_img"]
EDM_SAMPLINGS = ["v_prediction", "edm", "edm_playground_v2.5", "eps", "cosmos_rflow"]


def _number(value: Any, input_name: str, low: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
            or (low is not None and value < low):
        raise NodeInputError(input_name, "a FLOAT" + (f" >= {low}" if low is not None else ""), repr(value))
    return float(value)


def _choice(value: Any, input_name: str, options: list[str]) -> str:
    if value not in options:
        raise NodeInputError(input_name, f"one of {options}", repr(value))
    return value


def _with_sampling(model: Any, model_sampling: Any) -> tuple[Any]:
    patched = model.clone()
    patched.add_object_patch("model_sampling", model_sampling)
    return (patched,)


def _base_schedule(model: Any) -> dict:
    """The checkpoint's DDPM schedule (ComfyUI reads the model config's sampling settings, not any
    patched sampling): from the family's sampling policy, else the unpatched model's table."""
    policy = getattr(getattr(model.model, "family", None), "sampling", None)
    source = policy if policy is not None else model.model.model_sampling
    return {"linear_start": getattr(source, "linear_start", 0.00085),
            "linear_end": getattr(source, "linear_end", 0.012),
            "timesteps": getattr(source, "timesteps", getattr(source, "num_timesteps", 1000))}


@node("ModelSamplingDiscrete", category=CATEGORY, python_module=MODULE,
      inputs=[Input("model", "MODEL"), Combo("sampling", DISCRETE_SAMPLINGS), Boolean("zsnr", default=False)],
      outputs=[Output("MODEL")])
def model_sampling_discrete(model: Any, sampling: str, zsnr: bool) -> tuple[Any]:
    """The checkpoint's discrete schedule (zero terminal SNR if `zsnr`) with another prediction;
    "lcm" uses LCM's 50-step distilled table and boundary-condition denoiser."""
    from comfy_core.models.model_sampling import DiscreteModelSampling, DistilledModelSampling

    model = checks.model(model)
    sampling = _choice(sampling, "sampling", DISCRETE_SAMPLINGS)
    schedule = _base_schedule(model)
    if sampling == "lcm":
        table = DistilledModelSampling("lcm", zsnr=bool(zsnr), **schedule)
    else:
        prediction = "v" if sampling == "v_prediction" else sampling
        table = DiscreteModelSampling(prediction, zsnr=bool(zsnr), **schedule)  # type: ignore[arg-type]
    return _with_sampling(model, table)


@node("ModelSamplingStableCascade", category=CATEGORY, python_module=MODULE,
      inputs=[Input("model", "MODEL"), Float("shift", default=2.0, min=0.0, max=100.0, step=0.01)],
      outputs=[Output("MODEL")])
def model_sampling_stable_cascade(model: Any, shift: float) -> tuple[Any]:
    """Stable Cascade's cosine schedule with its log-SNR shifted by `-2 ln(shift)`."""
    from comfy_core.models.model_sampling import StableCascadeModelSampling

    model = checks.model(model)
    shift = _number(shift, "shift")
    if shift <= 0:
        raise NodeInputError("shift", "a FLOAT > 0 (the log-SNR shift is -2 ln(shift))", repr(shift))
    return _with_sampling(model, StableCascadeModelSampling(shift))


def _flow(model: Any, shift: Any, multiplier: float) -> tuple[Any]:
    from comfy_core.models.model_sampling import FlowModelSampling

    model = checks.model(model)
    sampling = FlowModelSampling(_number(shift, "shift"), multiplier)
    # today's ComfyUI keeps a noise scale set before (ModelNoiseScale)
    sampling.noise_scale = float(getattr(model.get_model_object("model_sampling"), "noise_scale", 1.0))
    return _with_sampling(model, sampling)


@node("ModelSamplingSD3", category=CATEGORY, python_module=MODULE,
      inputs=[Input("model", "MODEL"), Float("shift", default=3.0, min=0.0, max=100.0, step=0.01)],
      outputs=[Output("MODEL")])
def model_sampling_sd3(model: Any, shift: float) -> tuple[Any]:
    """Rectified flow with SD3's time shift; the network's timestep is sigma * 1000."""
    return _flow(model, shift, 1000)


@node("ModelNoiseScale", category="model/patch", python_module=MODULE,
      inputs=[Input("model", "MODEL"),
              Float("noise_scale", default=1.0, min=0.0, max=64.0, step=0.01,
                    tooltip="Absolute training noise scale. For example HiDream-O1 base: 8.0, dev: 7.5.")],
      outputs=[Output("MODEL")])
def model_noise_scale(model: Any, noise_scale: float) -> tuple[Any]:
    """today's ComfyUI's ModelNoiseScale: a clone whose flow model sampling (same shift and multiplier)
    multiplies the noise it adds by `noise_scale` (the start noise and LCM's re-noising)."""
    import copy

    model = checks.model(model)
    scale = _number(noise_scale, "noise_scale", 0.0)
    original = model.get_model_object("model_sampling")
    if not (hasattr(original, "shift") and hasattr(original, "multiplier") and hasattr(original, "noise_scale")):
        raise NodeInputError("model", "a rectified-flow model (shift and multiplier in its model sampling)",
                             type(original).__name__)
    sampling = copy.copy(original)
    sampling.noise_scale = scale
    return _with_sampling(model, sampling)


@node("ModelSamplingAuraFlow", category=CATEGORY, python_module=MODULE,
      inputs=[Input("model", "MODEL"), Float("shift", default=1.73, min=0.0, max=100.0, step=0.01)],
      outputs=[Output("MODEL")])
def model_sampling_aura_flow(model: Any, shift: float) -> tuple[Any]:
    """Rectified flow with SD3's time shift; the network's timestep is sigma itself."""
    return _flow(model, shift, 1.0)


@node("ModelSamplingFlux", category=CATEGORY, python_module=MODULE,
      inputs=[Input("model", "MODEL"),
              Float("max_shift", default=1.15, min=0.0, max=100.0, step=0.01),
              Float("base_shift", default=0.5, min=0.0, max=100.0, step=0.01),
              Int("width", default=1024, min=16, max=MAX_RESOLUTION, step=8),
              Int("height", default=1024, min=16, max=MAX_RESOLUTION, step=8)],
      outputs=[Output("MODEL")])
def model_sampling_flux(model: Any, max_shift: float, base_shift: float, width: int, height: int) -> tuple[Any]:
    """Rectified flow with Flux's shift, linear in the image's patch count between base and max."""
    from comfy_core.models.model_sampling import FluxModelSampling, flux_resolution_shift

    model = checks.model(model)
    for name, value in (("width", width), ("height", height)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise NodeInputError(name, "an INT >= 1", repr(value))
    shift = flux_resolution_shift(width, height, _number(base_shift, "base_shift"), _number(max_shift, "max_shift"))
    return _with_sampling(model, FluxModelSampling(shift))


def _sigma_range(sigma_max: Any, sigma_min: Any) -> tuple[float, float]:
    hi, lo = _number(sigma_max, "sigma_max"), _number(sigma_min, "sigma_min")
    if hi <= 0:
        raise NodeInputError("sigma_max", "a FLOAT > 0 (the table is log-spaced)", repr(sigma_max))
    if lo <= 0:
        raise NodeInputError("sigma_min", "a FLOAT > 0 (the table is log-spaced)", repr(sigma_min))
    return hi, lo


@node("ModelSamplingContinuousEDM", category=CATEGORY, python_module=MODULE,
      inputs=[Input("model", "MODEL"), Combo("sampling", EDM_SAMPLINGS),
              Float("sigma_max", default=120.0, min=0.0, max=1000.0, step=0.001, round=False),
              Float("sigma_min", default=0.002, min=0.0, max=1000.0, step=0.001, round=False)],
      outputs=[Output("MODEL")])
def model_sampling_continuous_edm(model: Any, sampling: str, sigma_max: float, sigma_min: float) -> tuple[Any]:
    """A continuous log-spaced table from sigma_min to sigma_max with EDM (sigma_data 0.5), v, eps
    or Cosmos rectified-flow prediction."""
    from comfy_core.models.model_sampling import ContinuousEDMModelSampling, CosmosRFlowModelSampling

    model = checks.model(model)
    sampling = _choice(sampling, "sampling", EDM_SAMPLINGS)
    hi, lo = _sigma_range(sigma_max, sigma_min)
    if sampling == "edm_playground_v2.5":
        # ComfyUI also swaps in Playground 2.5's per-channel latent normalisation, which the
        # sampling driver cannot apply yet: refuse rather than sample with the wrong latent scale.
        raise NodeInputError("sampling", f"one of {[s for s in EDM_SAMPLINGS if s != sampling]} "
                                         "(Playground v2.5's latent format is not supported yet)", repr(sampling))
    if sampling == "cosmos_rflow":
        return _with_sampling(model, CosmosRFlowModelSampling("cosmos_rflow", lo, hi, 1.0))
    prediction = {"v_prediction": "v", "edm": "edm", "eps": "eps"}[sampling]
    sigma_data = 0.5 if prediction == "edm" else 1.0
    return _with_sampling(model, ContinuousEDMModelSampling(prediction, lo, hi, sigma_data))


@node("ModelSamplingContinuousV", category=CATEGORY, python_module=MODULE,
      inputs=[Input("model", "MODEL"), Combo("sampling", ["v_prediction"]),
              Float("sigma_max", default=500.0, min=0.0, max=1000.0, step=0.001, round=False),
              Float("sigma_min", default=0.03, min=0.0, max=1000.0, step=0.001, round=False)],
      outputs=[Output("MODEL")])
def model_sampling_continuous_v(model: Any, sampling: str, sigma_max: float, sigma_min: float) -> tuple[Any]:
    """A continuous v-prediction table, timestep `atan(sigma) * 2 / pi`."""
    from comfy_core.models.model_sampling import ContinuousVModelSampling

    model = checks.model(model)
    _choice(sampling, "sampling", ["v_prediction"])
    hi, lo = _sigma_range(sigma_max, sigma_min)
    return _with_sampling(model, ContinuousVModelSampling("v", lo, hi, 1.0))


@node("RescaleCFG", category=CATEGORY, python_module=MODULE,
      inputs=[Input("model", "MODEL"), Float("multiplier", default=0.7, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("MODEL")])
def rescale_cfg(model: Any, multiplier: float) -> tuple[Any]:
    """CFG with the result's std rescaled to the positive's (in v space), blended by `multiplier`."""
    from comfy_core.sampling.cfg_patches import RescaleCFG

    patched = checks.model(model).clone()
    patched.set_option("sampler_cfg_function", RescaleCFG(_number(multiplier, "multiplier")))
    return (patched,)

"""Scheduler and sigma nodes of ComfyUI's custom sampling (SIGMAS: a 1-D float32 tensor).

BasicScheduler, KarrasScheduler, ExponentialScheduler, PolyexponentialScheduler, LaplaceScheduler,
SDTurboScheduler, BetaSamplingScheduler, VPScheduler, SplitSigmas, SplitSigmasDenoise, FlipSigmas,
SetFirstSigma, ExtendIntermediateSigmas, SamplingPercentToSigma (comfy_extras.nodes_custom_sampler),
AlignYourStepsScheduler, GITSScheduler and OptimalStepsScheduler (their own modules), with
ComfyUI 0.3.64's names and sockets. The maths is in comfy_core.sampling.sigma_schedules /
sigma_ops / schedulers; torch is imported inside the functions (start-up stays torch-free).
"""
from __future__ import annotations

from typing import Any

from graph.native import Boolean, Combo, Float, Input, Int, Output, node
import nodes.checks as checks
from nodes._names import scheduler_names
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_custom_sampler"
SCHEDULERS = "sampling/custom_sampling/schedulers"
SIGMA_OPS = "sampling/custom_sampling/sigmas"
_SIGMA_MAX, _SIGMA_MIN = 14.614642, 0.0291675  # SD1's table ends (ComfyUI's widget defaults)


def _sigma_range(rho_default: float | None = None) -> list:
    out = [Int("steps", default=20, min=1, max=10000),
           Float("sigma_max", default=_SIGMA_MAX, min=0.0, max=5000.0, step=0.01, round=False),
           Float("sigma_min", default=_SIGMA_MIN, min=0.0, max=5000.0, step=0.01, round=False)]
    if rho_default is not None:
        out.append(Float("rho", default=rho_default, min=0.0, max=100.0, step=0.01, round=False))
    return out


def sigmas_input(value: Any, input_name: str = "sigmas") -> Any:
    """A SIGMAS value: a 1-D tensor."""
    import torch

    if not isinstance(value, torch.Tensor) or value.ndim != 1:
        raise NodeInputError(input_name, "SIGMAS (a 1-D tensor)", describe(value))
    return value


def _model_sampling(model: Any) -> Any:
    return checks.model(model).get_model_object("model_sampling")


@node("BasicScheduler", category=SCHEDULERS, display_name="BasicScheduler", python_module=MODULE,
      inputs=[Input("model", "MODEL"), Combo("scheduler", scheduler_names),
              Int("steps", default=20, min=1, max=10000),
              Float("denoise", default=1.0, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("SIGMAS")])
def basic_scheduler(model: Any, scheduler: str, steps: int, denoise: float) -> tuple:
    from comfy_core.sampling.sigma_schedules import basic_schedule

    return (basic_schedule(_model_sampling(model), scheduler, steps, denoise),)


@node("KarrasScheduler", category=SCHEDULERS, display_name="KarrasScheduler", python_module=MODULE,
      inputs=_sigma_range(rho_default=7.0), outputs=[Output("SIGMAS")])
def karras_scheduler(steps: int, sigma_max: float, sigma_min: float, rho: float) -> tuple:
    from comfy_core.sampling.schedulers import get_sigmas_karras

    return (get_sigmas_karras(n=steps, sigma_min=sigma_min, sigma_max=sigma_max, rho=rho),)


@node("ExponentialScheduler", category=SCHEDULERS, display_name="ExponentialScheduler", python_module=MODULE,
      inputs=_sigma_range(), outputs=[Output("SIGMAS")])
def exponential_scheduler(steps: int, sigma_max: float, sigma_min: float) -> tuple:
    from comfy_core.sampling.schedulers import get_sigmas_exponential

    return (get_sigmas_exponential(n=steps, sigma_min=sigma_min, sigma_max=sigma_max),)


@node("PolyexponentialScheduler", category=SCHEDULERS, display_name="PolyexponentialScheduler",
      python_module=MODULE, inputs=_sigma_range(rho_default=1.0), outputs=[Output("SIGMAS")])
def polyexponential_scheduler(steps: int, sigma_max: float, sigma_min: float, rho: float) -> tuple:
    from comfy_core.sampling.schedulers import get_sigmas_polyexponential

    return (get_sigmas_polyexponential(n=steps, sigma_min=sigma_min, sigma_max=sigma_max, rho=rho),)


@node("LaplaceScheduler", category=SCHEDULERS, display_name="LaplaceScheduler", python_module=MODULE,
      inputs=_sigma_range() + [Float("mu", default=0.0, min=-10.0, max=10.0, step=0.1, round=False),
                               Float("beta", default=0.5, min=0.0, max=10.0, step=0.1, round=False)],
      outputs=[Output("SIGMAS")])
def laplace_scheduler(steps: int, sigma_max: float, sigma_min: float, mu: float, beta: float) -> tuple:
    from comfy_core.sampling.sigma_schedules import get_sigmas_laplace

    return (get_sigmas_laplace(n=steps, sigma_min=sigma_min, sigma_max=sigma_max, mu=mu, beta=beta),)


@node("SDTurboScheduler", category=SCHEDULERS, display_name="SDTurboScheduler", python_module=MODULE,
      inputs=[Input("model", "MODEL"), Int("steps", default=1, min=1, max=10),
              Float("denoise", default=1.0, min=0, max=1.0, step=0.01)],
      outputs=[Output("SIGMAS")])
def sd_turbo_scheduler(model: Any, steps: int, denoise: float) -> tuple:
    from comfy_core.sampling.sigma_schedules import sd_turbo_schedule

    return (sd_turbo_schedule(_model_sampling(model), steps, denoise),)


@node("BetaSamplingScheduler", category=SCHEDULERS, display_name="BetaSamplingScheduler", python_module=MODULE,
      inputs=[Input("model", "MODEL"), Int("steps", default=20, min=1, max=10000),
              Float("alpha", default=0.6, min=0.0, max=50.0, step=0.01, round=False),
              Float("beta", default=0.6, min=0.0, max=50.0, step=0.01, round=False)],
      outputs=[Output("SIGMAS")])
def beta_sampling_scheduler(model: Any, steps: int, alpha: float, beta: float) -> tuple:
    from comfy_core.sampling.schedulers import beta as beta_schedule

    return (beta_schedule(_model_sampling(model), steps, alpha=alpha, beta_=beta),)


@node("VPScheduler", category=SCHEDULERS, display_name="VPScheduler", python_module=MODULE,
      inputs=[Int("steps", default=20, min=1, max=10000),
              Float("beta_d", default=19.9, min=0.0, max=5000.0, step=0.01, round=False),
              Float("beta_min", default=0.1, min=0.0, max=5000.0, step=0.01, round=False),
              Float("eps_s", default=0.001, min=0.0, max=1.0, step=0.0001, round=False)],
      outputs=[Output("SIGMAS")])
def vp_scheduler(steps: int, beta_d: float, beta_min: float, eps_s: float) -> tuple:
    from comfy_core.sampling.sigma_schedules import get_sigmas_vp

    return (get_sigmas_vp(n=steps, beta_d=beta_d, beta_min=beta_min, eps_s=eps_s),)


@node("SplitSigmas", category=SIGMA_OPS, display_name="SplitSigmas", python_module=MODULE,
      inputs=[Input("sigmas", "SIGMAS"), Int("step", default=0, min=0, max=10000)],
      outputs=[Output("SIGMAS", "high_sigmas"), Output("SIGMAS", "low_sigmas")])
def split_sigmas(sigmas: Any, step: int) -> tuple:
    from comfy_core.sampling.sigma_ops import split_sigmas as split

    return split(sigmas_input(sigmas), step)


@node("SplitSigmasDenoise", category=SIGMA_OPS, display_name="SplitSigmasDenoise", python_module=MODULE,
      inputs=[Input("sigmas", "SIGMAS"), Float("denoise", default=1.0, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("SIGMAS", "high_sigmas"), Output("SIGMAS", "low_sigmas")])
def split_sigmas_denoise(sigmas: Any, denoise: float) -> tuple:
    from comfy_core.sampling.sigma_ops import split_sigmas_denoise as split

    return split(sigmas_input(sigmas), denoise)


@node("FlipSigmas", category=SIGMA_OPS, display_name="FlipSigmas", python_module=MODULE,
      inputs=[Input("sigmas", "SIGMAS")], outputs=[Output("SIGMAS")])
def flip_sigmas(sigmas: Any) -> tuple:
    from comfy_core.sampling.sigma_ops import flip_sigmas as flip

    return (flip(sigmas_input(sigmas)),)


@node("SetFirstSigma", category=SIGMA_OPS, display_name="SetFirstSigma", python_module=MODULE,
      inputs=[Input("sigmas", "SIGMAS"), Float("sigma", default=136.0, min=0.0, max=20000.0, step=0.001, round=False)],
      outputs=[Output("SIGMAS")])
def set_first_sigma(sigmas: Any, sigma: float) -> tuple:
    from comfy_core.sampling.sigma_ops import set_first_sigma as set_first

    return (set_first(sigmas_input(sigmas), sigma),)


@node("ExtendIntermediateSigmas", category=SIGMA_OPS, display_name="ExtendIntermediateSigmas", python_module=MODULE,
      inputs=[Input("sigmas", "SIGMAS"), Int("steps", default=2, min=1, max=100),
              Float("start_at_sigma", default=-1.0, min=-1.0, max=20000.0, step=0.01, round=False),
              Float("end_at_sigma", default=12.0, min=0.0, max=20000.0, step=0.01, round=False),
              Combo("spacing", ["linear", "cosine", "sine"])],
      outputs=[Output("SIGMAS")])
def extend_intermediate_sigmas(sigmas: Any, steps: int, start_at_sigma: float, end_at_sigma: float,
                               spacing: str) -> tuple:
    from comfy_core.sampling.sigma_ops import SPACINGS, extend_intermediate_sigmas as extend

    if spacing not in SPACINGS:
        raise NodeInputError("spacing", f"one of {list(SPACINGS)}", repr(spacing))
    return (extend(sigmas_input(sigmas), steps, start_at_sigma, end_at_sigma, spacing),)


@node("SamplingPercentToSigma", category=SIGMA_OPS, display_name="SamplingPercentToSigma", python_module=MODULE,
      inputs=[Input("model", "MODEL"), Float("sampling_percent", default=0.0, min=0.0, max=1.0, step=0.0001),
              Boolean("return_actual_sigma", default=False,
                      tooltip="Return the actual sigma value instead of the value used for interval checks.\n"
                              "This only affects results at 0.0 and 1.0.")],
      outputs=[Output("FLOAT", "sigma_value")])
def sampling_percent_to_sigma(model: Any, sampling_percent: float, return_actual_sigma: bool) -> tuple:
    from comfy_core.sampling.sigma_ops import sampling_percent_to_sigma as to_sigma

    return (to_sigma(_model_sampling(model), sampling_percent, return_actual_sigma),)


# -- table-driven schedulers (V3 nodes in ComfyUI: null display names) -------------------------

@node("AlignYourStepsScheduler", category=SCHEDULERS, display_name=None,
      python_module="comfy_extras.nodes_align_your_steps",
      inputs=[Combo("model_type", ["SD1", "SDXL", "SVD"]), Int("steps", default=10, min=1, max=10000),
              Float("denoise", default=1.0, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("SIGMAS")])
def align_your_steps_scheduler(model_type: str, steps: int, denoise: float) -> tuple:
    from comfy_core.sampling.schedule_tables import AYS_NOISE_LEVELS
    from comfy_core.sampling.sigma_schedules import align_your_steps

    if model_type not in AYS_NOISE_LEVELS:
        raise NodeInputError("model_type", f"one of {list(AYS_NOISE_LEVELS)}", repr(model_type))
    return (align_your_steps(model_type, steps, denoise),)


@node("GITSScheduler", category=SCHEDULERS, display_name=None, python_module="comfy_extras.nodes_gits",
      inputs=[Float("coeff", default=1.20, min=0.80, max=1.50, step=0.05), Int("steps", default=10, min=2, max=1000),
              Float("denoise", default=1.0, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("SIGMAS")])
def gits_scheduler(coeff: float, steps: int, denoise: float) -> tuple:
    from comfy_core.sampling.schedule_tables import GITS_NOISE_LEVELS
    from comfy_core.sampling.sigma_schedules import gits

    if round(coeff, 2) not in GITS_NOISE_LEVELS:
        raise NodeInputError("coeff", "a multiple of 0.05 from 0.80 to 1.50", repr(coeff))
    if steps < 2:
        raise NodeInputError("steps", "at least 2", repr(steps))
    return (gits(coeff, steps, denoise),)


@node("OptimalStepsScheduler", category=SCHEDULERS, display_name=None, python_module="comfy_extras.nodes_optimalsteps",
      inputs=[Combo("model_type", ["FLUX", "Wan", "Chroma"]), Int("steps", default=20, min=3, max=1000),
              Float("denoise", default=1.0, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("SIGMAS")])
def optimal_steps_scheduler(model_type: str, steps: int, denoise: float) -> tuple:
    from comfy_core.sampling.schedule_tables import OPTIMAL_STEPS_NOISE_LEVELS
    from comfy_core.sampling.sigma_schedules import optimal_steps

    if model_type not in OPTIMAL_STEPS_NOISE_LEVELS:
        raise NodeInputError("model_type", f"one of {list(OPTIMAL_STEPS_NOISE_LEVELS)}", repr(model_type))
    return (optimal_steps(model_type, steps, denoise),)

"""SAMPLER nodes: KSamplerSelect and the parameterised samplers of ComfyUI's custom sampling.

KSamplerSelect, SamplerEulerAncestral, SamplerEulerAncestralCFGPP, SamplerLMS, SamplerDPMPP_3M_SDE,
SamplerDPMPP_2M_SDE, SamplerDPMPP_SDE, SamplerDPMPP_2S_Ancestral, SamplerDPMAdaptative,
SamplerER_SDE, SamplerSASolver (comfy_extras.nodes_custom_sampler) and SamplerEulerCFGpp,
SamplerLCMUpscale (comfy_extras.nodes_advanced_samplers), with ComfyUI 0.3.64's names and sockets, and
today's SamplerLCM (the same module).
Each returns a `comfy_core.sampling.guider.SamplerObject`: a sampler function plus the
options it is called with. torch is imported inside the functions (start-up stays torch-free).
"""
from __future__ import annotations

from typing import Any

from graph.native import Combo, Float, Input, Int, Output, node
from graph.v3_schema import Float as V3Float, Output as V3Output, v3_node
import nodes.checks as checks
from nodes._names import sampler_names
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_custom_sampler"
CATEGORY = "sampling/custom_sampling/samplers"
NOISE_DEVICES = ["gpu", "cpu"]


def _f(name: str, default: float, max: float = 100.0, **extra: Any) -> Any:
    """ComfyUI's usual sampler-parameter widget: 0..max, step 0.01, unrounded."""
    return Float(name, default=default, min=0.0, max=max, step=0.01, round=False, **extra)


def _ksampler(name: str, options: dict | None = None) -> Any:
    from comfy_core.sampling.guider import ksampler

    return ksampler(name, options or {})


def _choice(value: Any, options: list[str], input_name: str) -> str:
    if value not in options:
        raise NodeInputError(input_name, f"one of {options}", repr(value))
    return value


def _on_device(base: str, noise_device: str) -> str:
    """`base` with the Brownian tree on the CPU, `base_gpu` with it on the sampling device."""
    return base if _choice(noise_device, NOISE_DEVICES, "noise_device") == "cpu" else base + "_gpu"


@node("KSamplerSelect", category=CATEGORY, display_name="KSamplerSelect", python_module=MODULE,
      inputs=[Combo("sampler_name", sampler_names)], outputs=[Output("SAMPLER")])
def ksampler_select(sampler_name: str) -> tuple:
    from comfy_core.sampling.guider import sampler_object

    return (sampler_object(_choice(sampler_name, sampler_names(), "sampler_name")),)


@node("SamplerDPMPP_3M_SDE", category=CATEGORY, display_name="SamplerDPMPP_3M_SDE", python_module=MODULE,
      inputs=[_f("eta", 1.0), _f("s_noise", 1.0), Combo("noise_device", NOISE_DEVICES)],
      outputs=[Output("SAMPLER")])
def sampler_dpmpp_3m_sde(eta: float, s_noise: float, noise_device: str) -> tuple:
    return (_ksampler(_on_device("dpmpp_3m_sde", noise_device), {"eta": eta, "s_noise": s_noise}),)


@node("SamplerDPMPP_2M_SDE", category=CATEGORY, display_name="SamplerDPMPP_2M_SDE", python_module=MODULE,
      inputs=[Combo("solver_type", ["midpoint", "heun"]), _f("eta", 1.0), _f("s_noise", 1.0),
              Combo("noise_device", NOISE_DEVICES)],
      outputs=[Output("SAMPLER")])
def sampler_dpmpp_2m_sde(solver_type: str, eta: float, s_noise: float, noise_device: str) -> tuple:
    _choice(solver_type, ["midpoint", "heun"], "solver_type")
    return (_ksampler(_on_device("dpmpp_2m_sde", noise_device),
                      {"eta": eta, "s_noise": s_noise, "solver_type": solver_type}),)


@node("SamplerDPMPP_SDE", category=CATEGORY, display_name="SamplerDPMPP_SDE", python_module=MODULE,
      inputs=[_f("eta", 1.0), _f("s_noise", 1.0), _f("r", 0.5), Combo("noise_device", NOISE_DEVICES)],
      outputs=[Output("SAMPLER")])
def sampler_dpmpp_sde(eta: float, s_noise: float, r: float, noise_device: str) -> tuple:
    return (_ksampler(_on_device("dpmpp_sde", noise_device), {"eta": eta, "s_noise": s_noise, "r": r}),)


@node("SamplerDPMPP_2S_Ancestral", category=CATEGORY, display_name="SamplerDPMPP_2S_Ancestral",
      python_module=MODULE, inputs=[_f("eta", 1.0), _f("s_noise", 1.0)], outputs=[Output("SAMPLER")])
def sampler_dpmpp_2s_ancestral(eta: float, s_noise: float) -> tuple:
    return (_ksampler("dpmpp_2s_ancestral", {"eta": eta, "s_noise": s_noise}),)


@node("SamplerEulerAncestral", category=CATEGORY, display_name="SamplerEulerAncestral", python_module=MODULE,
      inputs=[_f("eta", 1.0), _f("s_noise", 1.0)], outputs=[Output("SAMPLER")])
def sampler_euler_ancestral(eta: float, s_noise: float) -> tuple:
    return (_ksampler("euler_ancestral", {"eta": eta, "s_noise": s_noise}),)


@node("SamplerEulerAncestralCFGPP", category=CATEGORY, display_name="SamplerEulerAncestralCFG++",
      python_module=MODULE, inputs=[_f("eta", 1.0, max=1.0), _f("s_noise", 1.0, max=10.0)],
      outputs=[Output("SAMPLER")])
def sampler_euler_ancestral_cfgpp(eta: float, s_noise: float) -> tuple:
    return (_ksampler("euler_ancestral_cfg_pp", {"eta": eta, "s_noise": s_noise}),)


@node("SamplerLMS", category=CATEGORY, display_name="SamplerLMS", python_module=MODULE,
      inputs=[Int("order", default=4, min=1, max=100)], outputs=[Output("SAMPLER")])
def sampler_lms(order: int) -> tuple:
    return (_ksampler("lms", {"order": order}),)


@node("SamplerDPMAdaptative", category=CATEGORY, display_name="SamplerDPMAdaptative", python_module=MODULE,
      inputs=[Int("order", default=3, min=2, max=3), _f("rtol", 0.05), _f("atol", 0.0078), _f("h_init", 0.05),
              _f("pcoeff", 0.0), _f("icoeff", 1.0), _f("dcoeff", 0.0), _f("accept_safety", 0.81), _f("eta", 0.0),
              _f("s_noise", 1.0)],
      outputs=[Output("SAMPLER")])
def sampler_dpm_adaptative(order: int, rtol: float, atol: float, h_init: float, pcoeff: float, icoeff: float,
                           dcoeff: float, accept_safety: float, eta: float, s_noise: float) -> tuple:
    return (_ksampler("dpm_adaptive", {"order": order, "rtol": rtol, "atol": atol, "h_init": h_init,
                                       "pcoeff": pcoeff, "icoeff": icoeff, "dcoeff": dcoeff,
                                       "accept_safety": accept_safety, "eta": eta, "s_noise": s_noise}),)


ER_SDE_TYPES = ["ER-SDE", "Reverse-time SDE", "ODE"]


@node("SamplerER_SDE", category=CATEGORY, display_name="SamplerER_SDE", python_module=MODULE,
      inputs=[Combo("solver_type", ER_SDE_TYPES), Int("max_stage", default=3, min=1, max=3),
              _f("eta", 1.0, tooltip="Stochastic strength of reverse-time SDE.\nWhen eta=0, it reduces to "
                                     "deterministic ODE. This setting doesn't apply to ER-SDE solver type."),
              _f("s_noise", 1.0)],
      outputs=[Output("SAMPLER")])
def sampler_er_sde(solver_type: str, max_stage: int, eta: float, s_noise: float) -> tuple:
    """ER-SDE uses the sampler's own noise scaler; the reverse-time SDE scales noise by
    `x ** (eta + 1)`; ODE (or the SDE at eta 0) draws no noise."""
    _choice(solver_type, ER_SDE_TYPES, "solver_type")
    if solver_type == "ODE" or (solver_type == "Reverse-time SDE" and eta == 0):
        eta, s_noise = 0, 0

    def reverse_time_sde_noise_scaler(x: Any) -> Any:
        return x ** (eta + 1)

    scaler = None if solver_type == "ER-SDE" else reverse_time_sde_noise_scaler
    return (_ksampler("er_sde", {"s_noise": s_noise, "noise_scaler": scaler, "max_stage": max_stage}),)


@node("SamplerSASolver", category=CATEGORY, display_name="SamplerSASolver", python_module=MODULE,
      inputs=[Input("model", "MODEL"), Float("eta", default=1.0, min=0.0, max=10.0, step=0.01, round=False),
              Float("sde_start_percent", default=0.2, min=0.0, max=1.0, step=0.001),
              Float("sde_end_percent", default=0.8, min=0.0, max=1.0, step=0.001), _f("s_noise", 1.0),
              Int("predictor_order", default=3, min=1, max=6), Int("corrector_order", default=4, min=0, max=6),
              Input("use_pece", "BOOLEAN"), Input("simple_order_2", "BOOLEAN")],  # no default, as ComfyUI
      outputs=[Output("SAMPLER")])
def sampler_sa_solver(model: Any, eta: float, sde_start_percent: float, sde_end_percent: float, s_noise: float,
                      predictor_order: int, corrector_order: int, use_pece: bool, simple_order_2: bool) -> tuple:
    from comfy_core.sampling.samplers.sa_solver import tau_interval

    ms = checks.model(model).get_model_object("model_sampling")
    tau_func = tau_interval(ms.percent_to_sigma(sde_start_percent), ms.percent_to_sigma(sde_end_percent), eta=eta)
    return (_ksampler("sa_solver", {"tau_func": tau_func, "s_noise": s_noise, "predictor_order": predictor_order,
                                    "corrector_order": corrector_order, "use_pece": use_pece,
                                    "simple_order_2": simple_order_2}),)


# -- comfy_extras.nodes_advanced_samplers (V3 nodes) -------------------------------------------

ADVANCED = "comfy_extras.nodes_advanced_samplers"
LCM_UPSCALE_METHODS = ["bislerp", "nearest-exact", "bilinear", "area", "bicubic"]


@node("SamplerLCMUpscale", category=CATEGORY, display_name=None, python_module=ADVANCED,
      inputs=[Float("scale_ratio", default=1.0, min=0.1, max=20.0, step=0.01),
              Int("scale_steps", default=-1, min=-1, max=1000, step=1),
              Combo("upscale_method", LCM_UPSCALE_METHODS)],
      outputs=[Output("SAMPLER")])
def sampler_lcm_upscale(scale_ratio: float, scale_steps: int, upscale_method: str) -> tuple:
    from comfy_core.sampling.guider import SamplerObject
    from comfy_core.sampling.samplers.advanced import sample_lcm_upscale

    _choice(upscale_method, LCM_UPSCALE_METHODS, "upscale_method")
    return (SamplerObject(sample_lcm_upscale, {"total_upscale": scale_ratio, "upscale_method": upscale_method,
                                          "upscale_steps": None if scale_steps < 0 else scale_steps}),)


@v3_node("SamplerLCM", category="model/sampling/samplers", python_module=ADVANCED,
         description="LCM sampler with tunable per-step noise. s_noise is a multiplier on the model's training "
                     "noise scale",
         inputs=[V3Float("s_noise", default=1.0, min=0.0, max=64.0, step=0.01,
                         tooltip="Per-step noise multiplier at the first step (1.0 = match training)."),
                 V3Float("s_noise_end", default=1.0, min=0.0, max=64.0, step=0.01,
                         tooltip="Per-step noise multiplier at the last step. Set equal to s_noise for a constant "
                                 "schedule."),
                 V3Float("noise_clip_std", default=0.0, min=0.0, max=10.0, step=0.01,
                         tooltip="Clamp per-step noise to +/- N*std. 0 disables.")],
         outputs=[V3Output("SAMPLER")])
def sampler_lcm(s_noise: float, s_noise_end: float, noise_clip_std: float) -> tuple:
    """today's ComfyUI's SamplerLCM: `lcm` with a per-step noise multiplier ramped from `s_noise` to
    `s_noise_end` and the fresh noise clamped to `noise_clip_std` standard deviations (0: off)."""
    return (_ksampler("lcm", {"s_noise": checks.number(s_noise, "s_noise", 0.0, 64.0),
                              "s_noise_end": checks.number(s_noise_end, "s_noise_end", 0.0, 64.0),
                              "noise_clip_std": checks.number(noise_clip_std, "noise_clip_std", 0.0, 10.0)}),)


@node("SamplerEulerCFGpp", category="_for_testing", display_name="SamplerEulerCFG++", experimental=True,
      python_module=ADVANCED, inputs=[Combo("version", ["regular", "alternative"])], outputs=[Output("SAMPLER")])
def sampler_euler_cfgpp(version: str) -> tuple:
    from comfy_core.sampling.guider import SamplerObject
    from comfy_core.sampling.samplers.advanced import sample_euler_cfg_pp_alt

    if _choice(version, ["regular", "alternative"], "version") == "alternative":
        return (SamplerObject(sample_euler_cfg_pp_alt),)
    return (_ksampler("euler_cfg_pp"),)

"""Two post-CFG patches of today's ComfyUI, declared as its V3 schema renders them; the maths are
comfy_core/model_patches/post_cfg_rescale.py. Each returns a clone of the MODEL with one more
`sampler_post_cfg_function`; the input MODEL is not changed.

* TangentialAmplifyingGuidance (comfy_extras/nodes_tag.py @110b1dce0c7dc9e8474b65a19c2cd67195073ff0,
  Cho et al. 2025, arXiv 2510.04533): the step's update is split into its part along the current
  sample (radial, scaled by `r_scale`) and the rest (tangential, scaled by `t_scale`), between
  the sigmas of `start_percent` and `end_percent`.
* LTXVGuidanceRescale (comfy_extras/nodes_lt.py @b2f605a659b324be6dd2f5394e37c771d2f6037b):
  diffusers' `guidance_rescale` of the guided prediction to the conditional one's standard
  deviation, at every step (any model, despite the name).
"""
from __future__ import annotations

from typing import Any

import nodes.checks as checks
from graph.v3_schema import Float, Output, Socket, v3_node


@v3_node("TangentialAmplifyingGuidance", display_name="Tangential Amplifying Guidance", category="experimental",
         python_module="comfy_extras.nodes_tag", experimental=True,
         inputs=[Socket("model", "MODEL"),
                 Float("t_scale", default=1.05, min=0.0, max=10.0, step=0.001,
                       tooltip="scale for the tangential (orthogonal) component"),
                 Float("r_scale", default=1.0, min=0.0, max=10.0, step=0.001,
                       tooltip="scale for the radial (parallel) component"),
                 Float("start_percent", default=0.0, min=0.0, max=1.0, step=0.01, advanced=True),
                 Float("end_percent", default=1.0, min=0.0, max=1.0, step=0.01, advanced=True)],
         outputs=[Output("MODEL")])
def tangential_amplifying_guidance(model: Any, t_scale: float, r_scale: float, start_percent: float,
                                   end_percent: float) -> tuple[Any]:
    """A clone of `model` with TAG after CFG between the two percents' sigmas."""
    from comfy_core.model_patches.post_cfg_rescale import TangentialAmplifyingGuidance

    model = checks.model(model)
    t = float(checks.number(t_scale, "t_scale", 0.0, 10.0))
    r = float(checks.number(r_scale, "r_scale", 0.0, 10.0))
    sampling = model.get_model_object("model_sampling")
    sigma_hi = float(sampling.percent_to_sigma(checks.number(start_percent, "start_percent", 0.0, 1.0)))
    sigma_lo = float(sampling.percent_to_sigma(checks.number(end_percent, "end_percent", 0.0, 1.0)))
    patched = model.clone()
    patched.add_option_function("sampler_post_cfg_function", TangentialAmplifyingGuidance(t, r, sigma_hi, sigma_lo))
    return (patched,)


@v3_node("LTXVGuidanceRescale", display_name="LTXV Guidance Rescale", category="advanced/guidance",
         python_module="comfy_extras.nodes_lt",
         description="Rescales guided predictions to the conditional prediction standard deviation, matching "
                     "Diffusers guidance_rescale.",
         inputs=[Socket("model", "MODEL"),
                 Float("guidance_rescale", default=0.7, min=0.0, max=1.0, step=0.01, round=0.01)],
         outputs=[Output("MODEL")])
def ltxv_guidance_rescale(model: Any, guidance_rescale: float) -> tuple[Any]:
    """A clone of `model` whose guided prediction is rescaled after CFG."""
    from comfy_core.model_patches.post_cfg_rescale import GuidanceRescale

    model = checks.model(model)
    rescale = float(checks.number(guidance_rescale, "guidance_rescale", 0.0, 1.0))
    patched = model.clone()
    patched.add_option_function("sampler_post_cfg_function", GuidanceRescale(rescale))
    return (patched,)

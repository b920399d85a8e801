"""TemporalScoreRescaling (today's ComfyUI, comfy_extras/nodes_eps.py): a clone of the MODEL with
one more post-CFG hook rescaling the guided prediction's score by TSR's ratio (Xu et al. 2025,
arXiv 2510.01184; comfy_core/model_patches/temporal_score_rescaling.py). The input MODEL is not
changed.
"""
from __future__ import annotations

from typing import Any

import nodes.checks as checks
from graph.v3_schema import Float, Output, Socket, v3_node

MODULE = "comfy_extras.nodes_eps"


@v3_node("TemporalScoreRescaling", display_name="TSR - Temporal Score Rescaling", category="model_patches/unet",
         python_module=MODULE,
         description="[Post-CFG Function]\nTSR - Temporal Score Rescaling (2510.01184)\n\n"
                     "Rescaling the model's score or noise to steer the sampling diversity.\n",
         inputs=[Socket("model", "MODEL"),
                 Float("tsr_k", default=0.95, min=0.01, max=100.0, step=0.001, display="number", advanced=True,
                       tooltip="Controls the rescaling strength.\nLower k produces more detailed results; higher k "
                               "produces smoother results in image generation. Setting k = 1 disables rescaling."),
                 Float("tsr_sigma", default=1.0, min=0.01, max=100.0, step=0.001, display="number", advanced=True,
                       tooltip="Controls how early rescaling takes effect.\nLarger values take effect earlier.")],
         outputs=[Output("MODEL", "patched_model")])
def temporal_score_rescaling(model: Any, tsr_k: float, tsr_sigma: float) -> tuple[Any]:
    """A clone of `model` whose guided prediction is rescaled by TSR after CFG."""
    from comfy_core.model_patches.temporal_score_rescaling import TemporalScoreRescaling

    model = checks.model(model)
    k = checks.number(tsr_k, "tsr_k", 0.01, 100.0)
    sigma = checks.number(tsr_sigma, "tsr_sigma", 0.01, 100.0)
    patched = model.clone()
    patched.add_option_function("sampler_post_cfg_function", TemporalScoreRescaling(float(k), float(sigma)))
    return (patched,)

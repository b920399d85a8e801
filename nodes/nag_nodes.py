"""NAGuidance: Normalized Attention Guidance, under the name, inputs and declaration of today's
ComfyUI node (comfy_extras/nodes_nag.py, `NAGuidance`; LTX-2.3's templates use it with
nag_scale 5, nag_alpha 0.5, nag_tau 1.5). The method, the hooks it goes under and the networks
it reaches: comfy_core/model_patches/nag.py.

The input MODEL is never changed: the node returns a clone carrying the patch (and the CFG-1
shortcut off, so the negative is evaluated even at CFG 1, as ComfyUI). On a network without a
self-attention hook the clone is returned all the same and the node logs that NAG has no effect
there, as ComfyUI's node silently does nothing on a network that never calls its hook.
"""
from __future__ import annotations

import logging
from typing import Any

import nodes.checks as checks
from graph.v3_schema import Float, Output, Socket, v3_node
from nodes.errors import NodeInputError

# torch and comfy_core are imported when the node runs: registering it must not import torch.

log = logging.getLogger(__name__)


@v3_node("NAGuidance", display_name="Normalized Attention Guidance", category="advanced/guidance",
         python_module="comfy_extras.nodes_nag", experimental=True,
         description="Applies Normalized Attention Guidance to models, enabling negative prompts on "
                     "distilled/schnell models.",
         inputs=[Socket("model", "MODEL", tooltip="The model to apply NAG to."),
                 Float("nag_scale", default=5.0, min=0.0, max=50.0, step=0.1,
                       tooltip="The guidance scale factor. Higher values push further from the negative prompt."),
                 Float("nag_alpha", default=0.5, min=0.0, max=1.0, step=0.01,
                       tooltip="Blending factor for the normalized attention. 1.0 is full replacement, 0.0 is "
                               "no effect."),
                 Float("nag_tau", default=1.5, min=1.0, max=10.0, step=0.01)],
         outputs=[Output("MODEL", tooltip="The patched model with NAG enabled.")])
def na_guidance(model: Any, nag_scale: float, nag_alpha: float, nag_tau: float) -> tuple[Any]:
    """The MODEL with NAG on its self-attention outputs (Chen et al. 2025, arXiv 2505.21179)."""
    from comfy_core.model_patches.nag import NAGError, apply_nag, architecture_name

    model = checks.model(model)
    scale = checks.number(nag_scale, "nag_scale", 0.0, 50.0)
    alpha = checks.number(nag_alpha, "nag_alpha", 0.0, 1.0)
    tau = checks.number(nag_tau, "nag_tau", 1.0, 10.0)
    try:
        patched, runs = apply_nag(model, scale, alpha, tau)
    except NAGError as exc:  # the bounds above keep the settings valid; kept typed all the same
        raise NodeInputError("model", "settings NAG can run with", str(exc)) from exc
    if not runs:
        log.warning("NAGuidance: the %s network has no self-attention hook NAG can use (supported: the UNet "
                    "models SD1.x/SD2.x/SDXL/SVD, the Flux line and Wan); the model is returned with NAG having "
                    "no effect",
                    architecture_name(model) or "loaded")
    return (patched,)

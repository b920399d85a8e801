"""PiD's node (ComfyUI's `comfy_extras/nodes_pid.py`, the version the 0.1.123 templates save: latent
formats "flux" / "sd3" / "flux2"): PiDConditioning attaches a latent diffusion model's latent and a
`degrade_sigma` to a conditioning for PiD (comfy_core/families/pixeldit), which decodes it to a 4x
image in pixel space.

The latent is taken into PiD's model space by the chosen latent format's `process_in` (Flux.1's
scale 0.3611 / shift 0.1159, SD3's 1.5305 / 0.0609, Flux.2's identity); Z-Image's latents are
Flux.1's ("flux"). The entry gets `lq_latent` and `degrade_sigma` (a float), as ComfyUI's
`node_helpers.conditioning_set_values` sets them.
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Combo, Float, Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError
from nodes.flux_nodes import set_values

MODULE = "comfy_extras.nodes_pid"
LATENT_FORMATS = ("flux", "sd3", "flux2")
DESCRIPTION = ("Attaches an LDM latent (Flux/SD3/Flux2/Z-Image) and a degrade_sigma scalar to a CONDITIONING for PiD "
               "decoding. Latent is renormalized into PiD space via the chosen latent_format. Z-Image uses 'flux'.")


def format_named(name: str) -> Any:
    """The latent format `name` ("flux", "sd3", "flux2") names."""
    if name == "flux":
        from comfy_core.families.flux.latent_format import flux_latent_format

        return flux_latent_format()
    if name == "sd3":
        from comfy_core.families.sd3.latent_format import sd3_latent_format

        return sd3_latent_format()
    if name == "flux2":
        from comfy_core.families.flux2.latent_format import Flux2LatentFormat

        return Flux2LatentFormat()
    raise NodeInputError("latent_format", f"one of {list(LATENT_FORMATS)}", repr(name))


@v3_node("PiDConditioning", display_name="PiD Conditioning", category="advanced/conditioning", python_module=MODULE,
         description=DESCRIPTION,
         inputs=[Socket("positive", "CONDITIONING"),
                 Socket("latent", "LATENT", tooltip="LDM latent (from VAEEncode or a KSampler)."),
                 Combo("latent_format", list(LATENT_FORMATS), default="flux"),
                 Float("degrade_sigma", default=0.0, min=0.0, max=1.0, step=0.01,
                       tooltip="0 = clean latent. Increase to denoise corrupted LDM outputs.")],
         outputs=[Output("CONDITIONING")])
def pid_conditioning(positive: list, latent: dict, latent_format: str, degrade_sigma: float) -> tuple[list]:
    """Every entry of `positive` with `lq_latent` (the latent in PiD's space) and `degrade_sigma`."""
    positive = checks.conditioning(positive, "positive")
    samples = checks.latent(latent, "latent")
    lq = format_named(latent_format).process_in(samples)
    return (set_values(positive, {"lq_latent": lq, "degrade_sigma": float(checks.number(degrade_sigma,
                                                                                          "degrade_sigma"))}),)


__all__ = ["LATENT_FORMATS", "format_named", "pid_conditioning"]

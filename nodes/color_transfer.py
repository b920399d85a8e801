"""ColorTransfer ("Transfer Color") of ComfyUI's comfy_extras/nodes_post_processing.py (2026): the
colours of `image_target` matched to `image_ref` by Reinhard's L*a*b* statistics, the linear
Monge-Kantorovitch map in L*a*b*, or per-channel histogram matching, with per-frame, pooled or
one-frame source statistics and a strength (comfy_core/image/color_transfer.py).
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Combo, ComboOption, DynamicCombo, Float, Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_post_processing"
METHODS = ["reinhard_lab", "mkl_lab", "histogram"]

SOURCE_STATS = DynamicCombo("source_stats", tooltip=(
    "per_frame: each frame matched to image_ref individually. uniform: pool stats across all source frames as "
    "baseline, match to image_ref. target_frame: use one chosen frame as the baseline for the transform to "
    "image_ref, applied uniformly to all frames (preserves relative differences)"), options=(
    ComboOption("per_frame", ()),
    ComboOption("uniform", ()),
    ComboOption("target_frame", (
        Int("target_index", default=0, min=0, max=10000,
            tooltip="Frame index used as the source baseline for computing the transform to image_ref"),)),
))


@v3_node("ColorTransfer", display_name="Transfer Color", category="image/filters", python_module=MODULE,
         description="Match the colors of one image to another using various algorithms.",
         search_aliases=["color match", "color grading", "color correction", "match colors", "color transform", "mkl",
                         "reinhard", "histogram"],
         inputs=[Socket("image_target", "IMAGE", tooltip="Image(s) to apply the color transform to."),
                 Socket("image_ref", "IMAGE", tooltip="Reference image(s) to match colors to."),
                 Combo("method", METHODS),
                 SOURCE_STATS,
                 Float("strength", default=1.0, min=0.0, max=10.0, step=0.01)],
         outputs=[Output("IMAGE", "image")])
def color_transfer_node(image_target: Any, image_ref: Any, method: str, source_stats: dict[str, Any],
                        strength: float = 1.0) -> tuple[Any]:
    """`image_target` with its colours matched to `image_ref` (module docstring)."""
    from comfy_core.image.color_transfer import color_transfer

    target = checks.image_batch(image_target, "image_target")
    reference = None if image_ref is None else checks.image_batch(image_ref, "image_ref")
    if method not in METHODS:
        raise NodeInputError("method", f"one of {METHODS}", repr(method))
    strength = checks.number(strength, "strength", 0.0, 10.0)
    stats = source_stats["source_stats"]
    index = checks.integer(source_stats.get("target_index", 0) or 0, "source_stats.target_index", 0, 10000)
    if method != "histogram" and (target.shape[-1] != 3 or (reference is not None and reference.shape[-1] != 3)):
        raise NodeInputError("image_target", f"RGB images for {method}", f"{target.shape[-1]} channels")
    return (color_transfer(target, reference, method, stats, index, strength),)

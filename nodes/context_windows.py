"""ComfyUI 0.3.64's context-window nodes (comfy_extras/nodes_context_windows.py):
`ContextWindowsManual` (any latent axis, `dim`) and `WanContextWindowsManual` (dim 2, lengths
in video frames, converted to Wan's latent frames `(n - 1) // 4 + 1`).

Each returns a clone of the MODEL whose model options carry the context handler
(comfy_core/sampling/context_windows.py), which the sampler's cond batching honours; the input
MODEL is never changed.
"""
from __future__ import annotations

from typing import Any

from graph.context import current
from graph.native import MAX_RESOLUTION, Boolean, Combo, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError

# Names kept here (not imported from comfy_core) so that registering the nodes and rendering
# /object_info import no torch; tests hold them equal to comfy_core's ContextSchedules / ContextFuseMethods.
SCHEDULES = ["standard_static", "standard_uniform", "looped_uniform", "batched"]
FUSE_METHODS = ["pyramid", "relative", "flat", "overlap-linear"]
MODULE = "comfy_extras.nodes_context_windows"
MODEL_TIP = "The model to apply context windows to during sampling."
LENGTH_TIP = "The length of the context window."
OVERLAP_TIP = "The overlap of the context window."


def _inputs(length: Any, overlap: Any) -> list:
    """The sockets both nodes share, in ComfyUI's order, with each node's length and overlap."""
    return [
        Input("model", "MODEL", tooltip=MODEL_TIP),
        length,
        overlap,
        Combo("context_schedule", SCHEDULES, tooltip="The stride of the context window."),  # ComfyUI's tooltip
        Int("context_stride", default=1, min=1,
            tooltip="The stride of the context window; only applicable to uniform schedules."),
        Boolean("closed_loop", default=False,
                tooltip="Whether to close the context window loop; only applicable to looped schedules."),
        Combo("fuse_method", FUSE_METHODS, default="pyramid", tooltip="The method to use to fuse the context windows."),
    ]


def _check_interrupt(*_args: Any) -> None:
    """EVALUATE_CONTEXT_WINDOWS callback: a cancelled prompt stops between windows (as ComfyUI's
    handler checks `throw_exception_if_processing_interrupted` there)."""
    ctx = current()
    if ctx is not None:
        ctx.check_interrupt()


def _patched(model: Any, context_length: int, context_overlap: int, context_schedule: str, context_stride: int,
             closed_loop: bool, fuse_method: str, dim: int) -> tuple[Any]:
    from comfy_core.wrappers import add_callback_with_key
    from comfy_core.sampling.context_windows import IndexListCallbacks, apply_context_windows, context_handler

    model = checks.model(model)
    if context_schedule not in SCHEDULES:
        raise NodeInputError("context_schedule", f"one of {SCHEDULES}", repr(context_schedule))
    if fuse_method not in FUSE_METHODS:
        raise NodeInputError("fuse_method", f"one of {FUSE_METHODS}", repr(fuse_method))
    if context_schedule != "batched" and context_overlap >= context_length:
        raise NodeInputError("context_overlap", f"less than the context length ({context_length} latent frames) "
                             f"for the {context_schedule} schedule", f"{context_overlap} latent frames")
    handler = context_handler(context_schedule, fuse_method, context_length, context_overlap, context_stride,
                              closed_loop, dim)
    add_callback_with_key(IndexListCallbacks.EVALUATE_CONTEXT_WINDOWS, "interrupt", _check_interrupt,
                          handler.callbacks)
    return (apply_context_windows(model, handler),)


@node("ContextWindowsManual", display_name="Context Windows (Manual)", category="context", python_module=MODULE,
      description="Manually set context windows.", experimental=True,
      inputs=_inputs(Int("context_length", default=16, min=1, tooltip=LENGTH_TIP),
                     Int("context_overlap", default=4, min=0, tooltip=OVERLAP_TIP))
      + [Int("dim", default=0, min=0, max=5, tooltip="The dimension to apply the context windows to.")],
      outputs=[Output("MODEL", tooltip="The model with context windows applied during sampling.")])
def context_windows_manual(model: Any, context_length: int, context_overlap: int, context_schedule: str,
                           context_stride: int, closed_loop: bool, fuse_method: str, dim: int) -> tuple[Any]:
    """Sample in windows of `context_length` along latent axis `dim` (0: batch as frames)."""
    return _patched(model, context_length, context_overlap, context_schedule, context_stride, closed_loop,
                    fuse_method, dim)


def wan_latent_frames(frames: int) -> int:
    """Video frames to Wan latent frames (4x temporal compression, the first frame alone)."""
    return (frames - 1) // 4 + 1


@node("WanContextWindowsManual", display_name="WAN Context Windows (Manual)", category="context",
      python_module=MODULE, description="Manually set context windows for WAN-like models (dim=2).",
      experimental=True,
      inputs=_inputs(Int("context_length", default=81, min=1, max=MAX_RESOLUTION, step=4, tooltip=LENGTH_TIP),
                     Int("context_overlap", default=30, min=0, tooltip=OVERLAP_TIP)),
      outputs=[Output("MODEL", tooltip="The model with context windows applied during sampling.")])
def wan_context_windows_manual(model: Any, context_length: int, context_overlap: int, context_schedule: str,
                               context_stride: int, closed_loop: bool, fuse_method: str) -> tuple[Any]:
    """Context windows along a Wan latent's frame axis; lengths are given in video frames
    (81 frames: 21 latent frames, overlap 30: 8)."""
    length = max(wan_latent_frames(context_length), 1)
    overlap = max(wan_latent_frames(context_overlap), 0)
    return _patched(model, length, overlap, context_schedule, context_stride, closed_loop, fuse_method, dim=2)

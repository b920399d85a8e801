"""The context-window nodes of today's ComfyUI (comfy_extras/nodes_context_windows.py, V3):
`ContextWindowsManual` (any latent axis, `dim`) and `WanContextWindowsManual` (dim 2, lengths in
video frames: `(n - 1) // 4 + 1` latent frames, the overlap `n // 4`).

Each returns a clone of the MODEL whose model options carry the context handler
(comfy_core/sampling/context_windows.py), which the sampler's cond batching honours; the input
MODEL is never changed. Today's inputs over 0.3.64's: `freenoise` (FreeNoise noise rescheduling,
a sampler wrapper), `cond_retain_index_list` / `latent_retain_index_list` ("0": every window keeps
the start frame), `split_conds_to_windows` (one combined conditioning per region) and
`causal_window_fix` (on by default); Wan's node has `retain_first_frame` for the cond list "0".
Workflows saved with 0.3.64's widgets load: the editor (and graph/editor_workflow.py) fills the
widgets a file lacks with their defaults.
"""
from __future__ import annotations

from typing import Any

from graph.context import current
from graph.native import MAX_RESOLUTION
from graph import v3_schema as v3
import nodes.checks as checks
from nodes.errors import NodeInputError

# Names kept here (not imported from comfy_core) so that registering the nodes and rendering
# /object_info import no torch; tests hold them equal to comfy_core's ContextSchedules / ContextFuseMethods.
SCHEDULES = ["standard_static", "standard_uniform", "looped_uniform", "batched"]
FUSE_METHODS = ["pyramid", "relative", "flat", "overlap-linear"]
MODULE = "comfy_extras.nodes_context_windows"
MODEL_TIP = "The model to apply context windows to during sampling."
SCHEDULE_TIP = "Step-dependent scheduling algorithm for context windows."
STRIDE_TIP = "The stride of the context window; only applicable to uniform schedules."
LOOP_TIP = "Whether to close the context window loop; only applicable to looped schedules."
FUSE_TIP = "The method to use to fuse the context windows."
FREENOISE_TIP = "Whether to apply FreeNoise noise shuffling, improves window blending."
SPLIT_TIP = ("Whether to split multiple conditionings (created by ConditionCombine) to each window based on region "
             "index.")
OUTPUTS = [v3.Output("MODEL", tooltip="The model with context windows applied during sampling.")]


def _check_interrupt(*_args: Any) -> None:
    """EVALUATE_CONTEXT_WINDOWS callback: a cancelled prompt stops between windows (as ComfyUI's
    handler checks `throw_exception_if_processing_interrupted` there)."""
    ctx = current()
    if ctx is not None:
        ctx.check_interrupt()


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise NodeInputError(name, "a BOOLEAN", repr(value))
    return value


def _patched(model: Any, context_length: int, context_overlap: int, context_schedule: str, context_stride: int,
             closed_loop: bool, fuse_method: str, dim: int, freenoise: bool = False, cond_retain_index_list: Any = "",
             split_conds_to_windows: bool = False, latent_retain_index_list: Any = "",
             causal_window_fix: bool = True) -> tuple[Any]:
    from comfy_core.wrappers import add_callback_with_key
    from comfy_core.sampling.context_schedules import ContextWindowError
    from comfy_core.sampling.context_windows import (
        IndexListCallbacks, apply_context_windows, context_handler, parse_index_list,
    )

    model = checks.model(model)
    if context_schedule not in SCHEDULES:
        raise NodeInputError("context_schedule", f"one of {SCHEDULES}", repr(context_schedule))
    if fuse_method not in FUSE_METHODS:
        raise NodeInputError("fuse_method", f"one of {FUSE_METHODS}", repr(fuse_method))
    if context_schedule != "batched" and context_overlap >= context_length:
        raise NodeInputError("context_overlap", f"less than the context length ({context_length} latent frames) "
                             f"for the {context_schedule} schedule", f"{context_overlap} latent frames")
    for name, value in (("cond_retain_index_list", cond_retain_index_list),
                        ("latent_retain_index_list", latent_retain_index_list)):
        try:
            parse_index_list(value, name)
        except ContextWindowError:
            raise NodeInputError(name, "comma-separated frame indices >= 0, like '0' or '0,2'", repr(value)) from None
    handler = context_handler(context_schedule, fuse_method, context_length, context_overlap, context_stride,
                              closed_loop, dim, freenoise=_flag(freenoise, "freenoise"),
                              cond_retain_index_list=cond_retain_index_list,
                              split_conds_to_windows=_flag(split_conds_to_windows, "split_conds_to_windows"),
                              latent_retain_index_list=latent_retain_index_list,
                              causal_window_fix=_flag(causal_window_fix, "causal_window_fix"))
    add_callback_with_key(IndexListCallbacks.EVALUATE_CONTEXT_WINDOWS, "interrupt", _check_interrupt,
                          handler.callbacks)
    return (apply_context_windows(model, handler),)


@v3.v3_node("ContextWindowsManual", display_name="Context Windows (Manual)", category="model/patch",
            python_module=MODULE, description="Manually set context windows.", experimental=True,
            inputs=[v3.Socket("model", "MODEL", tooltip=MODEL_TIP),
                    v3.Int("context_length", min=1, default=16, tooltip="The length of the context window."),
                    v3.Int("context_overlap", min=0, default=4, tooltip="The overlap of the context window."),
                    v3.Combo("context_schedule", SCHEDULES, default="standard_static", tooltip=SCHEDULE_TIP),
                    v3.Int("context_stride", min=1, default=1, tooltip=STRIDE_TIP),
                    v3.Boolean("closed_loop", default=False, tooltip=LOOP_TIP),
                    v3.Combo("fuse_method", FUSE_METHODS, default="pyramid", tooltip=FUSE_TIP),
                    v3.Int("dim", min=0, max=5, default=0, tooltip="The dimension to apply the context windows to."),
                    v3.Boolean("freenoise", default=False, tooltip=FREENOISE_TIP),
                    v3.String("cond_retain_index_list", default="",
                              tooltip="List of latent indices to retain in the conditioning tensors for each window. "
                                      "For concat-style I2V models (e.g. Wan I2V, HunyuanVideo I2V, Cosmos I2V, SVD) "
                                      "the encoded start image lives in the c_concat conditioning channels; setting "
                                      "this to '0' will retain that start image content at sub-pos 0 of every "
                                      "window."),
                    v3.Boolean("split_conds_to_windows", default=False, tooltip=SPLIT_TIP),
                    v3.String("latent_retain_index_list", default="",
                              tooltip="List of latent indices to retain in the noise latent itself for each window. "
                                      "Use for workflows where reference content (e.g. a start image) lives directly "
                                      "in the noise latent rather than in separate conditioning channels (e.g. "
                                      "inplace-style I2V like LTXV, AnimateDiff). Independent of "
                                      "cond_retain_index_list."),
                    v3.Boolean("causal_window_fix", default=True,
                               tooltip="Whether to add a causal fix frame to non-0-indexed context windows.")],
            outputs=OUTPUTS)
def context_windows_manual(model: Any, context_length: int, context_overlap: int, context_schedule: str,
                           context_stride: int, closed_loop: bool, fuse_method: str, dim: int, freenoise: bool = False,
                           cond_retain_index_list: Any = "", split_conds_to_windows: bool = False,
                           latent_retain_index_list: Any = "", causal_window_fix: bool = True) -> tuple[Any]:
    """Sample in windows of `context_length` along latent axis `dim` (0: batch as frames)."""
    return _patched(model, context_length, context_overlap, context_schedule, context_stride, closed_loop,
                    fuse_method, dim, freenoise, cond_retain_index_list, split_conds_to_windows,
                    latent_retain_index_list, causal_window_fix)


def wan_latent_frames(frames: int) -> int:
    """Video frames to Wan latent frames (4x temporal compression, the first frame alone)."""
    return (frames - 1) // 4 + 1


@v3.v3_node("WanContextWindowsManual", display_name="Wan Context Windows", category="model/patch/wan",
            python_module=MODULE, description="Set context windows for Wan-like models.", experimental=True,
            inputs=[v3.Socket("model", "MODEL", tooltip=MODEL_TIP),
                    v3.Int("context_length", min=1, max=MAX_RESOLUTION, step=4, default=81,
                           tooltip="The length of the context window in real frames. Must be 4*n + 1."),
                    v3.Int("context_overlap", min=0, default=30,
                           tooltip="The overlap of the context window in real frames."),
                    v3.Combo("context_schedule", SCHEDULES, default="standard_uniform", tooltip=SCHEDULE_TIP),
                    v3.Int("context_stride", min=1, default=1, tooltip=STRIDE_TIP, advanced=True),
                    v3.Boolean("closed_loop", default=False, tooltip=LOOP_TIP, advanced=True),
                    v3.Combo("fuse_method", FUSE_METHODS, default="pyramid", tooltip=FUSE_TIP),
                    v3.Boolean("freenoise", default=True, tooltip=FREENOISE_TIP, advanced=True),
                    v3.Boolean("retain_first_frame", default=False,
                               tooltip="Retain the first I2V frame in every context window (may help retain initial "
                                       "reference)."),
                    v3.Boolean("split_conds_to_windows", default=False, tooltip=SPLIT_TIP, advanced=True)],
            outputs=OUTPUTS)
def wan_context_windows_manual(model: Any, context_length: int, context_overlap: int, context_schedule: str,
                               context_stride: int, closed_loop: bool, fuse_method: str, freenoise: bool = True,
                               retain_first_frame: bool = False, split_conds_to_windows: bool = False) -> tuple[Any]:
    """Context windows along a Wan latent's frame axis; lengths are given in video frames
    (81 frames: 21 latent frames; overlap 30: 7); `retain_first_frame` keeps the start frame's
    conds (I2V's concat latent) at the start of every window."""
    length = max(wan_latent_frames(context_length), 1)
    overlap = max(context_overlap // 4, 0)
    retained = "0" if _flag(retain_first_frame, "retain_first_frame") else ""
    return _patched(model, length, overlap, context_schedule, context_stride, closed_loop, fuse_method, 2,
                    freenoise, retained, split_conds_to_windows)

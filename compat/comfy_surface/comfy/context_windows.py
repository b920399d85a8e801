"""ComfyUI's `comfy.context_windows` for node packs (comfy_core/sampling/context_windows.py and
context_schedules.py): the handler, windows, callbacks, schedule and fuse-method names, the
`create_windows_*` / `create_weights_*` functions and the `prepare_sampling` wrapper, resolved on
first read (so importing this module pulls no torch in)."""
from compat.facade import facade

_HANDLER = "comfy_core.sampling.context_windows"
_SCHEDULES = "comfy_core.sampling.context_schedules"

facade(__name__, {
    **{name: f"{_HANDLER}:{name}" for name in (
        "ContextWindowABC", "ContextHandlerABC", "IndexListContextWindow", "IndexListCallbacks",
        "IndexListContextHandler", "ContextResults", "match_weights_to_dim", "get_shape_for_dim",
        "create_prepare_sampling_wrapper", "_prepare_sampling_wrapper", "does_window_roll_over",
        "create_sampler_sample_wrapper", "_sampler_sample_wrapper", "apply_freenoise")},
    **{name: f"{_SCHEDULES}:{name}" for name in (
        "ContextSchedule", "ContextFuseMethod", "ContextSchedules", "ContextFuseMethods", "CONTEXT_MAPPING",
        "FUSE_MAPPING", "create_windows_uniform_looped", "create_windows_uniform_standard",
        "create_windows_static_standard", "create_windows_batched", "create_windows_default",
        "get_matching_context_schedule", "get_matching_fuse_method", "get_context_weights", "create_weights_flat",
        "create_weights_pyramid", "create_weights_overlap_linear", "ordered_halving", "get_missing_indexes",
        "shift_window_to_start", "shift_window_to_end")},
})

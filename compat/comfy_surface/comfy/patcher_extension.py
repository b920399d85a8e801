"""ComfyUI's `comfy.patcher_extension` for node packs (comfy_core/wrappers.py): the
wrapper and callback kinds, their dict helpers and `WrapperExecutor`, run where ComfyUI runs them."""
from compat.facade import facade

facade(__name__, {name: f"comfy_core.wrappers:{name}" for name in (
    "CallbacksMP", "WrappersMP", "WrapperExecutor", "PatcherInjection", "add_callback", "add_callback_with_key",
    "get_callbacks_with_key", "get_all_callbacks", "add_wrapper", "add_wrapper_with_key", "get_wrappers_with_key",
    "get_all_wrappers", "copy_nested_dicts", "merge_nested_dicts")})

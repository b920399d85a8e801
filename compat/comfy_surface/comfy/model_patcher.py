"""ComfyUI's `comfy.model_patcher` for node packs: compat's `ModelPatcher` (our core patcher with
ComfyUI's `set_model_*` methods, compat/mp_model_patcher.py; every MODEL our loaders build in a
session's node calls is one), so pack subclasses and `isinstance` checks see the real class;
importable without torch (names resolve on first read, compat/facade.py)."""
from compat.facade import facade

facade(__name__, {
    "ModelPatcher": "compat.mp_model_patcher:ModelPatcher",
    "PatcherInjection": "comfy_core.wrappers:PatcherInjection",
    "CallbacksMP": "comfy_core.wrappers:CallbacksMP",
    "WrappersMP": "comfy_core.wrappers:WrappersMP",
    "WrapperExecutor": "comfy_core.wrappers:WrapperExecutor",
    "set_model_options_patch_replace": "compat.mp_model_patcher:set_model_options_patch_replace",
    "set_model_options_post_cfg_function": "compat.mp_model_patcher:set_model_options_post_cfg_function",
    "set_model_options_pre_cfg_function": "compat.mp_model_patcher:set_model_options_pre_cfg_function",
    "create_model_options_clone": "compat.mp_model_patcher:create_model_options_clone",
    "create_hook_patches_clone": "compat.mp_model_patcher:create_hook_patches_clone",
})

"""ComfyUI's `comfy.model_patcher` for node packs: OUR `ModelPatcher` (every MODEL our loaders
return is one), so pack subclasses and `isinstance` checks see the real class; importable
without torch (names resolve on first read, compat/facade.py)."""
from compat.facade import facade

facade(__name__, {
    "ModelPatcher": "comfy_core.patching.model:ModelPatcher",
    "PatcherInjection": "comfy_core.wrappers:PatcherInjection",
    "CallbacksMP": "comfy_core.wrappers:CallbacksMP",
    "WrappersMP": "comfy_core.wrappers:WrappersMP",
    "WrapperExecutor": "comfy_core.wrappers:WrapperExecutor",
    "set_model_options_patch_replace": "comfy_core.patching.model_options:set_model_options_patch_replace",
    "set_model_options_post_cfg_function": "comfy_core.patching.model_options:set_model_options_post_cfg_function",
    "set_model_options_pre_cfg_function": "comfy_core.patching.model_options:set_model_options_pre_cfg_function",
    "create_model_options_clone": "comfy_core.patching.model_options:create_model_options_clone",
    "create_hook_patches_clone": "comfy_core.patching.model_options:create_hook_patches_clone",
})

"""ComfyUI's `comfy.model_patcher` for node packs: compat's `ModelPatcher` (our core patcher with
ComfyUI's `set_model_*` methods, compat/mp_model_patcher.py; every MODEL our loaders build in a
session's node calls is one), so pack subclasses and `isinstance` checks see the real class;
importable without torch (names resolve on first read, compat/facade.py). Today's names:
`CoreModelPatcher` (the class ComfyUI's loaders build: `ModelPatcher`, as without dynamic VRAM),
`ModelPatcherDynamic` (a subclass no loader here builds), `get_key_weight`,
`low_vram_patch_estimate_vram` (compat/mp_load_list.py) and `QuantizedTensor` (comfy.quant_ops')."""
from compat.facade import facade

facade(__name__, {
    "ModelPatcher": "compat.mp_model_patcher:ModelPatcher",
    # today's: the class loaders build (ModelPatcher here: no dynamic VRAM) and the dynamic one
    "CoreModelPatcher": "compat.mp_model_patcher:LOADER_PATCHER_CLASS",
    "ModelPatcherDynamic": "compat.mp_model_patcher:ModelPatcherDynamic",
    "QuantizedTensor": "compat.quant_ops_api:QuantizedTensor",
    "get_key_weight": "compat.mp_load_list:get_key_weight",
    "low_vram_patch_estimate_vram": "compat.mp_load_list:low_vram_patch_estimate_vram",
    "LOWVRAM_PATCH_ESTIMATE_MATH_FACTOR": "compat.mp_load_list:LOWVRAM_PATCH_ESTIMATE_MATH_FACTOR",
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

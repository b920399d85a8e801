"""ComfyUI's `comfy.hooks` for node packs: ComfyUI's hook classes and helpers as adapters onto our
scheduled hooks (compat/hooks_api.py over comfy_core/hooks): weight hooks, the other hook kinds,
hook groups, keyframes, `load_hook_lora_for_models`, and attaching hooks to conditioning."""
from compat.facade import facade

facade(__name__, {name: f"compat.hooks_api:{name}" for name in (
    "EnumHookMode", "EnumHookType", "EnumWeightTarget", "EnumHookScope", "Hook", "WeightHook", "ObjectPatchHook",
    "AdditionalModelsHook", "TransformerOptionsHook", "WrapperHook", "InjectionsHook", "HookGroup", "HookKeyframe",
    "HookKeyframeGroup", "InterpolationMethod", "default_should_register", "create_target_dict",
    "get_sorted_list_via_attr", "create_transformer_options_from_hooks", "create_hook_lora",
    "create_hook_model_as_lora", "get_patch_weights_from_model", "load_hook_lora_for_models",
    "conditioning_set_values_with_hooks", "set_hooks_for_conditioning", "set_timesteps_for_conditioning",
    "set_mask_for_conditioning", "combine_conditioning", "combine_with_new_conds", "set_conds_props",
    "set_conds_props_and_combine", "set_default_conds_and_combine")})

"""ComfyUI's `comfy.hooks` for node packs (comfy_core/hooks): weight hooks, hook groups,
keyframes, and attaching them to conditioning."""
from compat.facade import facade

facade(__name__, {
    **{name: f"comfy_core.hooks.hook:{name}" for name in (
        "EnumHookType", "EnumWeightTarget", "HookGroup", "WeightHook", "create_hook_lora", "create_hook_model_as_lora")},
    "HookKeyframe": "comfy_core.hooks.keyframes:HookKeyframe",
    "HookKeyframeGroup": "comfy_core.hooks.keyframes:HookKeyframeGroup",
    "EnumHookMode": "comfy_core.patching.model_extensions:HookMode",
    "set_hooks_for_conditioning": "comfy_core.hooks.conditioning:set_hooks",
    "set_conds_props": "comfy_core.hooks.conditioning:set_conds_props",
    "set_conds_props_and_combine": "comfy_core.hooks.conditioning:set_conds_props_and_combine",
    "set_default_conds_and_combine": "comfy_core.hooks.conditioning:set_default_conds_and_combine",
})

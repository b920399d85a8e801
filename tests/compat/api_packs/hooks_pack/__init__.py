"""A fixture pack that uses ComfyUI's hooks API as AnimateDiff-Evolved and Advanced-ControlNet do:
AnimateDiff's (deprecated) LoRA-hook loader reads the file with `comfy.utils.load_torch_file` and
calls `comfy.hooks.load_hook_lora_for_models`; its "Set Model LoRA Hook" calls
`set_hooks_for_conditioning`; its keyframe node builds `HookKeyframeGroup().add(HookKeyframe(...))`;
Advanced-ControlNet makes a `WrapperHook` with a `hook_id` and a `custom_should_register`; a
hooked-only `TransformerOptionsHook` carries an attention patch for one conditioning; a pack
registers a `WeightHook()`'s patches on a ModelPatcher itself (`add_hook_patches`)."""
import comfy.hooks
import comfy.lora
import comfy.patcher_extension
import comfy.utils
import folder_paths
from comfy.hooks import HookGroup, HookKeyframe, HookKeyframeGroup


class MaskableLoraLoader:
    RETURN_TYPES = ("MODEL", "CLIP", "HOOKS")
    FUNCTION = "load_lora"
    CATEGORY = "hooks_pack"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "clip": ("CLIP",),
                             "lora_name": (folder_paths.get_filename_list("loras"),),
                             "strength_model": ("FLOAT", {"default": 1.0}),
                             "strength_clip": ("FLOAT", {"default": 1.0})}}

    def load_lora(self, model, clip, lora_name, strength_model, strength_clip):
        if strength_model == 0 and strength_clip == 0:
            return (model, clip, None)
        lora_path = folder_paths.get_full_path("loras", lora_name)
        lora = comfy.utils.load_torch_file(lora_path, safe_load=True)
        model_lora, clip_lora, hooks = comfy.hooks.load_hook_lora_for_models(
            model=model, clip=clip, lora=lora, strength_model=strength_model, strength_clip=strength_clip)
        return (model_lora, clip_lora, hooks)


class SetModelLoraHook:
    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "attach_lora_hook"
    CATEGORY = "hooks_pack"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"conditioning": ("CONDITIONING",), "lora_hook": ("HOOKS",)}}

    def attach_lora_hook(self, conditioning, lora_hook: HookGroup):
        return (comfy.hooks.set_hooks_for_conditioning(conditioning, lora_hook),)


class LoraHookKeyframes:
    RETURN_TYPES = ("HOOK_KEYFRAMES",)
    FUNCTION = "create_hook_keyframes"
    CATEGORY = "hooks_pack"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"strength": ("FLOAT",), "start_percent": ("FLOAT",), "guarantee_steps": ("INT",)},
                "optional": {"prev_hook_kf": ("HOOK_KEYFRAMES",)}}

    def create_hook_keyframes(self, strength, start_percent, guarantee_steps, prev_hook_kf=None):
        if prev_hook_kf:
            prev_hook_kf = prev_hook_kf.clone()
        else:
            prev_hook_kf = HookKeyframeGroup()
        prev_hook_kf.add(HookKeyframe(strength=strength, start_percent=start_percent, guarantee_steps=guarantee_steps))
        return (prev_hook_kf,)


class SetHookKeyframes:
    RETURN_TYPES = ("HOOKS",)
    FUNCTION = "set_keyframes"
    CATEGORY = "hooks_pack"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"hooks": ("HOOKS",), "hook_kf": ("HOOK_KEYFRAMES",)}}

    def set_keyframes(self, hooks: HookGroup, hook_kf: HookKeyframeGroup):
        hooks = hooks.clone()
        hooks.set_keyframes_on_hooks(hook_kf=hook_kf)
        return (hooks,)


def should_register_once(hook, model, model_options, target_dict, registered):
    """Advanced-ControlNet's rule: register the wrapper only when the options lack it."""
    wrappers = comfy.patcher_extension.get_wrappers_with_key(comfy.patcher_extension.WrappersMP.OUTER_SAMPLE,
                                                            "hooks_pack", model_options, is_model_options=True)
    return len(wrappers) == 0


def create_wrapper_hooks(wrapper):
    """Advanced-ControlNet's create_wrapper_hooks."""
    wrappers = {}
    comfy.patcher_extension.add_wrapper_with_key(comfy.patcher_extension.WrappersMP.OUTER_SAMPLE, "hooks_pack",
                                                 wrapper, transformer_options=wrappers)
    hooks = comfy.hooks.HookGroup()
    hook = comfy.hooks.WrapperHook(wrappers)
    hook.hook_id = "hooks_pack"
    hook.custom_should_register = should_register_once
    hooks.add(hook)
    return hooks


def create_hooked_only_patch_hooks(attn1_patch):
    """A hook whose `transformer_options` (an attention patch) apply to the passes of the
    conditioning that carries it only (`EnumHookScope.HookedOnly`)."""
    hooks = comfy.hooks.HookGroup()
    hooks.add(comfy.hooks.TransformerOptionsHook({"patches": {"attn1_patch": [attn1_patch]}},
                                                 hook_scope=comfy.hooks.EnumHookScope.HookedOnly))
    return hooks


def register_lora_on_model(model, lora, strength):
    """A pack that registers a weight hook's patches on a clone of the model itself."""
    key_map = comfy.lora.model_lora_keys_unet(model.model, {})
    patches = comfy.lora.load_lora(lora, key_map)
    hooks = comfy.hooks.HookGroup()
    hook = comfy.hooks.WeightHook()
    hooks.add(hook)
    model = model.clone()
    keys = model.add_hook_patches(hook=hook, patches=patches, strength_patch=strength)
    return model, hooks, keys


NODE_CLASS_MAPPINGS = {"HP_MaskableLoraLoader": MaskableLoraLoader, "HP_SetModelLoraHook": SetModelLoraHook,
                       "HP_LoraHookKeyframes": LoraHookKeyframes, "HP_SetHookKeyframes": SetHookKeyframes}

"""ComfyUI's `comfy.model_patcher.ModelPatcher` for node packs: our core patcher
(comfy_core/patching/model.py, patches and options held as data) with ComfyUI's `set_model_*`
methods and its other members our runtime never calls (the accessors of callbacks, attachments,
injections and additional models, `model_patches_models`, `model_patches_to`,
`current_loaded_device`, `memory_required`, `calculate_weight`) on top.

Each `set_model_*` method writes the `model_options` entry ComfyUI's writes (sampler hooks at the
top level, block patches under `transformer_options["patches"|"patches_replace"]`) through the
core's data methods (`set_option`, `add_option_function`, `add_block_patch`, `set_block_replace`),
so the sampler and the blocks read them exactly as they read the built-in nodes' patches.

A patcher our runtime builds where a session's extension points are in force becomes ComfyUI's
class for it (`ExtensionPoints.model_patcher_class`, which `compat.install` sets to
`compat.mp_model_classes.comfy_patcher_class`, answering `comfy_class_for`): a MODEL's patcher
is `ModelPatcher`, a CLIP's `ClipPatcher` (ComfyUI's `CLIP.patcher` is a ModelPatcher too), so
`isinstance(m, comfy.model_patcher.ModelPatcher)` and `m.set_model_attn2_replace(...)` work, and
clones keep the class. This module imports torch; `comfy_patcher_class` imports it only when a
patcher is built, so start-up stays torch-free.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

from comfy_core.patching.clip import ClipPatcher as CoreClipPatcher
from comfy_core.patching.model import ModelPatcher as CoreModelPatcher
# comfy/model_patcher.py's module functions, homed here so a pack reassigning one changes this
# module, never comfy_core's (the runtime imports its own by name).
from comfy_core.patching.model_options import (create_hook_patches_clone, create_model_options_clone,  # noqa: F401
                                               set_model_options_patch_replace,
                                               set_model_options_post_cfg_function,
                                               set_model_options_pre_cfg_function)


_NO_HOOK_PATCHES: Mapping = MappingProxyType({})


def _positional_arity(fn: Callable) -> int | None:
    """How many parameters `fn` declares (None when it cannot be inspected), as ComfyUI counts them."""
    try:
        return len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class _OldCfgFunction:
    """ComfyUI's pre-args `sampler_cfg_function(cond, uncond, cond_scale)` seen through the args form."""

    fn: Callable

    def __call__(self, args: dict) -> Any:
        return self.fn(args["cond"], args["uncond"], args["cond_scale"])


class ComfyModelPatcherMethods:
    """ComfyUI's `set_model_*` methods and accessors, over the core patcher's data."""

    # --- sampler-level hooks (read by the sampler) ---

    def set_model_sampler_cfg_function(self, sampler_cfg_function: Callable, disable_cfg1_optimization: bool = False) -> None:
        """Replace CFG by `fn(args) -> noise prediction` (see comfy_core/sampling/cfg.py); a function of
        three parameters is ComfyUI's old form `fn(cond, uncond, cond_scale)` and is adapted."""
        if _positional_arity(sampler_cfg_function) == 3:
            sampler_cfg_function = _OldCfgFunction(sampler_cfg_function)
        self.set_option("sampler_cfg_function", sampler_cfg_function)
        if disable_cfg1_optimization:
            self.set_option("disable_cfg1_optimization", True)

    def disable_model_cfg1_optimization(self) -> None:
        """ComfyUI's: the sampler runs the negative even at CFG 1 (a patch that reads it, e.g.
        NAG's, needs both halves of the batch)."""
        self.set_option("disable_cfg1_optimization", True)

    def set_model_sampler_post_cfg_function(self, post_cfg_function: Callable, disable_cfg1_optimization: bool = False) -> None:
        """Append `fn(args) -> x0 prediction`, run after CFG in order (args["denoised"] is the result so far)."""
        self.add_option_function("sampler_post_cfg_function", post_cfg_function, disable_cfg1_optimization)

    def set_model_sampler_pre_cfg_function(self, pre_cfg_function: Callable, disable_cfg1_optimization: bool = False) -> None:
        """Append `fn(args) -> conds_out`, run before CFG on the list [positive x0, negative x0, ...]."""
        self.add_option_function("sampler_pre_cfg_function", pre_cfg_function, disable_cfg1_optimization)

    def set_model_sampler_calc_cond_batch_function(self, sampler_calc_cond_batch_function: Callable) -> None:
        """Replace the batching of conds: `fn(args) -> [x0 per cond]` (comfy_core/sampling/cfg.py).
        The pack's function sees `args["conds"]` as ComfyUI hands them, `model_conds` holding
        `comfy.conds` wrappers (ComfyUI-ppm's CADS edits `.cond` and `_copy_with`), and may pass
        them back to `comfy.samplers.calc_cond_batch`, which batches wrappers as values."""
        self.set_option("sampler_calc_cond_batch_function", _ComfyCondsCall(sampler_calc_cond_batch_function))

    def set_model_unet_function_wrapper(self, unet_wrapper_function: Callable) -> None:
        self.set_option("model_function_wrapper", unet_wrapper_function)

    def set_model_denoise_mask_function(self, denoise_mask_function: Callable) -> None:
        self.set_option("denoise_mask_function", denoise_mask_function)

    # --- block-level patches (read by the model's blocks) ---

    def set_model_patch(self, patch: Callable, name: str) -> None:
        self.add_block_patch(name, patch)

    def set_model_patch_replace(self, patch: Callable, name: str, block_name: str, number: int,
                                transformer_index: int | None = None) -> None:
        block = (block_name, number) if transformer_index is None else (block_name, number, transformer_index)
        self.set_block_replace(name, block, patch)

    def set_model_attn1_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "attn1_patch")

    def set_model_attn2_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "attn2_patch")

    def set_model_attn1_output_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "attn1_output_patch")

    def set_model_attn2_output_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "attn2_output_patch")

    def set_model_input_block_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "input_block_patch")

    def set_model_input_block_patch_after_skip(self, patch: Callable) -> None:
        self.set_model_patch(patch, "input_block_patch_after_skip")

    def set_model_output_block_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "output_block_patch")

    def set_model_emb_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "emb_patch")

    def set_model_forward_timestep_embed_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "forward_timestep_embed_patch")

    def set_model_double_block_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "double_block")

    def set_model_post_input_patch(self, patch: Callable) -> None:
        self.set_model_patch(patch, "post_input")

    def set_model_rope_options(self, scale_x: float, shift_x: float, scale_y: float, shift_y: float,
                               scale_t: float, shift_t: float, **kwargs: Any) -> None:
        """ScaleROPE's option: `transformer_options["rope_options"]` (comfy_core/attention/rope.py)."""
        from comfy_core.attention.rope import with_rope_options

        self.model_options["transformer_options"] = with_rope_options(
            self.model_options.get("transformer_options"), scale_x=scale_x, shift_x=shift_x, scale_y=scale_y,
            shift_y=shift_y, scale_t=scale_t, shift_t=shift_t)

    def set_model_attn1_replace(self, patch: Callable, block_name: str, number: int,
                                transformer_index: int | None = None) -> None:
        self.set_model_patch_replace(patch, "attn1", block_name, number, transformer_index)

    def set_model_attn2_replace(self, patch: Callable, block_name: str, number: int,
                                transformer_index: int | None = None) -> None:
        self.set_model_patch_replace(patch, "attn2", block_name, number, transformer_index)

    def model_patches_models(self) -> list:
        """Models that block patches carry (objects with `.models()`), loaded beside this one."""
        to = self.model_options.get("transformer_options", {})
        found = [p for plist in to.get("patches", {}).values() for p in plist]
        found += [p for by_block in to.get("patches_replace", {}).values() for p in by_block.values()]
        wrapper = self.model_options.get("model_function_wrapper")
        if wrapper is not None:
            found.append(wrapper)
        return [m for p in found if hasattr(p, "models") for m in p.models()]

    def model_patches_to(self, device: Any) -> None:
        """Move tensors held by block patches (objects with `.to`) to `device` (or cast to a dtype)."""
        to = self.model_options.get("transformer_options", {})
        for patch_list in to.get("patches", {}).values():
            for i, patch in enumerate(patch_list):
                if hasattr(patch, "to"):
                    patch_list[i] = patch.to(device)
        for by_block in to.get("patches_replace", {}).values():
            for block, patch in by_block.items():
                if hasattr(patch, "to"):
                    by_block[block] = patch.to(device)
        wrapper = self.model_options.get("model_function_wrapper")
        if hasattr(wrapper, "to"):
            self.model_options["model_function_wrapper"] = wrapper.to(device)

    # --- callbacks, wrappers, attachments, injections, additional models (data on the core) ---

    def add_callback(self, call_type: str, callback: Callable) -> None:
        self.add_callback_with_key(call_type, None, callback)

    def add_callback_with_key(self, call_type: str, key: Any, callback: Callable) -> None:
        self.callbacks.setdefault(call_type, {}).setdefault(key, []).append(callback)

    def remove_callbacks_with_key(self, call_type: str, key: Any) -> None:
        self.callbacks.get(call_type, {}).pop(key, None)

    def get_callbacks(self, call_type: str, key: Any) -> list[Callable]:
        return self.callbacks.get(call_type, {}).get(key, [])

    def add_wrapper(self, wrapper_type: str, wrapper: Callable) -> None:
        self.add_wrapper_with_key(wrapper_type, None, wrapper)

    def set_attachments(self, key: str, attachment: Any) -> None:
        self.attachments[key] = attachment

    def remove_attachments(self, key: str) -> None:
        self.attachments.pop(key, None)

    def get_attachment(self, key: str) -> Any:
        return self.attachments.get(key)

    def set_injections(self, key: str, injections: list) -> None:
        self.injections[key] = list(injections)

    def remove_injections(self, key: str) -> None:
        self.injections.pop(key, None)

    def get_injections(self, key: str) -> list | None:
        return self.injections.get(key)

    def set_additional_models(self, key: str, models: list[Any]) -> None:
        self.additional_models[key] = list(models)

    def remove_additional_models(self, key: str) -> None:
        self.additional_models.pop(key, None)

    def get_additional_models_with_key(self, key: str) -> list[Any]:
        return self.additional_models.get(key, [])

    def set_hook_mode(self, hook_mode: Any) -> None:
        self.hook_mode = hook_mode

    def clone(self) -> Any:
        n = super().clone()
        if "_hook_patches" in self.__dict__:  # a clone's registrations are its own (ComfyUI's rule)
            from comfy_core.patching.model_options import create_hook_patches_clone

            n.__dict__["_hook_patches"] = create_hook_patches_clone(self.__dict__["_hook_patches"])
        return n

    def clone_has_same_weights(self, clone: Any) -> bool:
        """True when `clone` patches the same module with the same weight patches."""
        return super().clone_has_same_weights(clone)

    # --- hook patches (ComfyUI's registration of weight hooks on the patcher) ---
    # ComfyUI keeps each registered weight hook's patches on the patcher (`hook_patches`, by hook
    # ref). Here they are data too: a sampling run's hook registration (comfy_core/hooks/sampling.py)
    # uses the patches registered for a hook's ref on the run's patcher when there are some
    # (comfy_core/hooks/patches.py `hook_patches`), else resolves the hook's own LoRA.

    @property
    def hook_patches(self) -> Mapping:
        """`{hook_ref: {parameter key: [PatchEntry, ...]}}` registered with `add_hook_patches`
        (read-only and empty until something is registered: reading never changes the patcher,
        whose cache signature counts its registrations)."""
        return self.__dict__.get("_hook_patches", _NO_HOOK_PATCHES)

    @hook_patches.setter
    def hook_patches(self, value: dict) -> None:
        self.__dict__["_hook_patches"] = value

    def add_hook_patches(self, hook: Any, patches: dict, strength_patch: float = 1.0,
                         strength_model: float = 1.0) -> list:
        """Register `patches` (ComfyUI's `{key: patch}`, keys as for `add_patches`; or entries
        already in `PatchEntry` form) for `hook`; returns the keys that name a weight here."""
        from comfy_core.weights.entries import PatchEntry

        known = self.weight_keys()
        current = self.__dict__.setdefault("_hook_patches", {}).setdefault(hook.hook_ref, {})
        added = []
        for raw_key, data in patches.items():
            key, offset, function = _split_patch_key(raw_key)
            if key not in known:
                continue
            entries = data if isinstance(data, list) and all(isinstance(e, PatchEntry) for e in data) else [
                PatchEntry(float(strength_patch), data, float(strength_model), offset, function)]
            current.setdefault(key, []).extend(entries)
            added.append(raw_key)
        return added

    def get_combined_hook_patches(self, hooks: Any) -> dict:
        """The registered patches of `hooks`' hooks, in order, each at its keyframe strength now."""
        from comfy_core.hooks.patches import combined

        if hooks is None:
            return {}
        return combined((self.hook_patches.get(h.hook_ref, {}), _keyframe_strength(h)) for h in hooks.hooks)

    def register_all_hook_patches(self, hooks: Any, target_dict: dict, model_options: dict | None = None,
                                  registered: Any = None) -> Any:
        """Register the weight hooks of `hooks` not registered yet (`hook.add_hook_patches`, or
        their patches for `target_dict["target"]`); the `ON_REGISTER_ALL_HOOK_PATCHES` callbacks
        run after. Returns the group of registered hooks."""
        from comfy_core.hooks.hook import EnumHookType, EnumWeightTarget
        from comfy_core.hooks.patches import hook_patches
        from comfy_core.patching.model_options import create_hook_patches_clone
        from comfy_core.wrappers import CallbacksMP
        from compat.hooks_api import HookGroup

        self.restore_hook_patches()
        registered = HookGroup() if registered is None else registered
        model_options = {} if model_options is None else model_options
        to_register = []
        for hook in hooks.get_type(EnumHookType.Weight):
            if hook.hook_ref in self.hook_patches:
                registered.add(hook)
            else:
                to_register.append(hook)
        if to_register:
            self.hook_patches_backup = create_hook_patches_clone(self.hook_patches)
            for hook in to_register:
                if hasattr(hook, "add_hook_patches"):
                    hook.add_hook_patches(self, model_options, target_dict, registered)
                else:  # our own WeightHook: its patches for the target
                    target = target_dict.get("target") or EnumWeightTarget.Model
                    self.add_hook_patches(hook, hook_patches(hook, target, self))
                    registered.add(hook)
        for callback in self.get_all_callbacks(CallbacksMP.ON_REGISTER_ALL_HOOK_PATCHES):
            callback(self, hooks, target_dict, model_options, registered)
        return registered

    def restore_hook_patches(self) -> None:
        """Back to the hook patches before the last `register_all_hook_patches` added some."""
        backup = self.__dict__.pop("hook_patches_backup", None)
        if backup is not None:
            self.hook_patches = backup

    def prepare_hook_patches_current_keyframe(self, t: Any, hook_group: Any, model_options: dict) -> None:
        """Move the keyframes of `hook_group` on for the step at sigma `t`: the sampling run's
        own cursors when `model_options` holds the run (the strengths the run applies), else each
        hook's keyframe group that can step itself (compat.hooks_api.HookKeyframeGroup)."""
        from comfy_core.hooks.sampling import HOOK_RUN_OPTION

        if hook_group is None:
            return
        run = model_options.get(HOOK_RUN_OPTION)
        if run is not None:
            run.prepare(t, hook_group, model_options)
            return
        for hook in hook_group.hooks:
            prepare = getattr(hook.hook_keyframe, "prepare_current_keyframe", None)
            if prepare is not None:
                prepare(t, model_options.get("transformer_options", {}))

    # --- devices, weights and dtype (ComfyUI's explicit forms) ---

    def current_loaded_device(self) -> Any:
        return self.current_device()

    def memory_required(self, input_shape: Any) -> float:
        return self.model.memory_required(input_shape=input_shape)

    def calculate_weight(self, patches: list, weight: Any, key: str, intermediate_dtype: Any = None) -> Any:
        """`weight` with ComfyUI-form patch entries applied (comfy.lora.calculate_weight)."""
        from comfy_core.weights.entries import calculate_weight

        return calculate_weight(weight, patches, key)

    def set_model_compute_dtype(self, dtype: Any) -> None:
        """Compute in `dtype` (weights cast per layer), as ComfyUI: the model's `manual_cast_dtype`."""
        self.add_object_patch("manual_cast_dtype", dtype)

    # --- today's dynamic-VRAM protocol (this runtime has no dynamic VRAM) ---

    def is_dynamic(self) -> bool:
        """False: weights are loaded and moved by our memory manager, never by comfy-aimdo's
        dynamic VRAM (ComfyUI's `ModelPatcher.is_dynamic`; its `ModelPatcherDynamic` says True)."""
        return False

    def partially_load(self, device_to: Any, extra_memory: int = 0, force_patch_weights: bool = False) -> int:
        """ComfyUI's "load up to `extra_memory` more bytes onto `device_to`": our memory manager
        places whole models (or plans a partial one itself, comfy_core/memory.py), so the whole
        model is kept loaded there, patched, as `load_models_gpu` keeps it; returns the bytes
        that became resident."""
        before = self.loaded_size()
        self.keep_loaded(device_to)
        return max(0, self.loaded_size() - before)

    def partially_unload(self, device_to: Any, memory_to_free: int = 0) -> int:
        """ComfyUI's "move weights to `device_to` until `memory_to_free` bytes are free": the
        whole model is released and moved there (see `partially_load`); returns the bytes freed."""
        before = self.loaded_size()
        self.unpatch_model(device_to)
        return max(0, before - self.loaded_size())

    def detach(self, unpatch_all: bool = True) -> Any:
        """ComfyUI's "this patcher stops being the loaded one": its model patches go to the
        offload device and, with `unpatch_all`, what `load_models_gpu` left applied comes off and
        the model moves there; ON_DETACH callbacks run; returns the model."""
        from comfy_core.wrappers import CallbacksMP

        self.model_patches_to(self.offload_device)
        if unpatch_all:
            self.unpatch_model(self.offload_device)
        for callback in self.get_all_callbacks(CallbacksMP.ON_DETACH):
            callback(self, unpatch_all)
        return self.model

    def _load_list(self, for_dynamic: bool = False, default_device: Any = None) -> list[tuple]:
        """ComfyUI's per-module load list of this patcher's model (compat/mp_load_list.py)."""
        from compat.mp_load_list import load_list

        return load_list(self, for_dynamic=for_dynamic, default_device=default_device)


def _split_patch_key(raw: Any) -> tuple[str, Any, Any]:
    """ComfyUI's patch key: a parameter name, or `(name, offset[, function])`."""
    from comfy_core.weights.entries import Offset

    if isinstance(raw, str):
        return raw, None, None
    if isinstance(raw, tuple) and raw and isinstance(raw[0], str):
        offset = Offset(*raw[1]) if len(raw) > 1 and raw[1] is not None else None
        return raw[0], offset, raw[2] if len(raw) > 2 else None
    raise TypeError(f"weight patch key must be a name or (name, offset[, function]), got {raw!r}")


def _keyframe_strength(hook: Any) -> float:
    """A hook's keyframe multiplier now: its group's current strength (compat groups step
    themselves), the resting one for our immutable groups."""
    group = hook.hook_keyframe
    strength = getattr(group, "strength", None)
    return float(strength) if strength is not None else group.resting_strength


class ModelPatcher(ComfyModelPatcherMethods, CoreModelPatcher):
    """ComfyUI's `ModelPatcher`: the core patcher plus ComfyUI's `set_model_*` methods. Packs'
    subclasses (ComfyUI-GGUF's, AnimateDiff's) keep their class through `clone()`."""


class ClipPatcher(CoreClipPatcher, ModelPatcher):
    """A CLIP's patcher as ComfyUI's: our text-encoder patcher, and a `ModelPatcher` above."""


class ModelPatcherDynamic(ModelPatcher):
    """Today's ComfyUI's dynamic-VRAM patcher class (comfy-aimdo loads its weights on demand),
    which ComfyUI's loaders build as `CoreModelPatcher` only when dynamic VRAM started. This
    runtime never starts it, so no loader builds one and `CoreModelPatcher` is `ModelPatcher`; the
    class is here for packs' `isinstance` checks and method wraps (ComfyUI-MultiGPU wraps its
    `_load_list`). One built by a pack is an ordinary patcher: `is_dynamic()` stays False, as no
    weight of it is loaded dynamically."""


# Today's `comfy.model_patcher.CoreModelPatcher`: the class ComfyUI's loaders build, ModelPatcher
# unless dynamic VRAM started. A pack assigning that name sets this; our loaders build patchers
# by `comfy_class_for`, not by this name.
LOADER_PATCHER_CLASS: type = ModelPatcher

_COMFY_CLASSES: dict[type, type] = {CoreModelPatcher: ModelPatcher, CoreClipPatcher: ClipPatcher}


def comfy_class_for(core_class: type) -> type | None:
    """ComfyUI's class for a patcher of our `core_class` (None: keep it)."""
    return _COMFY_CLASSES.get(core_class)


class _ComfyCondsCall:
    """A pack's `sampler_calc_cond_batch_function`, called with ComfyUI-shaped conds (see
    `ModelPatcher.set_model_sampler_calc_cond_batch_function`); `fn` is the pack's function."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn

    def __call__(self, args: dict) -> Any:
        from compat.mp_conds import comfy_entries

        return self.fn({**args, "conds": [comfy_entries(entries) for entries in args["conds"]]})

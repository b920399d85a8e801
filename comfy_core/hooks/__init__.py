"""Hooks: weight patches that conditioning entries carry into sampling (ComfyUI's comfy/hooks.py).

    hooks = create_hook_lora(lora_tensors, strength_model=1.0, strength_clip=1.0)   # HOOKS
    positive = set_conds_props([positive], 1.0, "default", hooks=hooks)[0]         # CONDITIONING
    # sampling runs the entries of each hook group with that group's patches on the model
    # (comfy_core/hooks/sampling.py, called from comfy_core/sampling/)

Modules: `hook` (WeightHook, HookGroup), `keyframes` (HookKeyframe, HookKeyframeGroup,
interpolation), `cursor` (keyframe stepping in a run), `patches` (a hook's weight patches for
a target), `conditioning` (attaching hooks, masks, ranges), `sampling` (HookRun), `schedule`
(CLIP schedules) and `clip` (HookedClip, SetClipHooks; imported on its own: it needs the text
encoders).
"""
from __future__ import annotations

from comfy_core.hooks.hook import (
    EnumHookType,
    EnumWeightTarget,
    HookGroup,
    WeightHook,
    create_hook_lora,
    create_hook_model_as_lora,
    patch_weights_from_model,
)
from comfy_core.hooks.keyframes import HookKeyframe, HookKeyframeGroup, INTERPOLATIONS, interpolate

__all__ = [
    "EnumHookType", "EnumWeightTarget", "HookGroup", "HookKeyframe", "HookKeyframeGroup", "INTERPOLATIONS",
    "WeightHook", "create_hook_lora", "create_hook_model_as_lora", "interpolate", "patch_weights_from_model",
]

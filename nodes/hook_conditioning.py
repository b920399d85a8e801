"""Hook nodes, part 2, with ComfyUI 0.3.64's names, sockets and semantics
(comfy_extras/nodes_hooks.py): attaching hooks, a mask and a timestep range to conditioning
(ConditioningSetProperties, ConditioningSetPropertiesAndCombine, PairConditioningSetProperties,
PairConditioningSetPropertiesAndCombine), default conditioning (ConditioningSetDefaultCombine,
PairConditioningSetDefaultCombine), PairConditioningCombine, ConditioningTimestepsRange and
SetClipHooks. Creating and combining hooks is nodes/hook_nodes.py.

The work is comfy_core/hooks/conditioning.py and comfy_core/hooks/clip.py; entries are copies,
inputs are never changed. `strength` weights the mask (`mask_strength`): without a mask it has
no effect, as in ComfyUI. TIMESTEPS_RANGE is a `(start_percent, end_percent)` tuple.
"""
from __future__ import annotations

from typing import Any, Callable

from graph.native import Boolean, Combo, Float, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.hook_nodes import MODULE, hooks_group

SET_COND_AREA = ["default", "mask bounds"]
_STRENGTH = dict(default=1.0, min=0.0, max=10.0, step=0.01)
_PROPS = [Float("strength", **_STRENGTH), Combo("set_cond_area", SET_COND_AREA),
          Input("mask", "MASK", optional=True), Input("hooks", "HOOKS", optional=True),
          Input("timesteps", "TIMESTEPS_RANGE", optional=True)]


def _cond(value: Any, name: str) -> list:
    return checks.conditioning(value, name)


def _timesteps(value: Any) -> tuple | None:
    if value is None:
        return None
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise NodeInputError("timesteps", "TIMESTEPS_RANGE (start_percent, end_percent)", describe(value))
    return tuple(value)


def _props(strength: float, set_cond_area: str, mask: Any, hooks: Any, timesteps: Any) -> dict:
    checks.choice(set_cond_area, SET_COND_AREA, "set_cond_area")
    return {"strength": checks.number(strength, "strength"), "set_cond_area": set_cond_area,
            "mask": None if mask is None else checks.mask_batch(mask, "mask"),
            "hooks": hooks_group(hooks, "hooks"), "timesteps": _timesteps(timesteps)}


def _hook_node(node_id: str, display_name: str, category: str, inputs: list, outputs: list) -> Callable:
    return node(node_id, display_name=display_name, category=f"advanced/hooks/{category}" if category else "advanced/hooks",
                experimental=True, python_module=MODULE, inputs=inputs, outputs=outputs)


_PAIR_OUT = [Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")]


@_hook_node("ConditioningSetProperties", "Cond Set Props", "cond single",
            [Input("cond_NEW", "CONDITIONING"), *_PROPS], [Output("CONDITIONING")])
def conditioning_set_properties(cond_NEW: list, strength: float, set_cond_area: str, mask: Any = None,
                                hooks: Any = None, timesteps: Any = None) -> tuple:
    from comfy_core.hooks.conditioning import set_conds_props

    (out,) = set_conds_props([_cond(cond_NEW, "cond_NEW")], **_props(strength, set_cond_area, mask, hooks, timesteps))
    return (out,)


@_hook_node("ConditioningSetPropertiesAndCombine", "Cond Set Props Combine", "cond single",
            [Input("cond", "CONDITIONING"), Input("cond_NEW", "CONDITIONING"), *_PROPS], [Output("CONDITIONING")])
def conditioning_set_properties_and_combine(cond: list, cond_NEW: list, strength: float, set_cond_area: str,
                                            mask: Any = None, hooks: Any = None, timesteps: Any = None) -> tuple:
    from comfy_core.hooks.conditioning import set_conds_props_and_combine

    (out,) = set_conds_props_and_combine([_cond(cond, "cond")], [_cond(cond_NEW, "cond_NEW")],
                                         **_props(strength, set_cond_area, mask, hooks, timesteps))
    return (out,)


@_hook_node("PairConditioningSetProperties", "Cond Pair Set Props", "cond pair",
            [Input("positive_NEW", "CONDITIONING"), Input("negative_NEW", "CONDITIONING"), *_PROPS], _PAIR_OUT)
def pair_conditioning_set_properties(positive_NEW: list, negative_NEW: list, strength: float, set_cond_area: str,
                                     mask: Any = None, hooks: Any = None, timesteps: Any = None) -> tuple:
    from comfy_core.hooks.conditioning import set_conds_props

    positive, negative = set_conds_props([_cond(positive_NEW, "positive_NEW"), _cond(negative_NEW, "negative_NEW")],
                                         **_props(strength, set_cond_area, mask, hooks, timesteps))
    return (positive, negative)


@_hook_node("PairConditioningSetPropertiesAndCombine", "Cond Pair Set Props Combine", "cond pair",
            [Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"),
             Input("positive_NEW", "CONDITIONING"), Input("negative_NEW", "CONDITIONING"), *_PROPS], _PAIR_OUT)
def pair_conditioning_set_properties_and_combine(positive: list, negative: list, positive_NEW: list,
                                                 negative_NEW: list, strength: float, set_cond_area: str,
                                                 mask: Any = None, hooks: Any = None, timesteps: Any = None) -> tuple:
    from comfy_core.hooks.conditioning import set_conds_props_and_combine

    out = set_conds_props_and_combine([_cond(positive, "positive"), _cond(negative, "negative")],
                                      [_cond(positive_NEW, "positive_NEW"), _cond(negative_NEW, "negative_NEW")],
                                      **_props(strength, set_cond_area, mask, hooks, timesteps))
    return (out[0], out[1])


@_hook_node("PairConditioningCombine", "Cond Pair Combine", "cond pair",
            [Input("positive_A", "CONDITIONING"), Input("negative_A", "CONDITIONING"),
             Input("positive_B", "CONDITIONING"), Input("negative_B", "CONDITIONING")], _PAIR_OUT)
def pair_conditioning_combine(positive_A: list, negative_A: list, positive_B: list, negative_B: list) -> tuple:
    from comfy_core.hooks.conditioning import set_conds_props_and_combine

    out = set_conds_props_and_combine([_cond(positive_A, "positive_A"), _cond(negative_A, "negative_A")],
                                      [_cond(positive_B, "positive_B"), _cond(negative_B, "negative_B")])
    return (out[0], out[1])


@_hook_node("PairConditioningSetDefaultCombine", "Cond Pair Set Default Combine", "cond pair",
            [Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"),
             Input("positive_DEFAULT", "CONDITIONING"), Input("negative_DEFAULT", "CONDITIONING"),
             Input("hooks", "HOOKS", optional=True)], _PAIR_OUT)
def pair_conditioning_set_default_combine(positive: list, negative: list, positive_DEFAULT: list,
                                          negative_DEFAULT: list, hooks: Any = None) -> tuple:
    from comfy_core.hooks.conditioning import set_default_conds_and_combine

    out = set_default_conds_and_combine([_cond(positive, "positive"), _cond(negative, "negative")],
                                        [_cond(positive_DEFAULT, "positive_DEFAULT"),
                                         _cond(negative_DEFAULT, "negative_DEFAULT")],
                                        hooks=hooks_group(hooks, "hooks"))
    return (out[0], out[1])


@_hook_node("ConditioningSetDefaultCombine", "Cond Set Default Combine", "cond single",
            [Input("cond", "CONDITIONING"), Input("cond_DEFAULT", "CONDITIONING"),
             Input("hooks", "HOOKS", optional=True)], [Output("CONDITIONING")])
def conditioning_set_default_combine(cond: list, cond_DEFAULT: list, hooks: Any = None) -> tuple:
    from comfy_core.hooks.conditioning import set_default_conds_and_combine

    (out,) = set_default_conds_and_combine([_cond(cond, "cond")], [_cond(cond_DEFAULT, "cond_DEFAULT")],
                                           hooks=hooks_group(hooks, "hooks"))
    return (out,)


@_hook_node("SetClipHooks", "Set CLIP Hooks", "clip",
            [Input("clip", "CLIP"), Boolean("apply_to_conds", default=True), Boolean("schedule_clip", default=False),
             Input("hooks", "HOOKS", optional=True)], [Output("CLIP")])
def set_clip_hooks(clip: Any, apply_to_conds: bool, schedule_clip: bool, hooks: Any = None) -> tuple:
    from comfy_core.hooks.clip import set_clip_hooks as apply
    from comfy_core.text_encoders.clip import CLIP

    clip = checks.clip(clip)
    hooks = hooks_group(hooks, "hooks")
    if hooks is not None and not isinstance(clip, CLIP):
        raise NodeInputError("clip", "a CLIP object of this engine (hooks patch its encoders)", describe(clip))
    return (apply(clip, hooks, bool(apply_to_conds), bool(schedule_clip)),)


@_hook_node("ConditioningTimestepsRange", "Timesteps Range", "",
            [Float("start_percent", default=0.0, min=0.0, max=1.0, step=0.001),
             Float("end_percent", default=1.0, min=0.0, max=1.0, step=0.001)],
            [Output("TIMESTEPS_RANGE"), Output("TIMESTEPS_RANGE", "BEFORE_RANGE"),
             Output("TIMESTEPS_RANGE", "AFTER_RANGE")])
def conditioning_timesteps_range(start_percent: float, end_percent: float) -> tuple:
    from comfy_core.hooks.conditioning import timesteps_ranges

    return timesteps_ranges(checks.number(start_percent, "start_percent"), checks.number(end_percent, "end_percent"))

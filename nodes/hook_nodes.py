"""Hook nodes, part 1, with ComfyUI 0.3.64's names, sockets and semantics
(comfy_extras/nodes_hooks.py): creating hooks (CreateHookLora, CreateHookLoraModelOnly,
CreateHookModelAsLora, CreateHookModelAsLoraModelOnly), scheduling them (SetHookKeyframes,
CreateHookKeyframe, CreateHookKeyframesInterpolated, CreateHookKeyframesFromFloats) and
combining them (CombineHooks2/4/8). Attaching hooks to conditioning and to a CLIP is
nodes/hook_conditioning.py.

HOOKS is a `comfy_core.hooks.HookGroup`, HOOK_KEYFRAMES a `HookKeyframeGroup`. Inputs are never
changed: a node that adds to a group or sets keyframes works on a clone, as ComfyUI's nodes do.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from graph.native import Boolean, Combo, Float, Input, Int, Output, node
from nodes.environment import model_file, model_files
from nodes.errors import NodeInputError, describe

# torch and comfy_core are imported inside the functions that run (start-up stays torch-free).

log = logging.getLogger(__name__)

MODULE = "comfy_extras.nodes_hooks"
INTERPOLATIONS = ["linear", "ease_in", "ease_out", "ease_in_out"]  # comfy_core.hooks.INTERPOLATIONS


def hooks_group(value: Any, input_name: str, *, optional: bool = True) -> Any:
    """A HOOKS value (None allowed where the input is optional)."""
    from comfy_core.hooks import HookGroup

    if value is None and optional:
        return None
    if not isinstance(value, HookGroup):
        raise NodeInputError(input_name, "HOOKS (a hook group)", describe(value))
    return value


def _keyframes(value: Any, input_name: str) -> Any:
    from comfy_core.hooks import HookKeyframeGroup

    if value is None:
        return None
    if not isinstance(value, HookKeyframeGroup):
        raise NodeInputError(input_name, "HOOK_KEYFRAMES (a keyframe group)", describe(value))
    return value


_files = model_files  # the loader combos' live options




_STRENGTH = dict(default=1.0, min=-20.0, max=20.0, step=0.01)


def _create(**kw: Any) -> Callable:
    return node(category="advanced/hooks/create", experimental=True, python_module=MODULE, **kw)


# --- creating hooks ---

def _hook_lora(lora_name: str, strength_model: float, strength_clip: float, prev_hooks: Any) -> tuple:
    from comfy_core.hooks import HookGroup, create_hook_lora
    from nodes.patching import load_lora_file

    prev_hooks = hooks_group(prev_hooks, "prev_hooks")
    if prev_hooks is None:
        prev_hooks = HookGroup()
    if strength_model == 0 and strength_clip == 0:
        return (prev_hooks,)  # ComfyUI's shortcut: the previous hooks as they are
    path = Path(model_file("loras", lora_name, "lora_name"))
    # The file's state names the LoRA's patches (stable signatures across re-reads), taken
    # before reading so a file rewritten meanwhile never gets the old name.
    stat = path.stat()
    source = ("lora-file", str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    hooks = create_hook_lora(load_lora_file(path), strength_model, strength_clip, lora_name, source)
    return (prev_hooks.clone_and_combine(hooks),)


@_create(node_id="CreateHookLora", display_name="Create Hook LoRA",
         inputs=[Combo("lora_name", _files("loras")), Float("strength_model", **_STRENGTH),
                 Float("strength_clip", **_STRENGTH), Input("prev_hooks", "HOOKS", optional=True)],
         outputs=[Output("HOOKS")])
def create_hook_lora_node(lora_name: str, strength_model: float, strength_clip: float, prev_hooks: Any = None) -> tuple:
    return _hook_lora(lora_name, strength_model, strength_clip, prev_hooks)


@_create(node_id="CreateHookLoraModelOnly", display_name="Create Hook LoRA (MO)",
         inputs=[Combo("lora_name", _files("loras")), Float("strength_model", **_STRENGTH),
                 Input("prev_hooks", "HOOKS", optional=True)],
         outputs=[Output("HOOKS")])
def create_hook_lora_model_only(lora_name: str, strength_model: float, prev_hooks: Any = None) -> tuple:
    return _hook_lora(lora_name, strength_model, 0.0, prev_hooks)


def _hook_model_as_lora(ckpt_name: str, strength_model: float, strength_clip: float, prev_hooks: Any) -> tuple:
    from comfy_core.hooks import HookGroup, create_hook_model_as_lora, patch_weights_from_model
    from comfy_core.loading import load_checkpoint

    prev_hooks = hooks_group(prev_hooks, "prev_hooks")
    if prev_hooks is None:
        prev_hooks = HookGroup()
    path = Path(model_file("checkpoints", ckpt_name, "ckpt_name"))
    model, clip, _ = load_checkpoint(path, output_vae=False)
    weights_model = patch_weights_from_model(model.model_state_dict())
    weights_clip = patch_weights_from_model(clip.patcher.model_state_dict()) if clip is not None else None
    hooks = create_hook_model_as_lora(weights_model, weights_clip, strength_model, strength_clip)
    return (prev_hooks.clone_and_combine(hooks),)


@_create(node_id="CreateHookModelAsLora", display_name="Create Hook Model as LoRA",
         inputs=[Combo("ckpt_name", _files("checkpoints")), Float("strength_model", **_STRENGTH),
                 Float("strength_clip", **_STRENGTH), Input("prev_hooks", "HOOKS", optional=True)],
         outputs=[Output("HOOKS")])
def create_hook_model_as_lora_node(ckpt_name: str, strength_model: float, strength_clip: float,
                                   prev_hooks: Any = None) -> tuple:
    return _hook_model_as_lora(ckpt_name, strength_model, strength_clip, prev_hooks)


@_create(node_id="CreateHookModelAsLoraModelOnly", display_name="Create Hook Model as LoRA (MO)",
         inputs=[Combo("ckpt_name", _files("checkpoints")), Float("strength_model", **_STRENGTH),
                 Input("prev_hooks", "HOOKS", optional=True)],
         outputs=[Output("HOOKS")])
def create_hook_model_as_lora_model_only(ckpt_name: str, strength_model: float, prev_hooks: Any = None) -> tuple:
    return _hook_model_as_lora(ckpt_name, strength_model, 0.0, prev_hooks)


# --- scheduling ---

def _scheduling(**kw: Any) -> Callable:
    return node(category="advanced/hooks/scheduling", experimental=True, python_module=MODULE, **kw)


_PERCENT = dict(min=0.0, max=1.0, step=0.001)


@_scheduling(node_id="SetHookKeyframes", display_name="Set Hook Keyframes",
             inputs=[Input("hooks", "HOOKS"), Input("hook_kf", "HOOK_KEYFRAMES", optional=True)],
             outputs=[Output("HOOKS")])
def set_hook_keyframes(hooks: Any, hook_kf: Any = None) -> tuple:
    hooks = hooks_group(hooks, "hooks", optional=False)
    hook_kf = _keyframes(hook_kf, "hook_kf")
    if hook_kf is not None:
        hooks = hooks.clone()
        hooks.set_keyframes_on_hooks(hook_kf)
    return (hooks,)


@_scheduling(node_id="CreateHookKeyframe", display_name="Create Hook Keyframe",
             inputs=[Float("strength_mult", **_STRENGTH), Float("start_percent", default=0.0, **_PERCENT),
                     Input("prev_hook_kf", "HOOK_KEYFRAMES", optional=True)],
             outputs=[Output("HOOK_KEYFRAMES", "HOOK_KF")])
def create_hook_keyframe(strength_mult: float, start_percent: float, prev_hook_kf: Any = None) -> tuple:
    from comfy_core.hooks import HookKeyframe, HookKeyframeGroup

    prev = _keyframes(prev_hook_kf, "prev_hook_kf") or HookKeyframeGroup()
    return (prev.added(HookKeyframe(strength_mult, start_percent)),)


def _log_keyframes(pairs: list[tuple[float, float]], enabled: bool) -> None:
    if enabled:
        for percent, strength in pairs:
            log.info("Hook Keyframe - start_percent:%s = %s", percent, strength)


@_scheduling(node_id="CreateHookKeyframesInterpolated", display_name="Create Hook Keyframes Interp.",
             inputs=[Float("strength_start", default=1.0, min=0.0, max=10.0, step=0.001),
                     Float("strength_end", default=1.0, min=0.0, max=10.0, step=0.001),
                     Combo("interpolation", INTERPOLATIONS),
                     Float("start_percent", default=0.0, **_PERCENT), Float("end_percent", default=1.0, **_PERCENT),
                     Int("keyframes_count", default=5, min=2, max=100, step=1),
                     Boolean("print_keyframes", default=False),
                     Input("prev_hook_kf", "HOOK_KEYFRAMES", optional=True)],
             outputs=[Output("HOOK_KEYFRAMES", "HOOK_KF")])
def create_hook_keyframes_interpolated(strength_start: float, strength_end: float, interpolation: str,
                                       start_percent: float, end_percent: float, keyframes_count: int,
                                       print_keyframes: bool = False, prev_hook_kf: Any = None) -> tuple:
    from comfy_core.hooks.keyframes import interpolate, keyframes_over_range

    if interpolation not in INTERPOLATIONS:
        raise NodeInputError("interpolation", f"one of {INTERPOLATIONS}", repr(interpolation))
    if not isinstance(keyframes_count, int) or isinstance(keyframes_count, bool) or keyframes_count < 1:
        raise NodeInputError("keyframes_count", "an integer >= 1", describe(keyframes_count))
    strengths = interpolate(strength_start, strength_end, keyframes_count, interpolation)
    group, pairs = keyframes_over_range(strengths, start_percent, end_percent, _keyframes(prev_hook_kf, "prev_hook_kf"))
    _log_keyframes(pairs, print_keyframes)
    return (group,)


@_scheduling(node_id="CreateHookKeyframesFromFloats", display_name="Create Hook Keyframes From Floats",
             inputs=[Input("floats_strength", "FLOATS", default=-1, min=-1, step=0.001, forceInput=True),
                     Float("start_percent", default=0.0, **_PERCENT), Float("end_percent", default=1.0, **_PERCENT),
                     Boolean("print_keyframes", default=False),
                     Input("prev_hook_kf", "HOOK_KEYFRAMES", optional=True)],
             outputs=[Output("HOOK_KEYFRAMES", "HOOK_KF")])
def create_hook_keyframes_from_floats(floats_strength: Any, start_percent: float, end_percent: float,
                                      print_keyframes: bool = False, prev_hook_kf: Any = None) -> tuple:
    from comfy_core.hooks.keyframes import keyframes_over_range

    if isinstance(floats_strength, (int, float)) and not isinstance(floats_strength, bool):
        floats_strength = [float(floats_strength)]
    try:
        strengths = [float(s) for s in floats_strength]
    except (TypeError, ValueError):
        raise NodeInputError("floats_strength", "FLOATS (a float or a list of floats)", describe(floats_strength)) from None
    group, pairs = keyframes_over_range(strengths, start_percent, end_percent, _keyframes(prev_hook_kf, "prev_hook_kf"))
    _log_keyframes(pairs, print_keyframes)
    return (group,)


# --- combining ---

def _combine(groups: dict[str, Any]) -> tuple:
    from comfy_core.hooks import HookGroup

    return (HookGroup.combine_all_hooks([hooks_group(v, name) for name, v in groups.items()]),)


def _combine_node(node_id: str, letters: str) -> Callable:
    return node(node_id, category="advanced/hooks/combine", display_name=f"Combine Hooks [{len(letters)}]",
                experimental=True, python_module=MODULE,
                inputs=[Input(f"hooks_{c}", "HOOKS", optional=True) for c in letters], outputs=[Output("HOOKS")])


@_combine_node("CombineHooks2", "AB")
def combine_hooks_2(hooks_A: Any = None, hooks_B: Any = None) -> tuple:
    return _combine({"hooks_A": hooks_A, "hooks_B": hooks_B})


@_combine_node("CombineHooks4", "ABCD")
def combine_hooks_4(hooks_A: Any = None, hooks_B: Any = None, hooks_C: Any = None, hooks_D: Any = None) -> tuple:
    return _combine({"hooks_A": hooks_A, "hooks_B": hooks_B, "hooks_C": hooks_C, "hooks_D": hooks_D})


@_combine_node("CombineHooks8", "ABCDEFGH")
def combine_hooks_8(hooks_A: Any = None, hooks_B: Any = None, hooks_C: Any = None, hooks_D: Any = None,
                    hooks_E: Any = None, hooks_F: Any = None, hooks_G: Any = None, hooks_H: Any = None) -> tuple:
    return _combine({"hooks_A": hooks_A, "hooks_B": hooks_B, "hooks_C": hooks_C, "hooks_D": hooks_D,
                     "hooks_E": hooks_E, "hooks_F": hooks_F, "hooks_G": hooks_G, "hooks_H": hooks_H})

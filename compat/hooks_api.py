"""ComfyUI's `comfy.hooks` API for node packs, as adapters onto our scheduled hooks (comfy_core/hooks).

Packs (AnimateDiff-Evolved's LoRA-hook nodes, Advanced-ControlNet's wrapper hooks, Impact) build
hooks with ComfyUI's classes and functions: `load_hook_lora_for_models`, `WeightHook()` with
`hook.weights = lora`, `HookKeyframeGroup().add(HookKeyframe(...))`, `HookGroup().add(hook)`,
`set_hooks_for_conditioning`. The classes here are subclasses of the core's (`HookGroup`,
`WeightHook`, `HookKeyframeGroup`, `HookKeyframe`), so what a pack builds is a HOOKS /
HOOK_KEYFRAMES value our nodes accept and our sampler runs (comfy_core/hooks/sampling.py): a
weight hook's LoRA is resolved against the model when a run registers it, and its patches apply
to the passes of the conditioning entries that carry it only.

Where ComfyUI keeps mutable per-run state on its objects and ours keeps it in a per-run cursor:

- `HookKeyframeGroup.add` replaces the group's (immutable) keyframe tuple, as ComfyUI's mutates
  its list; `initialize_timesteps` / `prepare_current_keyframe` / `strength` step a
  `KeyframeCursor` the group holds for a pack that drives it itself. Our sampler never uses that
  cursor: a run keeps its own per keyframe-group object, so a HOOKS value used by two runs never
  sees the other's state.
- `WeightHook.strength_model` / `strength_clip` read, as ComfyUI's properties, the hook's own
  strength times its keyframe group's current strength; the runtime takes the hook's own
  strength (`base_strength`) and applies the keyframe multiplier per step itself.

Hooks of the other kinds (`TransformerOptionsHook` = `WrapperHook`, `AdditionalModelsHook`,
`ObjectPatchHook`, `InjectionsHook`) carry ComfyUI's data and methods. A sampling run registers
the transformer-options and additional-models hooks of its conds (and of their ControlNets'
`extra_hooks`) through their `add_hook_patches` before it reads its OUTER_SAMPLE wrappers
(comfy_core/hooks/sampling.py `register_option_hooks`): an all-conditioning hook's wrappers,
callbacks and patches join the run's options, as in ComfyUI. A hooked-only transformer-options
hook's dictionary (what `create_transformer_options_from_hooks` gives) joins the
`transformer_options` of the passes of the conds that carry it, under the run's own
(comfy_core/hooks/sampling.py `HookRun.transformer_options`, comfy_core/sampling/cond_batch.py).
ComfyUI itself raises NotImplementedError for object-patch and injections hooks.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from comfy_core.hooks import conditioning as core_conditioning
from comfy_core.hooks import hook as core
from comfy_core.hooks import keyframes as core_keyframes
from comfy_core.hooks.hook import EnumHookType, EnumWeightTarget, HookRef
from comfy_core.patching.model_extensions import HookMode as EnumHookMode
from comfy_core.wrappers import merge_nested_dicts

log = logging.getLogger(__name__)

__all__ = [
    "EnumHookMode", "EnumHookType", "EnumWeightTarget", "EnumHookScope", "Hook", "WeightHook", "ObjectPatchHook",
    "AdditionalModelsHook", "TransformerOptionsHook", "WrapperHook", "InjectionsHook", "HookGroup", "HookKeyframe",
    "HookKeyframeGroup", "InterpolationMethod", "load_hook_lora_for_models", "create_hook_lora",
    "create_hook_model_as_lora", "set_hooks_for_conditioning",
]

# ComfyUI's `start_t` before `initialize_timesteps`: larger than any sigma.
_UNSET_SIGMA = 999999999.9


class EnumHookScope(enum.Enum):
    """Whether a hook acts on every cond of a run (`AllConditioning`) or only the ones it is on."""

    AllConditioning = "all_conditioning"
    HookedOnly = "hooked_only"


def default_should_register(hook: Any, model: Any, model_options: dict, target_dict: dict, registered: Any) -> bool:
    """ComfyUI's default `custom_should_register`: always."""
    return True


def create_target_dict(target: EnumWeightTarget | None = None, **kwargs: Any) -> dict:
    """The `target_dict` hooks are registered with: `{"target": target, **kwargs}`."""
    d: dict = {} if target is None else {"target": target}
    d.update(kwargs)
    return d


def get_sorted_list_via_attr(objects: list, attr: str) -> list:
    """`objects` sorted by `attr`, stable (equal values keep their order)."""
    return sorted(objects, key=lambda o: getattr(o, attr))


# --- keyframes ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class HookKeyframe(core_keyframes.HookKeyframe):
    """ComfyUI's `HookKeyframe(strength, start_percent=0.0, guarantee_steps=1)` (our frozen value,
    plus `start_t`, the keyframe's start as a sigma once its group's timesteps are initialised)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "start_t", _UNSET_SIGMA)

    def get_effective_guarantee_steps(self, max_sigma: Any) -> int:
        """The guaranteed steps, 0 when the keyframe starts before the run's first sigma."""
        if self.start_t > max_sigma:
            return 0
        return self.guarantee_steps

    def clone(self) -> "HookKeyframe":
        c = HookKeyframe(self.strength, self.start_percent, self.guarantee_steps)
        object.__setattr__(c, "start_t", self.start_t)
        return c


class _UnsetSampling:
    """Model sampling of a group whose timesteps were never initialised (ComfyUI's `start_t`)."""

    @staticmethod
    def percent_to_sigma(percent: float) -> float:
        return _UNSET_SIGMA


class HookKeyframeGroup(core_keyframes.HookKeyframeGroup):
    """ComfyUI's mutable keyframe group over ours: `add` replaces the keyframe tuple; the current
    keyframe, for packs that step the group themselves, is a `KeyframeCursor` held here."""

    def __init__(self, keyframes: Iterable[core_keyframes.HookKeyframe] = ()) -> None:
        super().__init__(keyframes)
        self._cursor: Any = None
        self._model_sampling: Any = _UnsetSampling()

    def _make_cursor(self) -> Any:
        from comfy_core.hooks.cursor import KeyframeCursor

        self._cursor = KeyframeCursor(self, self._model_sampling)
        return self._cursor

    def add(self, keyframe: core_keyframes.HookKeyframe) -> None:
        """Add `keyframe` (kept in start order); the first keyframe becomes the current one."""
        self.keyframes = tuple(sorted(self.keyframes + (keyframe,), key=lambda k: k.start_percent))
        self._cursor = None

    def added(self, keyframe: core_keyframes.HookKeyframe) -> "HookKeyframeGroup":
        return HookKeyframeGroup(self.keyframes + (keyframe,))

    def clone(self) -> "HookKeyframeGroup":
        return HookKeyframeGroup(k.clone() if hasattr(k, "clone") else k for k in self.keyframes)

    def has_index(self, index: int) -> bool:
        return 0 <= index < len(self.keyframes)

    def reset(self) -> None:
        """Back to the first keyframe (keeps the initialised timesteps)."""
        self._cursor = None

    @property
    def strength(self) -> float:
        """The current keyframe's strength (1.0 without keyframes)."""
        if not self.keyframes:
            return 1.0
        return (self._cursor or self._make_cursor()).strength

    def initialize_timesteps(self, model: Any) -> None:
        """Keyframe starts as sigmas of `model` (a BaseModel, or anything with `model_sampling`)."""
        sampling = getattr(model, "model_sampling", model)
        self._model_sampling = sampling
        for keyframe in self.keyframes:
            object.__setattr__(keyframe, "start_t", sampling.percent_to_sigma(keyframe.start_percent))
        self._cursor = None

    def prepare_current_keyframe(self, curr_t: Any, transformer_options: dict) -> bool:
        """Move to the keyframe for the step at sigma `curr_t` (`transformer_options["sample_sigmas"]`
        the run's sigmas); True when the strength changed."""
        import torch

        if not self.keyframes:
            return False
        sigmas = transformer_options.get("sample_sigmas")
        if sigmas is None:
            raise KeyError("prepare_current_keyframe needs transformer_options['sample_sigmas'] (the run's sigmas)")
        sigma = curr_t if isinstance(curr_t, torch.Tensor) else torch.tensor(float(curr_t))
        return (self._cursor or self._make_cursor()).step(sigma.reshape(()) if sigma.numel() == 1 else sigma[0], sigmas)


class InterpolationMethod:
    """ComfyUI's keyframe interpolation curves (comfy_core.hooks.keyframes.interpolate)."""

    LINEAR = "linear"
    EASE_IN = "ease_in"
    EASE_OUT = "ease_out"
    EASE_IN_OUT = "ease_in_out"

    _LIST = [LINEAR, EASE_IN, EASE_OUT, EASE_IN_OUT]

    @classmethod
    def get_weights(cls, num_from: float, num_to: float, length: int, method: str, reverse: bool = False) -> Any:
        """`length` values from `num_from` to `num_to` along `method` (a float tensor, as ComfyUI's)."""
        import torch

        return torch.tensor(core_keyframes.interpolate(num_from, num_to, length, method, reverse))


# --- hooks --------------------------------------------------------------------------------------

class Hook:
    """ComfyUI's base hook: kind, shared ref (identity of clones), optional id, keyframes, scope and
    a `custom_should_register(hook, model, model_options, target_dict, registered)` predicate."""

    def __init__(self, hook_type: EnumHookType | None = None, hook_ref: HookRef | None = None,
                 hook_id: str | None = None, hook_keyframe: core_keyframes.HookKeyframeGroup | None = None,
                 hook_scope: EnumHookScope = EnumHookScope.AllConditioning) -> None:
        self.hook_type = hook_type
        self.hook_ref = hook_ref if hook_ref is not None else HookRef()
        self.hook_id = hook_id
        self.hook_keyframe = hook_keyframe if hook_keyframe is not None else HookKeyframeGroup()
        self.hook_scope = hook_scope
        self.custom_should_register: Callable = default_should_register

    @property
    def strength(self) -> float:
        return getattr(self.hook_keyframe, "strength", self.hook_keyframe.resting_strength)

    def initialize_timesteps(self, model: Any) -> None:
        self.reset()
        if hasattr(self.hook_keyframe, "initialize_timesteps"):
            self.hook_keyframe.initialize_timesteps(model)

    def reset(self) -> None:
        if hasattr(self.hook_keyframe, "reset"):
            self.hook_keyframe.reset()

    def clone(self) -> "Hook":
        """A new hook sharing this one's ref, keyframe group and data (a pack's subclass too)."""
        c = type(self).__new__(type(self))
        c.__dict__.update(self.__dict__)
        return c

    def should_register(self, model: Any, model_options: dict, target_dict: dict, registered: Any) -> bool:
        return self.custom_should_register(self, model, model_options, target_dict, registered)

    def add_hook_patches(self, model: Any, model_options: dict, target_dict: dict, registered: Any) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must define add_hook_patches")

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.hook_ref is other.hook_ref  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.hook_ref)


class WeightHook(core.WeightHook, Hook):
    """ComfyUI's `WeightHook(strength_model=1.0, strength_clip=1.0)` on our weight hook: a pack sets
    `hook.weights = lora_state_dict` (ComfyUI's `need_weight_init` form), which is the LoRA our
    runtime resolves against the model or the CLIP when a run registers the hook."""

    def __init__(self, strength_model: float = 1.0, strength_clip: float = 1.0, **kwargs: Any) -> None:
        kwargs.setdefault("hook_keyframe", HookKeyframeGroup())
        core.WeightHook.__init__(self, strength_model, strength_clip, **kwargs)
        self.hook_id = None
        self.hook_scope = EnumHookScope.HookedOnly  # ComfyUI: always hooked-only for weights
        self.custom_should_register = default_should_register

    # ComfyUI's properties: the hook's strength times the keyframe group's current one.
    @property
    def strength_model(self) -> float:
        return self._strength_model * self.strength

    @strength_model.setter
    def strength_model(self, value: float) -> None:
        self._strength_model = float(value)

    @property
    def strength_clip(self) -> float:
        return self._strength_clip * self.strength

    @strength_clip.setter
    def strength_clip(self, value: float) -> None:
        self._strength_clip = float(value)

    def base_strength(self, target: EnumWeightTarget) -> float:
        # The runtime applies the keyframe multiplier itself, per step.
        return self._strength_clip if target is EnumWeightTarget.Clip else self._strength_model

    @property
    def weights(self) -> Mapping[str, Any] | None:
        """ComfyUI's `weights`: the LoRA state dict (or model-as-LoRA tensors) of the model side."""
        return self.lora if self.lora is not None else self.weights_model

    @weights.setter
    def weights(self, value: Mapping[str, Any] | None) -> None:
        self.lora = value

    @property
    def need_weight_init(self) -> bool:
        return self.lora is not None

    def clone(self) -> "WeightHook":
        return Hook.clone(self)  # type: ignore[return-value]

    def add_hook_patches(self, model: Any, model_options: dict, target_dict: dict, registered: Any) -> bool:
        """Register on `model` (a compat ModelPatcher): its patches for `target_dict["target"]`,
        from this hook's LoRA resolved against the model, at the hook's own strength."""
        if not self.should_register(model, model_options, target_dict, registered):
            return False
        from comfy_core.hooks.patches import hook_patches

        target = target_dict.get("target") or EnumWeightTarget.Model
        model.add_hook_patches(self, hook_patches(self, target, model), strength_patch=1.0)
        registered.add(self)
        return True

    def __eq__(self, other: object) -> bool:
        return Hook.__eq__(self, other)

    def __hash__(self) -> int:
        return hash(self.hook_ref)


class ObjectPatchHook(Hook):
    """ComfyUI's object-patch hook (ComfyUI does not support registering it either)."""

    def __init__(self, object_patches: dict | None = None, hook_scope: EnumHookScope = EnumHookScope.AllConditioning) -> None:
        super().__init__(hook_type=EnumHookType.ObjectPatch, hook_scope=hook_scope)
        self.object_patches = object_patches

    def add_hook_patches(self, model: Any, model_options: dict, target_dict: dict, registered: Any) -> bool:
        raise NotImplementedError("ObjectPatchHook is not supported (as in ComfyUI)")


class AdditionalModelsHook(Hook):
    """Models to load beside the model while the hook is registered (scope: all conditioning)."""

    def __init__(self, models: list | None = None, key: str | None = None) -> None:
        super().__init__(hook_type=EnumHookType.AdditionalModels)
        self.models = models
        self.key = key

    def clone(self) -> "AdditionalModelsHook":
        c = super().clone()
        c.models = list(self.models) if self.models else self.models
        return c

    def add_hook_patches(self, model: Any, model_options: dict, target_dict: dict, registered: Any) -> bool:
        if not self.should_register(model, model_options, target_dict, registered):
            return False
        registered.add(self)
        return True


class TransformerOptionsHook(Hook):
    """Wrappers, callbacks and patches (a `transformer_options`-shaped dict) a hook brings: with
    scope AllConditioning they join the run's `model_options` when registered, else they join the
    `transformer_options` of the hooked conds' passes only (`create_transformer_options_from_hooks`)."""

    def __init__(self, transformers_dict: dict | None = None, hook_scope: EnumHookScope = EnumHookScope.AllConditioning) -> None:
        super().__init__(hook_type=EnumHookType.TransformerOptions, hook_scope=hook_scope)
        self.transformers_dict = transformers_dict
        self._skip_adding = False  # already in the run's options (AllConditioning)

    def add_hook_patches(self, model: Any, model_options: dict, target_dict: dict, registered: Any) -> bool:
        if not self.should_register(model, model_options, target_dict, registered):
            return False
        if self.hook_scope == EnumHookScope.AllConditioning:
            add = {"transformer_options": self.transformers_dict, "to_load_options": self.transformers_dict}
            self._skip_adding = True
        else:
            add = {"to_load_options": self.transformers_dict}
            self._skip_adding = False
        registered.add(self)
        merge_nested_dicts(model_options, add, copy_dict1=False)
        return True

    def on_apply_hooks(self, model: Any, transformer_options: dict) -> None:
        if not self._skip_adding:
            merge_nested_dicts(transformer_options, self.transformers_dict, copy_dict1=False)


WrapperHook = TransformerOptionsHook  # ComfyUI's older name, the same class


class InjectionsHook(Hook):
    """ComfyUI's injections hook (ComfyUI does not support registering it either)."""

    def __init__(self, key: str | None = None, injections: list | None = None,
                 hook_scope: EnumHookScope = EnumHookScope.AllConditioning) -> None:
        super().__init__(hook_type=EnumHookType.Injections, hook_scope=hook_scope)
        self.key = key
        self.injections = injections

    def clone(self) -> "InjectionsHook":
        c = super().clone()
        c.injections = list(self.injections) if self.injections else self.injections
        return c

    def add_hook_patches(self, model: Any, model_options: dict, target_dict: dict, registered: Any) -> bool:
        raise NotImplementedError("InjectionsHook is not supported (as in ComfyUI)")


# --- groups -------------------------------------------------------------------------------------

class HookGroup(core.HookGroup):
    """ComfyUI's `HookGroup()` over ours, with `remove`, `reset` and the CLIP schedule."""

    def clone(self) -> "HookGroup":
        return HookGroup(h.clone() for h in self.hooks)

    def new_with_common_hooks(self, other: core.HookGroup) -> "HookGroup":
        return HookGroup(h.clone() for h in self.hooks if other.contains(h))

    def remove(self, hook: Any) -> None:
        if hook in self.hooks:
            self.hooks.remove(hook)

    def reset(self) -> None:
        for hook in self.hooks:
            reset = getattr(hook, "reset", None)
            if reset is not None:
                reset()
            elif hasattr(hook.hook_keyframe, "reset"):
                hook.hook_keyframe.reset()

    def get_hooks_for_clip_schedule(self) -> list:
        """`[((start, end), [(hook, keyframe or None), ...]), ...]`: the ranges a scheduled CLIP
        encodes once each (comfy_core/hooks/schedule.py)."""
        from comfy_core.hooks.schedule import clip_schedule

        return clip_schedule(self)

    @staticmethod
    def combine_all_hooks(hooks_list: Iterable[core.HookGroup | None], require_count: int = 0) -> core.HookGroup | None:
        return core.HookGroup.combine_all_hooks(hooks_list, require_count)


def create_transformer_options_from_hooks(model: Any, hooks: core.HookGroup | None,
                                          transformer_options: dict | None = None) -> dict:
    """The `transformer_options` a hooked cond's pass gets from its transformer-options hooks
    (empty for no hooks or a CLIP's patcher)."""
    if hooks is None or getattr(model, "is_clip", False):
        return {}
    transformer_options = {} if transformer_options is None else transformer_options
    for hook in hooks.get_type(EnumHookType.TransformerOptions):
        hook.on_apply_hooks(model, transformer_options)
    return transformer_options


# --- creating hooks -----------------------------------------------------------------------------

def create_hook_lora(lora: Mapping[str, Any], strength_model: float, strength_clip: float) -> HookGroup:
    """A group of one weight hook with the LoRA state dict `lora`."""
    return HookGroup([WeightHook(strength_model, strength_clip, lora=lora)])


def create_hook_model_as_lora(weights_model: Mapping[str, Any] | None, weights_clip: Mapping[str, Any] | None,
                              strength_model: float, strength_clip: float) -> HookGroup:
    """A group of one hook adding `strength * (weights - original)` to the model / the CLIP."""
    return HookGroup([WeightHook(strength_model, strength_clip, weights_model=weights_model, weights_clip=weights_clip)])


def get_patch_weights_from_model(model: Any, discard_model_sampling: bool = True) -> dict | None:
    """A model patcher's tensors to act as a model-as-LoRA patch (without `model_sampling` ones)."""
    if model is None:
        return None
    state = model.model.state_dict()
    if discard_model_sampling:
        state = {k: v for k, v in state.items() if not k.startswith("model_sampling")}
    return state


def load_hook_lora_for_models(model: Any, clip: Any, lora: Mapping[str, Any], strength_model: float,
                              strength_clip: float) -> tuple[Any, Any, HookGroup]:
    """`(model clone, clip clone, hooks)`: a hook group of one LoRA weight hook whose patches are
    registered on the clones (`add_hook_patches`: the model's at `strength_model`, the CLIP
    patcher's at `strength_clip`), so they act only on the passes of conds the group is set on
    (`set_hooks_for_conditioning`) and in a scheduled CLIP encode. LoRA keys that match nothing
    are logged ("lora key not loaded"), and matched ones neither patcher has "NOT LOADED", as
    ComfyUI does. The hook also carries the LoRA, so on a patcher it is not registered on it is
    resolved there when a run registers it (at the strengths given; 0 for a side given as None)."""
    from comfy_core.lora.keymap import text_encoder_key_map, unet_key_map
    from compat.lora_api import load_lora

    key_map: dict = {}
    if model is not None:
        key_map.update(unet_key_map(model.model))
    if clip is not None:
        key_map.update(text_encoder_key_map(clip.cond_stage_model))
    hook = WeightHook(strength_model if model is not None else 0.0,
                      strength_clip if clip is not None else 0.0, lora=lora)
    loaded = load_lora(lora, key_map)
    applied: set = set()
    new_model = new_clip = None
    if model is not None:
        new_model = model.clone()
        applied.update(_register(new_model, hook, loaded, strength_model))
    if clip is not None:
        new_clip = clip.clone()
        applied.update(_register(new_clip.patcher, hook, loaded, strength_clip))
    for key in loaded:
        if key not in applied:
            log.warning("NOT LOADED %s", key)
    return new_model, new_clip, HookGroup([hook])


def _register(patcher: Any, hook: WeightHook, loaded: dict, strength: float) -> list:
    """`patcher.add_hook_patches(...)` where the patcher is ComfyUI's class (compat's); our own
    patchers resolve the hook's LoRA when a run registers it, so only the matching keys count."""
    add = getattr(patcher, "add_hook_patches", None)
    if add is not None:
        return add(hook, loaded, strength_patch=strength)
    known = patcher.weight_keys()
    return [k for k in loaded if (k if isinstance(k, str) else k[0]) in known]


# --- conditioning -------------------------------------------------------------------------------

def conditioning_set_values_with_hooks(conditioning: list, values: dict | None = None, append_hooks: bool = True,
                                       cache: dict | None = None) -> list:
    """Each entry with `values` set; a `hooks` value is combined with the entry's own hooks
    (`append_hooks`, one combined group per distinct pair of groups), else replaces them."""
    values = {} if values is None else values
    cache = {} if cache is None else cache
    out = []
    for t, d in conditioning:
        d = dict(d)
        for k, v in values.items():
            if append_hooks and k == "hooks":
                if d.get("hooks") is None:
                    if v is not None:
                        d["hooks"] = v
                else:
                    d["hooks"] = core_conditioning.set_hooks([[t, {"hooks": d["hooks"]}]], v, cache)[0][1]["hooks"]
            else:
                d[k] = v
        out.append([t, d])
    return out


def set_hooks_for_conditioning(cond: list, hooks: core.HookGroup | None, append_hooks: bool = True,
                               cache: dict | None = None) -> list:
    """`cond` with `hooks` on every entry (added to its own, or replacing them without `append_hooks`)."""
    if hooks is None:
        return cond
    if append_hooks:
        return core_conditioning.set_hooks(cond, hooks, cache)
    return conditioning_set_values_with_hooks(cond, {"hooks": hooks}, append_hooks=False)


def set_timesteps_for_conditioning(cond: list, timestep_range: tuple[float, float] | None) -> list:
    return core_conditioning.set_timesteps(cond, timestep_range)


def set_mask_for_conditioning(cond: list, mask: Any, set_cond_area: str, strength: float) -> list:
    return core_conditioning.set_mask(cond, mask, set_cond_area, strength)


def combine_conditioning(conds: list) -> list:
    """The entries of every conditioning of `conds`, in order."""
    return [entry for cond in conds for entry in cond]


def combine_with_new_conds(conds: list, new_conds: list) -> list:
    return [combine_conditioning([c, n]) for c, n in zip(conds, new_conds)]


def _props(cond: list, strength: float, set_cond_area: str, mask: Any, hooks: Any, timesteps_range: Any,
           append_hooks: bool, cache: dict) -> list:
    cond = set_hooks_for_conditioning(cond, hooks, append_hooks=append_hooks, cache=cache)
    cond = set_mask_for_conditioning(cond, mask, set_cond_area, strength)
    return set_timesteps_for_conditioning(cond, timesteps_range)


def set_conds_props(conds: list, strength: float, set_cond_area: str, mask: Any = None,
                    hooks: core.HookGroup | None = None, timesteps_range: tuple | None = None,
                    append_hooks: bool = True) -> list:
    """Hooks, then mask, then timestep range on each conditioning of `conds`."""
    cache: dict = {}
    return [_props(c, strength, set_cond_area, mask, hooks, timesteps_range, append_hooks, cache) for c in conds]


def set_conds_props_and_combine(conds: list, new_conds: list, strength: float = 1.0, set_cond_area: str = "default",
                                mask: Any = None, hooks: core.HookGroup | None = None,
                                timesteps_range: tuple | None = None, append_hooks: bool = True) -> list:
    """Each of `new_conds` with the properties set, appended to the matching one of `conds`."""
    cache: dict = {}
    return [list(c) + _props(n, strength, set_cond_area, mask, hooks, timesteps_range, append_hooks, cache)
            for c, n in zip(conds, new_conds)]


def set_default_conds_and_combine(conds: list, new_conds: list, hooks: core.HookGroup | None = None,
                                  timesteps_range: tuple | None = None, append_hooks: bool = True) -> list:
    """Each of `new_conds` marked `default` (used where nothing else covers the latent), with
    hooks and range, appended to the matching one of `conds`."""
    cache: dict = {}
    out = []
    for c, n in zip(conds, new_conds):
        n = set_hooks_for_conditioning(n, hooks, append_hooks=append_hooks, cache=cache)
        n = [[t, {**d, "default": True}] for t, d in n]
        out.append(list(c) + set_timesteps_for_conditioning(n, timesteps_range))
    return out

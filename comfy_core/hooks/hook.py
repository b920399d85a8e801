"""Hooks and hook groups: the HOOKS wire value.

After ComfyUI's comfy/hooks.py (`Hook`, `WeightHook`, `HookGroup`, `create_hook_lora`,
`create_hook_model_as_lora`). A `WeightHook` is data: a LoRA state dict (resolved against the
model's or the CLIP's key map when a run registers it) or "model as LoRA" weights (a whole
checkpoint whose difference from the patched model is added), a model and a CLIP strength, and
a keyframe group scheduling a multiplier over the sampling percent.

Identity follows ComfyUI: `clone()` makes a new hook object that shares the `hook_ref`, and two
hooks are equal when their class and `hook_ref` are; a `HookGroup` keeps one hook per ref. Where
conditioning entries are grouped for sampling, the *group object* is the key (ComfyUI keys a
dict by it), so entries that share one group object share forward passes.

The nodes never mutate a HOOKS value they receive: they clone it first, as ComfyUI's do.
"""
from __future__ import annotations

import enum
from typing import Any, Hashable, Iterable, Mapping

from comfy_core.hooks.keyframes import HookKeyframeGroup


class EnumHookType(enum.Enum):
    """ComfyUI's hook kinds; the built-in nodes make `Weight` hooks only."""

    Weight = "weight"
    ObjectPatch = "object_patch"
    AdditionalModels = "add_models"
    TransformerOptions = "transformer_options"
    Injections = "add_injections"


class EnumWeightTarget(enum.Enum):
    Model = "model"
    Clip = "clip"


class HookRef:
    """The identity hook clones share (ComfyUI's `_HookRef`)."""

    __slots__ = ("__weakref__",)


class WeightHook:
    """Weight patches for the model and/or the CLIP, at a strength scheduled by keyframes.

    - `lora`: a LoRA file's tensors (with `lora_name` and `lora_source`, the file's state, for
      stable patch signatures), resolved per target when registered; or
    - `weights_model` / `weights_clip`: "model as LoRA" tensors by parameter name: the hook adds
      `strength * (weights - original weights)` to the target.
    """

    hook_type = EnumHookType.Weight

    def __init__(self, strength_model: float = 1.0, strength_clip: float = 1.0, *,
                 lora: Mapping[str, Any] | None = None, lora_name: str = "", lora_source: Hashable | None = None,
                 weights_model: Mapping[str, Any] | None = None, weights_clip: Mapping[str, Any] | None = None,
                 hook_keyframe: HookKeyframeGroup | None = None, hook_ref: HookRef | None = None) -> None:
        self.strength_model = float(strength_model)
        self.strength_clip = float(strength_clip)
        self.lora = lora
        self.lora_name = lora_name
        self.lora_source = lora_source
        self.weights_model = weights_model
        self.weights_clip = weights_clip
        self.hook_keyframe = hook_keyframe if hook_keyframe is not None else HookKeyframeGroup()
        self.hook_ref = hook_ref if hook_ref is not None else HookRef()

    @property
    def is_model_as_lora(self) -> bool:
        return self.lora is None

    def base_strength(self, target: EnumWeightTarget) -> float:
        return self.strength_clip if target is EnumWeightTarget.Clip else self.strength_model

    def clone(self) -> "WeightHook":
        """A new hook object with the same ref, data and keyframe group object."""
        c = WeightHook.__new__(WeightHook)
        c.__dict__.update(self.__dict__)
        return c

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.hook_ref is other.hook_ref  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.hook_ref)

    def __repr__(self) -> str:
        kind = "model-as-LoRA" if self.is_model_as_lora else f"LoRA {self.lora_name!r}"
        return (f"WeightHook({kind}, model={self.strength_model}, clip={self.strength_clip}, "
                f"{len(self.hook_keyframe)} keyframes)")


class HookGroup:
    """An ordered set of hooks (one per ref). ComfyUI's API: `add`, `clone`, `clone_and_combine`,
    `contains`, `is_subset_of`, `new_with_common_hooks`, `get_type`, `set_keyframes_on_hooks`,
    `combine_all_hooks`."""

    __slots__ = ("hooks", "__weakref__")

    def __init__(self, hooks: Iterable[Any] = ()) -> None:
        self.hooks: list[Any] = []
        for hook in hooks:
            self.add(hook)

    def __len__(self) -> int:
        return len(self.hooks)

    def __repr__(self) -> str:
        return f"HookGroup({self.hooks!r})"

    def add(self, hook: Any) -> None:
        """Add `hook` unless a hook with its ref is already in (mutates: use on a clone)."""
        if hook not in self.hooks:
            self.hooks.append(hook)

    def contains(self, hook: Any) -> bool:
        return hook in self.hooks

    def get_type(self, hook_type: EnumHookType) -> list[Any]:
        return [h for h in self.hooks if getattr(h, "hook_type", None) is hook_type]

    def is_subset_of(self, other: "HookGroup") -> bool:
        return set(self.hooks) <= set(other.hooks)

    def new_with_common_hooks(self, other: "HookGroup") -> "HookGroup":
        return HookGroup(h.clone() for h in self.hooks if other.contains(h))

    def clone(self) -> "HookGroup":
        return HookGroup(h.clone() for h in self.hooks)

    def clone_and_combine(self, other: "HookGroup | None") -> "HookGroup":
        c = self.clone()
        if other is not None:
            for hook in other.hooks:
                c.add(hook.clone())
        return c

    def set_keyframes_on_hooks(self, hook_kf: HookKeyframeGroup | None) -> None:
        """Give every hook one new keyframe group object (a copy of `hook_kf`; None: no keyframes)."""
        shared = HookKeyframeGroup() if hook_kf is None else hook_kf.clone()
        for hook in self.hooks:
            hook.hook_keyframe = shared

    @staticmethod
    def combine_all_hooks(groups: Iterable["HookGroup | None"], require_count: int = 0) -> "HookGroup | None":
        """The hooks of every non-None group, in order: None when there are none, the group itself
        when there is one, else a new group of clones."""
        actual = [g for g in groups if g is not None]
        if len(actual) < require_count:
            raise ValueError(f"need at least {require_count} hook groups to combine, got {len(actual)}")
        if not actual:
            return None
        if len(actual) == 1:
            return actual[0]
        combined = actual[0].clone()
        for group in actual[1:]:
            combined = combined.clone_and_combine(group)
        return combined


def create_hook_lora(lora: Mapping[str, Any], strength_model: float, strength_clip: float,
                     name: str = "", source: Hashable | None = None) -> HookGroup:
    """A group of one LoRA hook."""
    return HookGroup([WeightHook(strength_model, strength_clip, lora=lora, lora_name=name, lora_source=source)])


def create_hook_model_as_lora(weights_model: Mapping[str, Any] | None, weights_clip: Mapping[str, Any] | None,
                              strength_model: float, strength_clip: float) -> HookGroup:
    """A group of one model-as-LoRA hook."""
    return HookGroup([WeightHook(strength_model, strength_clip, weights_model=weights_model,
                                 weights_clip=weights_clip)])


def patch_weights_from_model(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """A model's tensors to act as a patch: everything but its `model_sampling` tables."""
    return {k: v for k, v in state_dict.items() if not k.startswith("model_sampling")}

"""A weight hook's patches for one target (the model's UNet or the CLIP's encoders), as data.

After ComfyUI's `WeightHook.add_hook_patches` and `ModelPatcher.add_hook_patches` /
`get_combined_hook_patches` (comfy/hooks.py, comfy/model_patcher.py) and the `model_as_lora`
patch kind of comfy/lora.py `calculate_weight`:

- a LoRA hook's file is resolved against the target's key map (`comfy_core.lora.parse_lora`);
- a model-as-LoRA hook patches each weight it has by `strength * (its weight - the original)`;
- every entry is `PatchEntry(base strength, HookPatch(...))`; a group's entries at a keyframe
  strength `s` have their strength multiplied by `s` (left as they are when `s` is close to 1).

`HookPatch` marks what a hook added, so a CLIP's hook patches can be told from its own LoRAs
and replaced (comfy_core/hooks/clip.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable, Iterable

import torch

from comfy_core.hooks.hook import EnumWeightTarget, WeightHook
from comfy_core.lora.keymap import text_encoder_key_map, unet_key_map
from comfy_core.lora.loader import parse_lora
from comfy_core.weights.errors import PatchDataError
from comfy_core.weights.entries import Function, PatchEntry, WeightAdapter

Patches = dict[str, list[PatchEntry]]  # parameter name -> entries, in order


@dataclass(frozen=True, eq=False)
class DiffPatch:
    """`weight += function(strength * diff)` (a LoRA file's plain `.diff` / `.diff_b` tensors)."""

    diff: torch.Tensor

    def apply_to(self, weight: torch.Tensor, strength: float, function: Function) -> torch.Tensor:
        delta = self.diff.to(device=weight.device, dtype=weight.dtype)
        if delta.shape != weight.shape:
            raise PatchDataError(f"hook diff of shape {tuple(delta.shape)} does not fit weight of shape {tuple(weight.shape)}")
        weight += function(strength * delta)
        return weight


@dataclass(frozen=True, eq=False)
class ModelAsLoraPatch:
    """`weight += function(strength * (target - original))`, the difference taken in float32."""

    target: torch.Tensor
    original: torch.Tensor

    def apply_to(self, weight: torch.Tensor, strength: float, function: Function) -> torch.Tensor:
        diff = (self.target.to(device=weight.device, dtype=torch.float32)
                - self.original.to(device=weight.device, dtype=torch.float32))
        if diff.shape != weight.shape:
            raise PatchDataError(f"model-as-LoRA weight of shape {tuple(diff.shape)} does not fit weight "
                                 f"of shape {tuple(weight.shape)}")
        weight += function(strength * diff.to(weight.dtype))
        return weight


@dataclass(frozen=True, eq=False)
class HookPatch:
    """A hook's patch data: `adapter` applied as is, marked as coming from `hook_ref`."""

    hook_ref: Any
    adapter: WeightAdapter

    def apply_to(self, weight: torch.Tensor, strength: float, function: Function) -> torch.Tensor:
        return self.adapter.apply_to(weight, strength, function)

    def cache_signature(self) -> Hashable | None:
        # A LoRA adapter read from a file names it; anything else is known by identity only.
        method = getattr(type(self.adapter), "cache_signature", None)
        inner = method(self.adapter) if method is not None else None
        return None if inner is None else ("hook", inner)


def _adapter(record: Any) -> WeightAdapter:
    if isinstance(record, WeightAdapter):
        return record
    if isinstance(record, tuple) and len(record) == 2 and record[0] == "diff":
        return DiffPatch(record[1][0])
    raise PatchDataError(f"hook LoRA record of unsupported kind {type(record).__name__}")


def hook_patches(hook: WeightHook, target: EnumWeightTarget, patcher: Any) -> Patches:
    """The entries `hook` adds to `patcher`'s weights (names the patcher's module does not have
    are left out, as ComfyUI leaves them): the ones registered for the hook's ref on the patcher
    (`patcher.hook_patches`, ComfyUI's `ModelPatcher.add_hook_patches`) when there are some.
    Model-as-LoRA differences are taken against the base module's original tensors
    (`patcher.model_state_dict()`, never patched ones)."""
    registered = getattr(patcher, "hook_patches", None)  # ComfyUI's add_hook_patches (compat's patcher)
    if registered and hook.hook_ref in registered:
        return {key: [e._replace(data=HookPatch(hook.hook_ref, e.data))
                      if hasattr(e.data, "apply_to") and not isinstance(e.data, HookPatch) else e
                      for e in entries] for key, entries in registered[hook.hook_ref].items()}
    known = patcher.weight_keys()
    strength = hook.base_strength(target)
    out: Patches = {}
    if not hook.is_model_as_lora:
        key_map = (text_encoder_key_map(patcher.model) if target is EnumWeightTarget.Clip
                   else unet_key_map(patcher.model))
        parsed = parse_lora(hook.lora, key_map, hook.lora_name, hook.lora_source)
        records = parsed.patches.items()
    else:
        weights = hook.weights_clip if target is EnumWeightTarget.Clip else hook.weights_model
        originals = patcher.model_state_dict() if weights else {}
        records = [(key, ModelAsLoraPatch(t, originals[key])) for key, t in (weights or {}).items() if key in originals]
    for key, record in records:
        if key in known:
            out.setdefault(key, []).append(PatchEntry(strength, HookPatch(hook.hook_ref, _adapter(record))))
    return out


def scaled(entries: Iterable[PatchEntry], multiplier: float) -> list[PatchEntry]:
    """Entries at `multiplier` times their strength; unchanged when it is close to 1 (ComfyUI's rule).

    An entry that ends at strength 0 is left out: it adds `0·delta`, exactly nothing, so a hook
    at strength 0 is no hook at all (bit for bit: a recomputed copy of a weight can make kernels
    round differently than the original tensor does) and costs nothing.
    """
    if not math.isclose(multiplier, 1.0):
        entries = [e._replace(strength_patch=e.strength_patch * multiplier) for e in entries]
    return [e for e in entries if not (e.strength_patch == 0.0 and e.strength_model == 1.0)]


def combined(per_hook: Iterable[tuple[Patches, float]]) -> Patches:
    """One patch set from several hooks' patches, each at its keyframe multiplier, hooks in order."""
    out: Patches = {}
    for patches, multiplier in per_hook:
        for key, entries in patches.items():
            kept = scaled(entries, multiplier)
            if kept:
                out.setdefault(key, []).extend(kept)
    return out

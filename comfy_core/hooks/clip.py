"""A CLIP that encodes with hooks: SetClipHooks' result.

After ComfyUI's `SetClipHooks` (comfy_extras/nodes_hooks.py) and `CLIP.add_hooks_to_dict` /
`encode_from_tokens_scheduled` (comfy/sd.py):

- the hooks' CLIP patches (`strength_clip`, times a keyframe multiplier) are weight patches of
  the clone's patcher, marked as hook patches (`HookPatch`) so a later SetClipHooks replaces them
  and a later LoRA adds to them; every way of encoding with this CLIP sees them;
- without `schedule_clip` the hooks' keyframes are ignored (multiplier 1); with it, a plain
  encode uses each hook's first keyframe, and `encode_from_tokens_scheduled` encodes once per
  range of the hooks' CLIP schedule (comfy_core/hooks/schedule.py), each entry carrying
  `clip_start_percent` / `clip_end_percent`, which the sampler intersects with the entry's range;
- with `apply_to_conds` every encoding carries the hooks (`"hooks"`), so the sampler runs those
  conds with the hooks' model patches.

`patcher.forced_hooks` holds the hooks in force for the encoders (ComfyUI's attribute), so the
patcher's cache signature changes with them; the CLIP's own signature adds the two flags and
the hooks the conds get.
"""
from __future__ import annotations

from typing import Any, Hashable, Mapping

from comfy_core.hooks.hook import EnumHookType, EnumWeightTarget, HookGroup
from comfy_core.hooks.patches import HookPatch, Patches, combined, hook_patches
from comfy_core.hooks.schedule import clip_schedule
from comfy_core.patching.signature import fingerprint
from comfy_core.text_encoders.clip import CLIP


def without_hook_patches(patcher: Any) -> Any:
    """A clone of `patcher` whose weight patches include no hook patches."""
    n = patcher.clone()
    n.patches = {k: kept for k, v in n.patches.items() if (kept := [e for e in v if not isinstance(e.data, HookPatch)])}
    return n


def with_hook_patches(patcher: Any, per_hook: list[tuple[Patches, float]]) -> Any:
    """A clone of `patcher` with its hook patches replaced by `per_hook` (patches, multiplier)."""
    n = without_hook_patches(patcher)
    for key, entries in combined(per_hook).items():
        n.patches.setdefault(key, []).extend(entries)
    return n


class HookedClip(CLIP):
    """ComfyUI's CLIP with `apply_hooks_to_conds`, `use_clip_schedule` and `patcher.forced_hooks`."""

    def __init__(self, patcher: Any, tokenizer: Any) -> None:
        super().__init__(patcher, tokenizer)
        self.apply_hooks_to_conds: HookGroup | None = None
        self.use_clip_schedule = False
        # hook_ref -> the hook's patches on these encoders (resolved once, at SetClipHooks).
        self.hook_clip_patches: dict[Any, Patches] = {}

    @classmethod
    def of(cls, clip: CLIP) -> "HookedClip":
        """A hooked clone of `clip` (a plain CLIP or a HookedClip)."""
        if isinstance(clip, HookedClip):
            return clip.clone()
        n = cls(clip.patcher.clone(), clip._tokenizer)
        n._embedding_lookup = clip._embedding_lookup
        return n

    def clone(self) -> "HookedClip":
        n = HookedClip(self.patcher.clone(), self._tokenizer)
        n._embedding_lookup = self._embedding_lookup
        n.apply_hooks_to_conds = self.apply_hooks_to_conds
        n.use_clip_schedule = self.use_clip_schedule
        n.hook_clip_patches = self.hook_clip_patches
        return n

    def cache_signature(self) -> Hashable | None:
        base = super().cache_signature()
        if base is None:
            return None
        key, stable = fingerprint((base, self.apply_hooks_to_conds, self.use_clip_schedule))
        return key if stable else None

    # --- hooks ---

    @property
    def forced_hooks(self) -> HookGroup | None:
        return getattr(self.patcher, "forced_hooks", None)

    def _per_hook(self, multipliers: Mapping[Any, float] | None = None) -> list[tuple[Patches, float]]:
        """Each forced hook's patches with its multiplier (`multipliers` by hook, else resting)."""
        forced = self.forced_hooks
        if forced is None:
            return []
        out = []
        for hook in forced.get_type(EnumHookType.Weight):
            m = multipliers[hook] if multipliers is not None else hook.hook_keyframe.resting_strength
            out.append((self.hook_clip_patches.get(hook.hook_ref, {}), m))
        return out

    def set_forced_hooks(self, hooks: HookGroup) -> None:
        """Make `hooks` the hooks in force on the encoders (resolving their CLIP patches)."""
        for hook in hooks.get_type(EnumHookType.Weight):
            if hook.hook_ref not in self.hook_clip_patches:
                self.hook_clip_patches = {**self.hook_clip_patches,
                                          hook.hook_ref: hook_patches(hook, EnumWeightTarget.Clip, self.patcher)}
        self.patcher.forced_hooks = hooks
        self.patcher = with_hook_patches(self.patcher, self._per_hook())
        self.patcher.forced_hooks = hooks

    # --- encoding ---

    def _hooks_into(self, d: dict) -> dict:
        if self.apply_hooks_to_conds:  # an empty group is not attached (ComfyUI tests truthiness)
            d["hooks"] = self.apply_hooks_to_conds
        return d

    def encode_from_tokens(self, tokens: Mapping[str, Any], return_pooled: bool | str = False,
                           return_dict: bool = False) -> Any:
        out = super().encode_from_tokens(tokens, return_pooled=return_pooled, return_dict=return_dict)
        return self._hooks_into(out) if return_dict else out

    def encode_from_tokens_scheduled(self, tokens: Mapping[str, Any], unprojected: bool = False,
                                     add_dict: Mapping[str, Any] | None = None, show_pbar: bool = True) -> list:
        forced = self.forced_hooks
        if forced is None or not self.use_clip_schedule:
            return super().encode_from_tokens_scheduled(tokens, unprojected, add_dict, show_pbar)
        add_dict = dict(add_dict or {})
        out = []
        for (start, end), keyframes in clip_schedule(forced):
            # Ranges outside the entry's own percent range are never used: not encoded.
            if "start_percent" in add_dict and end < add_dict["start_percent"]:
                continue
            if "end_percent" in add_dict and start > add_dict["end_percent"]:
                continue
            multipliers = {hook: (1.0 if kf is None else kf.strength) for hook, kf in keyframes}
            ranged = CLIP(with_hook_patches(self.patcher, self._per_hook(multipliers)), self._tokenizer)
            encoded = ranged.encode_from_tokens(tokens, return_pooled="unprojected" if unprojected else True,
                                                return_dict=True)
            cond = encoded.pop("cond")
            d = {**encoded, "clip_start_percent": start, "clip_end_percent": end}  # pooled, attention_mask
            d.update(add_dict)
            out.append([cond, self._hooks_into(d)])
        return out


def set_clip_hooks(clip: CLIP, hooks: HookGroup | None, apply_to_conds: bool, schedule_clip: bool) -> CLIP:
    """SetClipHooks: a clone of `clip` encoding with `hooks` (None: `clip` as it is)."""
    if hooks is None:
        return clip
    n = HookedClip.of(clip)
    if apply_to_conds:
        n.apply_hooks_to_conds = hooks
    forced = hooks.clone()
    n.use_clip_schedule = schedule_clip
    if not schedule_clip:
        forced.set_keyframes_on_hooks(None)
    n.set_forced_hooks(forced)
    return n

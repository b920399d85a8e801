"""Hooks during one sampling run: registration, keyframe stepping, and running a hook group.

After ComfyUI's hook handling in comfy/samplers.py (`filter_registered_hooks_on_conds`,
`_calc_cond_batch` grouping by `cond["hooks"]`, `process_conds` → `initialize_timesteps`),
comfy/sampler_helpers.py (`prepare_model_patcher`: hooks collected from the conds and
registered) and comfy/model_patcher.py (`register_all_hook_patches`,
`prepare_hook_patches_current_keyframe`, `apply_hooks` / `patch_hooks`):

- `HookRun.for_conds(patcher, conds)` collects the weight hooks of every entry, resolves each
  hook's patches against the model once (per hook ref), and leaves on each entry only the hooks
  that registered (weight hooks, and the option hooks `register_option_hooks` registered) (an entry whose hooks all drop out, or every entry when none registered, loses
  its `hooks` key, as in ComfyUI);
- `start(model_sampling)` turns keyframe starts into sigmas (a fresh cursor per keyframe group
  object: the run never writes into the HOOKS values);
- per step the batching code calls `prepare(sigma, hooks, model_options)` for each active entry
  with hooks, then runs each group inside `applied(hooks)`: the group's patches, at the current
  keyframe strengths, on top of the model's own applied weights, as a weight overlay on the
  patcher (restored to the applied tensors after, bit-exactly);
- the patched weights of a group are cached per (group, strengths) for the run, so a group whose
  keyframe did not change costs pointer swaps only (ComfyUI recomputes when a keyframe changes).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from comfy_core.hooks.cursor import KeyframeCursor
from comfy_core.hooks.hook import EnumHookType, EnumWeightTarget, HookGroup
from comfy_core.hooks.patches import Patches, combined, hook_patches
from comfy_core.patching.patcher import _resolve_parent
from comfy_core.patching.weight_access import stored_form, true_weight
from comfy_core.weights.entries import calculate_weight

# The `model_options` key the batching code finds the run under (comfy_core/sampling/cond_batch.py).
HOOK_RUN_OPTION = "hook_run"


def _hook_groups(conds: dict[str, list[dict]]) -> list[Any]:
    return [e["hooks"] for entries in conds.values() for e in entries if e.get("hooks") is not None]


class HookRun:
    """The registered hooks of one sampling run and their per-run state."""

    def __init__(self, patcher: Any, patches: dict[Any, Patches], registered: HookGroup) -> None:
        self.patcher = patcher
        self.registered = registered
        self._patches = patches  # hook_ref -> the hook's model patches
        self._cursors: dict[int, KeyframeCursor] = {}
        self._keyframe_groups: list[Any] = []  # keeps the groups the cursor ids name alive
        # id(group) -> (group, strengths, {key: patched tensor}); the group is kept alive.
        self._cache: dict[int, tuple[HookGroup, tuple[float, ...], dict[str, torch.Tensor]]] = {}
        self.weights_computed = 0  # patched weights computed (not taken from the cache)

    def __deepcopy__(self, memo: dict) -> "HookRun":
        return self  # model_options get deep-copied by packs; the run is one object

    # --- registration ---

    @classmethod
    def for_conds(cls, patcher: Any, conds: dict[str, list[dict]]) -> "HookRun | None":
        """Register the weight hooks `conds`' entries carry (the entries are edited in place: pass
        the run's copies). None when no hook registered (every entry's `hooks` removed then)."""
        found = HookGroup()
        for group in _hook_groups(conds):
            for hook in group.hooks:
                found.add(hook)
        registered = HookGroup()
        patches: dict[Any, Patches] = {}
        for hook in found.get_type(EnumHookType.Weight):
            if hook.hook_ref not in patches:
                patches[hook.hook_ref] = hook_patches(hook, EnumWeightTarget.Model, patcher)
            registered.add(hook)
        # hooks that bring options registered before the run (`register_option_hooks`) stay on
        # their entries too: a hooked-only one's options join those entries' passes only
        for kind in (EnumHookType.TransformerOptions, EnumHookType.AdditionalModels):
            for hook in found.get_type(kind):
                if callable(getattr(hook, "add_hook_patches", None)):
                    registered.add(hook)
        _filter_registered(conds, registered)
        if not registered:
            return None
        return cls(patcher, patches, registered)

    def start(self, model_sampling: Any) -> None:
        """Keyframe sigmas for this run's model sampling; every cursor at its first keyframe."""
        self._cursors.clear()
        self._keyframe_groups = []
        for hook in self.registered.hooks:
            kf = hook.hook_keyframe
            if id(kf) not in self._cursors:
                self._cursors[id(kf)] = KeyframeCursor(kf, model_sampling)
                self._keyframe_groups.append(kf)

    # --- per step ---

    def prepare(self, sigma: torch.Tensor, hooks: HookGroup, model_options: dict) -> None:
        """Move the keyframes of `hooks` on for the step at `sigma` ([B], all equal)."""
        sample_sigmas = model_options.get("transformer_options", {}).get("sample_sigmas")
        if sample_sigmas is None:
            sample_sigmas = sigma
        for hook in hooks.hooks:
            cursor = self._cursors.get(id(hook.hook_keyframe))
            if cursor is not None:
                cursor.step(sigma[0], sample_sigmas)

    def strengths(self, hooks: HookGroup) -> tuple[float, ...]:
        """The keyframe multiplier of each hook of `hooks` now."""
        out = []
        for hook in hooks.hooks:
            cursor = self._cursors.get(id(hook.hook_keyframe))
            out.append(cursor.strength if cursor is not None else hook.hook_keyframe.resting_strength)
        return tuple(out)

    def transformer_options(self, hooks: HookGroup) -> dict:
        """The `transformer_options` the passes of `hooks`' entries get from its transformer-options
        hooks (ComfyUI's `create_transformer_options_from_hooks`: each hook's `on_apply_hooks(patcher,
        options)` adds its dictionary when its scope is hooked-only)."""
        options: dict = {}
        for hook in hooks.get_type(EnumHookType.TransformerOptions):
            apply = getattr(hook, "on_apply_hooks", None)
            if callable(apply):
                apply(self.patcher, options)
        return options

    def group_patches(self, hooks: HookGroup) -> Patches:
        """The group's patches at its current keyframe strengths."""
        return combined((self._patches.get(hook.hook_ref, {}), s) for hook, s in zip(hooks.hooks, self.strengths(hooks)))

    @contextlib.contextmanager
    def applied(self, hooks: HookGroup | None) -> Iterator[None]:
        """Run the block with `hooks`' weights on the model (nothing for None or an empty group)."""
        weights = self._weights(hooks) if hooks is not None else {}
        if not weights:
            yield
            return
        with self.patcher.overlay_weights(weights):
            yield

    def _weights(self, hooks: HookGroup) -> dict[str, torch.Tensor]:
        strengths = self.strengths(hooks)
        cached = self._cache.get(id(hooks))
        if cached is not None and cached[0] is hooks and cached[1] == strengths:
            return cached[2]
        out = {}
        with torch.no_grad():
            for key, entries in self.group_patches(hooks).items():
                # On top of the model's own patches: computed from the tensor applied now, as the
                # true weight (a scaled-fp8 layer's stored value times its scale), stored back in
                # the layer's own form.
                owner, attr = _resolve_parent(self.patcher.model, key)
                current = self.patcher.applied_tensor(key).detach()
                out[key] = stored_form(owner, attr, key,
                                       calculate_weight(true_weight(owner, attr, current), entries, key), current.dtype)
                self.weights_computed += 1
        self._cache[id(hooks)] = (hooks, strengths, out)  # one strength set per group: the latest
        return out

    def close(self) -> None:
        """Drop the cached weights (the end of the run)."""
        self._cache.clear()


def _run_hooks(conds: dict[str, list[dict]]) -> HookGroup:
    """Every hook of the run: the entries' groups and their ControlNets' `extra_hooks` (down each
    `previous_controlnet` chain), as ComfyUI's `get_hooks_from_cond` collects them."""
    found = HookGroup()
    controls: dict[int, Any] = {}
    for entries in conds.values():
        for e in entries:
            for hook in getattr(e.get("hooks"), "hooks", ()):
                found.add(hook)
            if e.get("control") is not None:
                controls[id(e["control"])] = e["control"]
    for control in controls.values():
        while control is not None:
            for hook in getattr(getattr(control, "extra_hooks", None), "hooks", ()):
                found.add(hook)
            control = getattr(control, "previous_controlnet", None)
    return found


def register_option_hooks(patcher: Any, conds: dict[str, list[dict]], model_options: dict) -> HookGroup:
    """Register the run's hooks that bring options rather than weights (ComfyUI's
    `prepare_model_patcher`: transformer-options hooks, then additional-models hooks): each such
    hook with an `add_hook_patches(patcher, model_options, target_dict, registered)` method (the
    hook classes of ComfyUI's API, compat/hooks_api.py, and packs' subclasses) merges what it
    brings into this run's `model_options` (a run's copy) itself. Returns the registered hooks."""
    registered = HookGroup()
    found = _run_hooks(conds)
    target = {"target": EnumWeightTarget.Model}
    for kind in (EnumHookType.TransformerOptions, EnumHookType.AdditionalModels):
        for hook in found.get_type(kind):
            add = getattr(hook, "add_hook_patches", None)
            if add is not None:
                add(patcher, model_options, target, registered)
    return registered


def _filter_registered(conds: dict[str, list[dict]], registered: HookGroup) -> None:
    """Keep on each entry only registered hooks (ComfyUI's `filter_registered_hooks_on_conds`):
    entries sharing a group object keep sharing the replacement."""
    replacement: dict[int, Any] = {}
    for entries in conds.values():
        for e in entries:
            group = e.get("hooks")
            if "hooks" not in e:
                continue
            if not registered:
                e.pop("hooks")
                continue
            if group is None or group.is_subset_of(registered):
                continue
            if id(group) not in replacement:
                common = group.new_with_common_hooks(registered)
                replacement[id(group)] = common if len(common) else None
            e["hooks"] = replacement[id(group)]

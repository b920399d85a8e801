"""What a MODEL patcher carries besides patches: wrappers, callbacks, attachments, injections and
additional models (ComfyUI's comfy/model_patcher.py `ModelPatcher` members), as data, with the
members our runtime uses (adding a keyed wrapper, reading wrappers and callbacks, injecting,
the run lifecycle). ComfyUI's other accessors (`set_attachments`, `add_callback`,
`set_injections`, `set_additional_models`, ...) are compat's (compat/mp_model_patcher.py).

All of it is data on the patcher, copied by `clone()` (lists copied, so a clone's additions never
reach its parent), and read by our runtime at ComfyUI's points: wrappers and callbacks are merged
into a run's `transformer_options` by `sampling_extensions(...)` (comfy_core/sampling/guider.py),
`pre_run()` / `cleanup()` run the ON_PRE_RUN / ON_CLEANUP callbacks around a sampling run,
injections are applied by `inject_model()` / `eject_model()` while the model runs.
"""
from __future__ import annotations

from typing import Any, Callable

from comfy_core.wrappers import CallbacksMP, PatcherInjection, WrappersMP, merge_nested_dicts

class HookMode:
    """ComfyUI's `EnumHookMode` values (comfy/hooks.py); ours applies hook weights per group."""

    MinVram = "minvram"
    MaxSpeed = "maxspeed"


class ModelPatcherExtensions:
    """Mixin for `ModelPatcher`: the members above. `_init_extensions()` sets them up."""

    wrappers: dict[str, dict[Any, list[Callable]]]
    callbacks: dict[str, dict[Any, list[Callable]]]

    def _init_extensions(self, size: int = 0, weight_inplace_update: bool = False) -> None:
        self.size = size
        self.weight_inplace_update = weight_inplace_update
        self.wrappers = WrappersMP.init_wrappers()
        self.callbacks = CallbacksMP.init_callbacks()
        self.attachments: dict[str, Any] = {}
        self.additional_models: dict[str, list[Any]] = {}
        self.injections: dict[str, list[PatcherInjection]] = {}
        self.is_injected = False
        self.skip_injection = False
        self.hook_mode = HookMode.MaxSpeed
        # ComfyUI keeps backed-up weights and object patches here while patched; ours live in the
        # base module's state (comfy_core/patching/state.py), so these stay empty: packs read them.
        self.backup: dict[str, Any] = {}
        self.object_patches_backup: dict[str, Any] = {}

    def _clone_extensions(self, n: "ModelPatcherExtensions") -> None:
        """Copy the members onto the clone `n` (called by `ModelPatcher.clone`), then run ON_CLONE."""
        n.wrappers = {kind: {k: list(v) for k, v in by_key.items()} for kind, by_key in self.wrappers.items()}
        n.callbacks = {kind: {k: list(v) for k, v in by_key.items()} for kind, by_key in self.callbacks.items()}
        n.attachments = {k: (a.on_model_patcher_clone() if hasattr(a, "on_model_patcher_clone") else a)
                         for k, a in self.attachments.items()}
        n.additional_models = {k: [m.clone() for m in models] for k, models in self.additional_models.items()}
        n.injections = {k: list(v) for k, v in self.injections.items()}
        n.is_injected = False
        n.backup = {}
        n.object_patches_backup = {}
        for callback in self.get_all_callbacks(CallbacksMP.ON_CLONE):
            callback(n)

    # --- callbacks ---

    def get_all_callbacks(self, call_type: str) -> list[Callable]:
        return [c for cs in self.callbacks.get(call_type, {}).values() for c in cs]

    # --- wrappers ---

    def add_wrapper_with_key(self, wrapper_type: str, key: Any, wrapper: Callable) -> None:
        self.wrappers.setdefault(wrapper_type, {}).setdefault(key, []).append(wrapper)

    def remove_wrappers_with_key(self, wrapper_type: str, key: Any) -> None:
        self.wrappers.get(wrapper_type, {}).pop(key, None)

    def get_wrappers(self, wrapper_type: str, key: Any) -> list[Callable]:
        return self.wrappers.get(wrapper_type, {}).get(key, [])

    def get_all_wrappers(self, wrapper_type: str) -> list[Callable]:
        return [w for ws in self.wrappers.get(wrapper_type, {}).values() for w in ws]

    def sampling_extensions(self, model_options: dict) -> dict:
        """`model_options` with this patcher's wrappers and callbacks merged into its
        `transformer_options` (a new dict; as ComfyUI's `prepare_model_patcher`)."""
        out = dict(model_options)
        to = dict(out.get("transformer_options", {}))
        to["wrappers"] = merge_nested_dicts(to.get("wrappers", {}), self.wrappers)
        to["callbacks"] = merge_nested_dicts(to.get("callbacks", {}), self.callbacks)
        out["transformer_options"] = to
        return out

    # --- injections and additional models ---

    def inject_model(self) -> None:
        """Run every injection's `inject(patcher)` (once), then ON_INJECT_MODEL callbacks."""
        if self.is_injected or self.skip_injection:
            return
        for injections in self.injections.values():
            for injection in injections:
                injection.inject(self)
        self.is_injected = True
        if self.injections:
            for callback in self.get_all_callbacks(CallbacksMP.ON_INJECT_MODEL):
                callback(self)

    def eject_model(self) -> None:
        """Undo `inject_model()`: every injection's `eject(patcher)`, then ON_EJECT_MODEL."""
        if not self.is_injected:
            return
        for injections in self.injections.values():
            for injection in injections:
                injection.eject(self)
        self.is_injected = False
        for callback in self.get_all_callbacks(CallbacksMP.ON_EJECT_MODEL):
            callback(self)

    def get_additional_models(self) -> list[Any]:
        return [m for models in self.additional_models.values() for m in models]

    def get_nested_additional_models(self) -> list[Any]:
        """Additional models, theirs, and so on, each once, breadth first (as ComfyUI)."""
        seen: set[int] = set()
        out: list[Any] = []
        level = self.get_additional_models()
        while level:
            nxt = []
            for m in level:
                if id(m) in seen:
                    continue
                seen.add(id(m))
                out.append(m)
                getter = getattr(m, "get_additional_models", None)
                if getter is not None:
                    nxt.extend(getter())
            level = nxt
        return out

    # --- run lifecycle ---

    def pre_run(self) -> None:
        """Start of a sampling run: the network's run state (`begin_sampling_run()`, where it keeps
        some: ComfyUI's `current_patcher` setter), then ON_PRE_RUN callbacks (`callback(patcher)`)."""
        _network_run_hook(self, "begin_sampling_run")
        for callback in self.get_all_callbacks(CallbacksMP.ON_PRE_RUN):
            callback(self)

    def prepare_state(self, timestep: Any) -> None:
        """Each step: ON_PREPARE_STATE callbacks (`callback(patcher, timestep)`)."""
        for callback in self.get_all_callbacks(CallbacksMP.ON_PREPARE_STATE):
            callback(self, timestep)

    def cleanup(self) -> None:
        """End of a sampling run: eject injections, then ON_CLEANUP callbacks (`callback(patcher)`)."""
        self.eject_model()
        _network_run_hook(self, "end_sampling_run")
        for callback in self.get_all_callbacks(CallbacksMP.ON_CLEANUP):
            callback(self)


def _network_run_hook(patcher: Any, name: str) -> None:
    """Call the diffusion network's `name()` when it has one (a network that keeps state for one
    sampling run, such as a prefix key/value cache, starts and drops it here)."""
    network = getattr(getattr(patcher, "model", None), "diffusion_model", None)
    hook = getattr(network, name, None)
    if callable(hook):
        hook()

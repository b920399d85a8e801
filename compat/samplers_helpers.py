"""ComfyUI's `comfy.sampler_helpers`, the hook helpers of `comfy.samplers` and the `comfy.sample`
helpers, over our runtime.

After comfy/sampler_helpers.py, comfy/samplers.py and comfy/sample.py (today's ComfyUI). Our
guider (comfy_core/sampling/guider.py) prepares a run inside `ModelPatcher.applied()`;
`prepare_sampling` is for packs whose own `outer_sample` replaces the guider's (LanPaint): it
loads the model as ComfyUI's `load_models_gpu` does (`Patcher.keep_loaded`: the module stays
patched as its patcher says until a patcher with other patches wants it) and hands back the
patched model (`model.model`, what the guider's `inner_model` is during a run).
`prepare_model_patcher` and the hook helpers are for guiders that replace `CFGGuider.sample`
(ComfyUI-NAG): they register the conditioning's hooks on the patcher and in the run's
`model_options` as ComfyUI's do, in the forms our guider's `outer_sample` then reads
(comfy_core/hooks/sampling.py `HookRun`).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


class UnsupportedSamplingHelper(NotImplementedError):
    """A ComfyUI sampling helper whose contract our runtime cannot honour."""


def convert_cond(cond: Any) -> list[dict]:
    """CONDITIONING `[[tensor, dict], ...]` to entry dicts (`cross_attn`, `model_conds`, `uuid`)."""
    from comfy_core.sampling.conditioning import convert_cond as ours

    return ours(cond, "conditioning")


def prepare_mask(noise_mask: torch.Tensor, shape: Any, device: Any) -> torch.Tensor:
    """A noise mask resized to the latent `shape` and repeated over its channels and batch."""
    from comfy_core.sampling.guider import prepare_mask as ours

    return ours(noise_mask, shape, device)


def get_models_from_cond(cond: list[dict], model_type: str) -> list[Any]:
    """The values of `model_type` ("control", "gligen", ...) over the entries, lists flattened."""
    models: list[Any] = []
    for c in cond:
        if model_type in c:
            value = c[model_type]
            models += value if isinstance(value, list) else [value]
    return models


def get_additional_models(conds: dict[str, list[dict]], dtype: Any) -> tuple[list[Any], int]:
    """`(models, inference_memory)` of the models the conditioning carries: ControlNets' models,
    GLIGEN models and `additional_models` (ComfyUI's `get_additional_models`)."""
    controls: list[Any] = []
    gligen: list[Any] = []
    extra: list[Any] = []
    for entries in conds.values():
        controls += get_models_from_cond(entries, "control")
        gligen += get_models_from_cond(entries, "gligen")
        extra += get_models_from_cond(entries, "additional_models")
    models: list[Any] = []
    memory = 0
    seen: set[int] = set()
    for control in controls:
        if id(control) in seen:
            continue
        seen.add(id(control))
        get_models = getattr(control, "get_models", None)
        models += list(get_models()) if callable(get_models) else []
        needs = getattr(control, "inference_memory_requirements", None)
        memory += int(needs(dtype)) if callable(needs) else 0
    return models + [g[1] for g in gligen] + extra, memory


def cleanup_additional_models(models: Any) -> None:
    """`cleanup()` on each model that has one (ComfyUI's `sampler_helpers.cleanup_additional_models`)."""
    for m in models:
        cleanup = getattr(m, "cleanup", None)
        if callable(cleanup):
            cleanup()


def cleanup_models(conds: dict[str, list[dict]], models: Any) -> None:
    """Clean up `models` and every ControlNet the conditioning carries."""
    cleanup_additional_models(models)
    controls: dict[int, Any] = {}
    for entries in conds.values():
        for control in get_models_from_cond(entries, "control"):
            controls[id(control)] = control
    cleanup_additional_models(controls.values())


def estimate_memory(model: Any, noise_shape: Any, conds: dict[str, list[dict]]) -> tuple[int, int]:
    """`(memory for a cond+uncond batch, for one)` in bytes, from the model's `memory_required`."""
    inner = getattr(model, "model", model)
    required = getattr(inner, "memory_required", None)
    if not callable(required):
        raise UnsupportedSamplingHelper(
            f"comfy.sampler_helpers.estimate_memory: {type(inner).__name__} has no memory_required(input_shape)")
    shape = list(noise_shape)
    return required([shape[0] * 2] + shape[1:]), required(shape)


def get_hooks_from_cond(cond: list[dict], full_hooks: Any) -> Any:
    """Add to `full_hooks` (a HookGroup) the hooks of each entry's `hooks` group and the
    `extra_hooks` of its ControlNet and of every `previous_controlnet` down the chain (ComfyUI's
    `sampler_helpers.get_hooks_from_cond`); returns `full_hooks`."""
    from compat.hooks_api import HookGroup

    controls: dict[int, Any] = {}
    for c in cond:
        for hook in getattr(c.get("hooks"), "hooks", ()):
            full_hooks.add(hook)
        if c.get("control") is not None:
            controls[id(c["control"])] = c["control"]
    extra: list[Any] = []
    for control in controls.values():
        while control is not None:
            if getattr(control, "extra_hooks", None) is not None:
                extra.append(control.extra_hooks)
            control = getattr(control, "previous_controlnet", None)
    combined = HookGroup.combine_all_hooks(extra)
    for hook in getattr(combined, "hooks", ()):
        full_hooks.add(hook)
    return full_hooks


def get_additional_models_from_model_options(model_options: dict | None = None) -> list[Any]:
    """The models of the AdditionalModels hooks registered for the run (`model_options
    ["registered_hooks"]`, ComfyUI's function of that name)."""
    from compat.hooks_api import EnumHookType

    registered = (model_options or {}).get("registered_hooks")
    if registered is None:
        return []
    models: list[Any] = []
    for hook in registered.get_type(EnumHookType.AdditionalModels):
        models.extend(getattr(hook, "models", None) or [])
    return models


def _weight_hooks_without_run(conds: Any, model_options: dict | None) -> bool:
    """Whether entries carry weight hooks while no sampling run registered them: our guider's
    `outer_sample` registers them (`HookRun`), which a pack's own `outer_sample` replaces."""
    from comfy_core.hooks.sampling import HOOK_RUN_OPTION
    from compat.hooks_api import EnumHookType

    if (model_options or {}).get(HOOK_RUN_OPTION) is not None:
        return False
    return any(group.get_type(EnumHookType.Weight)
               for entries in conds.values() for e in entries
               for group in [e.get("hooks")] if group is not None)


def _load_model(model: Any) -> None:
    """ComfyUI's `load_models_gpu([model])` for the model a run samples with, strictly: room made
    on its device by the server's memory manager, then the module left patched as `model` says
    (`Patcher.keep_loaded`); a module held by this thread with other patches is an error here
    (compat.device_memory's `load_models_gpu` leaves it as it is), since the run would then use
    the wrong weights."""
    from compat.devices import server_memory

    keep_loaded = getattr(model, "keep_loaded", None)
    if not callable(keep_loaded):
        raise UnsupportedSamplingHelper(
            f"comfy.sampler_helpers.prepare_sampling: {type(model).__name__} is not a MODEL of this engine "
            "(no keep_loaded)")
    memory = server_memory()
    device = None
    if memory is not None:
        if getattr(model, "memory", None) is None:
            memory.track(model)
        device = memory.prepare(model)
    keep_loaded(device)


def prepare_sampling(model: Any, noise_shape: Any, conds: dict[str, list[dict]], model_options: dict | None = None,
                     force_full_load: bool = False, force_offload: bool = False) -> tuple[Any, dict, list]:
    """`(patched model, conds, extra models)` for a run (ComfyUI's `prepare_sampling`, under the
    PREPARE_SAMPLING wrappers of `model_options`): the conditioning's ControlNet / GLIGEN models,
    the registered AdditionalModels hooks' and the patcher's nested additional models are gathered,
    each loaded as `comfy.model_management.load_models_gpu` does, and the MODEL's module left
    patched on its device (`Patcher.keep_loaded`) until a patcher with other patches applies it.
    The first item is `model.model`, the object our guider's `inner_model` is during a run (the
    diffusion model with `apply_model`, `extra_conds`, `memory_required`, `model_sampling`,
    `process_latent_in`, ...); hand the third to `cleanup_models(conds, models)` after the run.

    Weight hooks on the conditioning (comfy.hooks) are applied by our guider's `outer_sample`; a
    pack's own `outer_sample` that calls this without such a run (no `hook_run` in
    `model_options`) gets UnsupportedSamplingHelper rather than a run without the hooks' weights."""
    from comfy_core.wrappers import WrappersMP, run_wrapped

    return run_wrapped(WrappersMP.PREPARE_SAMPLING, model_options, _prepare_sampling, model, noise_shape, conds,
                       model_options=model_options, force_full_load=force_full_load, force_offload=force_offload)


def _prepare_sampling(model: Any, noise_shape: Any, conds: dict[str, list[dict]], model_options: dict | None = None,
                      force_full_load: bool = False, force_offload: bool = False) -> tuple[Any, dict, list]:
    from compat.device_memory import load_models_gpu

    if _weight_hooks_without_run(conds, model_options):
        raise UnsupportedSamplingHelper(
            "comfy.sampler_helpers.prepare_sampling: the conditioning carries weight hooks, which this engine "
            "applies in CFGGuider.outer_sample; a replaced outer_sample would sample without them")
    dtype_of = getattr(model, "model_dtype", None)
    models, inference_memory = get_additional_models(conds, dtype_of() if callable(dtype_of) else None)
    models += get_additional_models_from_model_options(model_options)
    nested = getattr(model, "get_nested_additional_models", None)
    models += list(nested()) if callable(nested) else []
    if force_offload:
        memory_required, minimum_memory_required = 1e20, None
    else:
        try:
            memory_required, minimum_memory_required = estimate_memory(model, noise_shape, conds)
            memory_required += inference_memory
            minimum_memory_required += inference_memory
        except UnsupportedSamplingHelper:
            memory_required, minimum_memory_required = inference_memory, None
    _load_model(model)
    if models:
        load_models_gpu(models, memory_required=memory_required, minimum_memory_required=minimum_memory_required,
                        force_full_load=force_full_load)
    return model.model, conds, models


def prepare_model_patcher(model: Any, conds: dict[str, list[dict]], model_options: dict) -> dict:
    """Register the conditioning's hooks for a run (ComfyUI's `prepare_model_patcher`): the
    patcher's wrappers and callbacks merged into `model_options["transformer_options"]`; the
    TransformerOptions and AdditionalModels hooks' `add_hook_patches` (their options join
    `model_options`), then the weight hooks on the patcher (`register_all_hook_patches`; undone by
    `restore_hook_patches()`); `model_options["registered_hooks"]` the registered group when there
    is one; returns `model_options["to_load_options"]` with the wrappers and callbacks merged in.
    `model_options` is changed in place: pass the run's copy."""
    from comfy_core.wrappers import merge_nested_dicts
    from compat.hooks_api import EnumHookType, EnumWeightTarget, HookGroup, create_target_dict

    hooks = HookGroup()
    for entries in conds.values():
        get_hooks_from_cond(entries, hooks)
    transformer_options = model_options.setdefault("transformer_options", {})
    for name in ("wrappers", "callbacks"):
        merge_nested_dicts(transformer_options.setdefault(name, {}), getattr(model, name, None) or {},
                           copy_dict1=False)
    registered = HookGroup()
    target_dict = create_target_dict(EnumWeightTarget.Model)
    for kind in (EnumHookType.TransformerOptions, EnumHookType.AdditionalModels):
        for hook in hooks.get_type(kind):
            add = getattr(hook, "add_hook_patches", None)
            if callable(add):
                add(model, model_options, target_dict, registered)
    register = getattr(model, "register_all_hook_patches", None)
    if callable(register):
        register(hooks, target_dict, model_options, registered)
    if len(registered) > 0:
        model_options["registered_hooks"] = registered
    to_load_options = model_options.setdefault("to_load_options", {})
    for name in ("wrappers", "callbacks"):
        merge_nested_dicts(to_load_options.setdefault(name, {}), transformer_options[name], copy_dict1=False)
    return to_load_options


# -- the hook helpers of comfy.samplers -------------------------------------------------------------

def preprocess_conds_hooks(conds: dict[str, list[dict]]) -> None:
    """Entries whose ControlNet brings hooks (`get_extra_hooks()`) get, as their `hooks`, the
    ControlNet's hooks combined with their own, one group object per (ControlNet, hooks) pair
    (ComfyUI's `samplers.preprocess_conds_hooks`). In place."""
    from compat.hooks_api import HookGroup

    replacement: dict[tuple[int, int], tuple[Any, Any, list[dict]]] = {}
    for entries in conds.values():
        for e in entries:
            control = e.get("control")
            if control is None:
                continue
            extra = _extra_hooks(control)
            if extra:
                hooks = e.get("hooks")
                replacement.setdefault((id(control), id(hooks)), (control, hooks, []))[2].append(e)
    for control, hooks, entries in replacement.values():
        combined = HookGroup.combine_all_hooks(_extra_hooks(control) + [hooks])
        if combined is not None:
            for e in entries:
                e["hooks"] = combined


def _extra_hooks(control: Any) -> list[Any]:
    """A ControlNet's `get_extra_hooks()` (ComfyUI's ControlBase method), or its chain's
    `extra_hooks` for control objects without the method."""
    get = getattr(control, "get_extra_hooks", None)
    if callable(get):
        return list(get())
    out = []
    while control is not None:
        if getattr(control, "extra_hooks", None) is not None:
            out.append(control.extra_hooks)
        control = getattr(control, "previous_controlnet", None)
    return out


def filter_registered_hooks_on_conds(conds: dict[str, list[dict]], model_options: dict) -> None:
    """Leave on each entry only the hooks registered for the run (`model_options
    ["registered_hooks"]`): with none registered every entry loses its `hooks`; a group with
    unregistered hooks becomes its registered part (None when empty), entries sharing a group
    object sharing the replacement (ComfyUI's `samplers.filter_registered_hooks_on_conds`)."""
    registered = model_options.get("registered_hooks")
    if registered is None:
        for entries in conds.values():
            for e in entries:
                e.pop("hooks", None)
        return
    replacement: dict[int, tuple[Any, list[dict]]] = {}
    for entries in conds.values():
        for e in entries:
            hooks = e.get("hooks")
            if hooks is not None and not hooks.is_subset_of(registered):
                replacement.setdefault(id(hooks), (hooks, []))[1].append(e)
    for hooks, entries in replacement.values():
        common = hooks.new_with_common_hooks(registered)
        new = common if len(common) > 0 else None
        for e in entries:
            e["hooks"] = new


def get_total_hook_groups_in_conds(conds: dict[str, list[dict]]) -> int:
    """How many distinct `hooks` values (group objects, None counting as one) the entries carry
    (ComfyUI's `samplers.get_total_hook_groups_in_conds`)."""
    return len({id(e.get("hooks")) for entries in conds.values() for e in entries})


def cast_to_load_options(model_options: dict | None, device: Any = None, dtype: Any = None) -> None:
    """`.to(device)` then `.to(dtype)` on every object that has `.to` among `model_options
    ["to_load_options"]`'s patches, replace patches, wrappers and callbacks, each replaced by the
    result in place (ComfyUI's `samplers.cast_to_load_options`)."""
    if model_options is None:
        return
    to_load = model_options.get("to_load_options")
    casts = [c for c in (device, dtype) if c is not None]
    if to_load is None or not casts:
        return

    def cast(value: Any) -> Any:
        for c in casts:
            value = value.to(c)
        return value

    for patch_list in to_load.get("patches", {}).values():
        for i, patch in enumerate(patch_list):
            if hasattr(patch, "to"):
                patch_list[i] = cast(patch)
    for by_key in to_load.get("patches_replace", {}).values():
        for key, patch in list(by_key.items()):
            if hasattr(patch, "to"):
                by_key[key] = cast(patch)
    for name in ("wrappers", "callbacks"):
        for by_type in to_load.get(name, {}).values():
            for fns in by_type.values():
                for i, fn in enumerate(fns):
                    if hasattr(fn, "to"):
                        fns[i] = cast(fn)


# -- comfy.sample ----------------------------------------------------------------------------------

def fix_empty_latent_channels(model: Any, latent_image: torch.Tensor, downscale_ratio_spacial: Any = None,
                              downscale_ratio_temporal: Any = None) -> Any:
    """An all-zero latent made to the model's format: its channels, and its size when the ratio it
    was made at is given (ComfyUI's function, today's signature); others as they are."""
    from comfy_core.sampling.guider import fit_empty_latent

    return fit_empty_latent(model.get_model_object("latent_format"), latent_image, downscale_ratio_spacial,
                            downscale_ratio_temporal)


def sample_prepare_sampling(model: Any, noise_shape: Any, positive: Any, negative: Any, noise_mask: Any) -> tuple:
    """`comfy.sample.prepare_sampling`, deprecated in ComfyUI, which returns its inputs and logs so."""
    log.warning("comfy.sample.prepare_sampling isn't used anymore and can be removed")
    return model, positive, negative, noise_mask, []


def sample_cleanup_additional_models(models: Any) -> None:
    """`comfy.sample.cleanup_additional_models`: ComfyUI's does nothing but log (deprecated)."""
    log.warning("comfy.sample.cleanup_additional_models isn't used anymore and can be removed")

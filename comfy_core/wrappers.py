"""Wrappers and callbacks: pack code run around (wrappers) or at (callbacks) fixed points of a run.

The conventions are ComfyUI's (comfy/patcher_extension.py), because node packs build these
structures themselves: wrappers and callbacks are kept as nested dicts
`{kind: {key: [function, ...]}}`, either on a `ModelPatcher` (`patcher.wrappers`,
`patcher.callbacks`) or inside `transformer_options` (`"wrappers"`, `"callbacks"`); `key` lets a
pack find and remove its own entries (None when it has none).

A wrapper is `wrapper(executor, *args, **kwargs)`: it calls `executor(*args, **kwargs)` to run
the next wrapper and, after the last, the wrapped function; `executor.class_obj` is the object
whose method is wrapped (the guider for OUTER_SAMPLE, the model for APPLY_MODEL, ...). The first
wrapper in the list is the outermost. Our runtime runs the wrapped points through `run_wrapped`
(the call sites are listed on `WrappersMP`).

Pure Python: no torch, so the surface module `comfy.patcher_extension` can name these directly.
"""
from __future__ import annotations

import contextvars
from typing import Any, Callable

NestedLists = dict[str, dict[Any, list[Callable]]]


class CallbacksMP:
    """Callback kinds a `ModelPatcher` runs (ComfyUI's names and values)."""

    ON_CLONE = "on_clone"                  # patcher.clone(): callback(new_patcher)
    ON_LOAD = "on_load_after"              # patcher.load(...): callback(patcher, device, memory, force, full)
    ON_DETACH = "on_detach_after"
    ON_CLEANUP = "on_cleanup"              # end of a sampling run: callback(patcher)
    ON_PRE_RUN = "on_pre_run"              # start of a sampling run: callback(patcher)
    ON_PREPARE_STATE = "on_prepare_state"
    ON_APPLY_HOOKS = "on_apply_hooks"
    ON_REGISTER_ALL_HOOK_PATCHES = "on_register_all_hook_patches"
    ON_INJECT_MODEL = "on_inject_model"    # patcher.inject_model(): callback(patcher)
    ON_EJECT_MODEL = "on_eject_model"

    @classmethod
    def init_callbacks(cls) -> NestedLists:
        return {}


class WrappersMP:
    """Wrapper kinds and where our runtime runs them.

    OUTER_SAMPLE, SAMPLER_SAMPLE, PREDICT_NOISE: comfy_core/sampling/guider.py (`CFGGuider.sample`,
    around the sampler object's `sample`, `CFGGuider.__call__`); CALC_COND_BATCH:
    comfy_core/sampling/cfg.py (`sampling_function`); APPLY_MODEL and DIFFUSION_MODEL:
    comfy_core/models/diffusion.py (`DiffusionModel.apply_model`, around the UNet call);
    PREPARE_SAMPLING (ComfyUI's memory-planning step, `prepare_sampling(model, noise_shape,
    conds, model_options=...)`): no call site yet; our guider patches and places the model in
    `ModelPatcher.applied()`.
    """

    OUTER_SAMPLE = "outer_sample"
    PREPARE_SAMPLING = "prepare_sampling"
    SAMPLER_SAMPLE = "sampler_sample"
    PREDICT_NOISE = "predict_noise"
    CALC_COND_BATCH = "calc_cond_batch"
    APPLY_MODEL = "apply_model"
    DIFFUSION_MODEL = "diffusion_model"

    @classmethod
    def init_wrappers(cls) -> NestedLists:
        return {}


def _options(options: dict, is_model_options: bool, create: bool) -> dict:
    """`options` itself, or its `transformer_options` when given a whole `model_options`."""
    if not is_model_options:
        return options
    return options.setdefault("transformer_options", {}) if create else options.get("transformer_options", {})


def _add(section: str, kind: str, key: Any, fn: Callable, options: dict, is_model_options: bool) -> None:
    container = _options(options, is_model_options, True).setdefault(section, {})
    container.setdefault(kind, {}).setdefault(key, []).append(fn)


def _with_key(section: str, kind: str, key: Any, options: dict, is_model_options: bool) -> list[Callable]:
    return list(_options(options, is_model_options, False).get(section, {}).get(kind, {}).get(key, []))


def _all(section: str, kind: str, options: dict, is_model_options: bool) -> list[Callable]:
    out: list[Callable] = []
    for fns in _options(options, is_model_options, False).get(section, {}).get(kind, {}).values():
        out.extend(fns)
    return out


def add_callback(call_type: str, callback: Callable, transformer_options: dict, is_model_options: bool = False) -> None:
    add_callback_with_key(call_type, None, callback, transformer_options, is_model_options)


def add_callback_with_key(call_type: str, key: Any, callback: Callable, transformer_options: dict,
                          is_model_options: bool = False) -> None:
    _add("callbacks", call_type, key, callback, transformer_options, is_model_options)


def get_callbacks_with_key(call_type: str, key: Any, transformer_options: dict,
                           is_model_options: bool = False) -> list[Callable]:
    return _with_key("callbacks", call_type, key, transformer_options, is_model_options)


def get_all_callbacks(call_type: str, transformer_options: dict, is_model_options: bool = False) -> list[Callable]:
    return _all("callbacks", call_type, transformer_options, is_model_options)


def add_wrapper(wrapper_type: str, wrapper: Callable, transformer_options: dict, is_model_options: bool = False) -> None:
    add_wrapper_with_key(wrapper_type, None, wrapper, transformer_options, is_model_options)


def add_wrapper_with_key(wrapper_type: str, key: Any, wrapper: Callable, transformer_options: dict,
                         is_model_options: bool = False) -> None:
    _add("wrappers", wrapper_type, key, wrapper, transformer_options, is_model_options)


def get_wrappers_with_key(wrapper_type: str, key: Any, transformer_options: dict,
                          is_model_options: bool = False) -> list[Callable]:
    return _with_key("wrappers", wrapper_type, key, transformer_options, is_model_options)


def get_all_wrappers(wrapper_type: str, transformer_options: dict, is_model_options: bool = False) -> list[Callable]:
    return _all("wrappers", wrapper_type, transformer_options, is_model_options)


# The chains whose wrapped function is running now, innermost last: (class_obj, wrappers) pairs.
_RUNNING: contextvars.ContextVar[tuple[tuple[Any, tuple[Callable, ...]], ...]] = \
    contextvars.ContextVar("running_wrapper_chains", default=())


def _already_around(class_obj: Any, wrappers: list[Callable]) -> bool:
    """The same wrappers already surround this call: a chain of them around `class_obj` is running
    its wrapped function, inside which this one starts."""
    return class_obj is not None and any(obj is class_obj and list(chain) == wrappers
                                         for obj, chain in _RUNNING.get())


class WrapperExecutor:
    """One position in a chain of wrappers around `original` (ComfyUI's `WrapperExecutor`).

    `executor(*args, **kwargs)` (what a wrapper calls) runs the next wrapper or, past the last,
    `original`; `execute(...)` starts the chain at this position.

    Each wrapper runs once around a call, as in ComfyUI, where a point's wrappers are run in one
    place: ComfyUI runs the DIFFUSION_MODEL wrappers inside the network's `forward`, our
    `DiffusionModel` around its call, so a pack's replacement `forward` that runs them itself
    around `_forward` (ComfyUI-NAG's `NAGUNetModel.forward`) would run them a second time inside
    ours. A chain started (at its first position) while the same wrappers around the same object
    are running their wrapped function calls its own function directly: those wrappers already
    surround it (chains with no `class_obj` are never taken for one another).
    """

    def __init__(self, original: Callable, class_obj: Any, wrappers: list[Callable], idx: int) -> None:
        self.original = original
        self.class_obj = class_obj
        self.wrappers = list(wrappers)
        self.idx = idx
        self.is_last = idx == len(self.wrappers)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._next().execute(*args, **kwargs)

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        if self.idx == 0 and self.wrappers and _already_around(self.class_obj, self.wrappers):
            return self.original(*args, **kwargs)
        if self.is_last:
            if not self.wrappers:
                return self.original(*args, **kwargs)
            token = _RUNNING.set(_RUNNING.get() + ((self.class_obj, tuple(self.wrappers)),))
            try:
                return self.original(*args, **kwargs)
            finally:
                _RUNNING.reset(token)
        return self.wrappers[self.idx](self, *args, **kwargs)

    def _next(self) -> "WrapperExecutor":
        if self.idx + 1 > len(self.wrappers):
            raise RuntimeError("WrapperExecutor: the wrapped function was already called by the last wrapper")
        return type(self)(self.original, self.class_obj, self.wrappers, self.idx + 1)

    @classmethod
    def new_executor(cls, original: Callable, wrappers: list[Callable], idx: int = 0) -> "WrapperExecutor":
        return cls(original, None, wrappers, idx)

    @classmethod
    def new_class_executor(cls, original: Callable, class_obj: Any, wrappers: list[Callable],
                           idx: int = 0) -> "WrapperExecutor":
        return cls(original, class_obj, wrappers, idx)


def run_wrapped(wrapper_type: str, options: dict | None, original: Callable, *args: Any,
                class_obj: Any = None, is_model_options: bool = True, **kwargs: Any) -> Any:
    """Call `original(*args, **kwargs)` through the wrappers of `wrapper_type` found in `options`
    (a `model_options`, or a `transformer_options` with `is_model_options=False`); with none, a
    plain call. The one helper our call sites use."""
    wrappers = get_all_wrappers(wrapper_type, options or {}, is_model_options)
    if not wrappers:
        return original(*args, **kwargs)
    return WrapperExecutor.new_class_executor(original, class_obj, wrappers).execute(*args, **kwargs)


BLOCK_SPLIT = "block_split"  # transformer_options key of the first-block hook (ours; ComfyUI has none)


def run_split_blocks(options: dict | None, first: Callable[[dict], dict], rest: Callable[[dict], dict],
                     streams: dict) -> dict:
    """A DiT's block stack run as two parts, the point where a first-block cache hooks in.

    `streams` holds the token tensors the blocks carry (`"img"` the image tokens, `"txt"` the text
    tokens when the family carries them through its blocks); `first(streams)` runs the first block
    and returns the streams after it; `rest(streams)` runs every other block (and whatever the
    family does between its stacks) and returns the streams it ends with (at least `"img"`).
    Without a hook this is `rest(first(streams))`; with a callable under
    `options[BLOCK_SPLIT]` (a model patch, e.g. comfy_core/model_patches/first_block_cache.py) the
    hook runs `hook(first, rest, streams, options)` and may return the streams without calling
    `rest` (a cached residual added to the first block's output). The families' block loops call
    this; it names no family."""
    hook = (options or {}).get(BLOCK_SPLIT)
    if hook is None:
        return rest(first(streams))
    return hook(first, rest, streams, options)


class PatcherInjection:
    """A pair of functions a pack uses to modify the model for a run and undo it
    (`ModelPatcher.set_injections`; run by `inject_model` / `eject_model`)."""

    def __init__(self, inject: Callable, eject: Callable) -> None:
        self.inject = inject
        self.eject = eject


def copy_nested_dicts(input_dict: dict) -> dict:
    """Copy of `input_dict` with nested dicts copied recursively and lists copied (one level)."""
    out = dict(input_dict)
    for key, value in input_dict.items():
        if isinstance(value, dict):
            out[key] = copy_nested_dicts(value)
        elif isinstance(value, list):
            out[key] = list(value)
    return out


def merge_nested_dicts(dict1: dict, dict2: dict, copy_dict1: bool = True) -> dict:
    """`dict1` (copied unless `copy_dict1=False`) with `dict2` merged in: dicts recursively, lists
    extended, other values replaced. As ComfyUI, a nested dict of `dict2` is merged with `dict2`'s
    entries first (its lists keep their order before `dict1`'s)."""
    merged = copy_nested_dicts(dict1) if copy_dict1 else dict1
    for key, value in dict2.items():
        if isinstance(value, dict):
            merged[key] = merge_nested_dicts(value, merged.setdefault(key, {}))
        elif isinstance(value, list):
            merged.setdefault(key, []).extend(value)
        else:
            merged[key] = value
    return merged

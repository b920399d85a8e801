"""ComfyUI's replaceable sampling names, as changes of the active session's extension points.

Packs change sampling by mutating `comfy.samplers` (`SAMPLER_NAMES.append`, `KSampler.SAMPLERS.
insert`, `SCHEDULER_NAMES.append`, `SCHEDULER_HANDLERS[name] = SchedulerHandler(fn)`,
`KSampler.sample = f`) and `comfy.k_diffusion.sampling` (`sample_<name> = fn`). Here each of those
reads and writes the session's `ExtensionPoints` (comfy_core/extension_points.py), which the
runtime reads; no comfy_core module attribute changes:

- the name lists are the session's own live lists (a copy of ComfyUI's, made on first read), so
  `KSampler.SAMPLERS is SAMPLER_NAMES`, and the built-in nodes' combos, rendered while the session
  is active, offer what packs added;
- `SCHEDULER_HANDLERS` reads as ours chained under the session's additions, where writes go;
- `sample_<name>` on `comfy.k_diffusion.sampling` is the session's `samplers[name]` or ours;
- `comfy.samplers.KSampler` is a face over comfy_core's `KSampler` whose class attributes
  `SAMPLERS`, `SCHEDULERS` and `sample` are the session's.
The plain replaceable functions (`sampling_function`, `cfg_function`, `calc_cond_batch`, `sample`,
`default_noise_sampler`, `comfy.sample.sample`) are `point(...)` entries of the facade tables;
`get_area_and_mult` (smZNodes', TiledDiffusion's replacement) is the session's here (`_POINTS`).
Torch-free: packs read the names when they load, before torch is.
"""
from __future__ import annotations

import collections
from typing import Any, MutableMapping

from comfy_core import extension_points
from comfy_core.sampling import ksampler as _ksampler
from comfy_core.sampling.samplers import registry as _registry
from comfy_core.sampling.samplers.registry import KSAMPLER_NAMES, SAMPLER_NAMES
from comfy_core.sampling.scheduler_names import SCHEDULER_NAMES
from compat.facade import FacadeModule, active_points

# surface name -> (ExtensionPoints field, ComfyUI's initial list)
LIVE_LISTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "SAMPLER_NAMES": ("sampler_names", SAMPLER_NAMES),
    "KSAMPLER_NAMES": ("ksampler_names", KSAMPLER_NAMES),
    "SCHEDULER_NAMES": ("scheduler_names", SCHEDULER_NAMES),
}
_CLASS_LISTS = {"SAMPLERS": "SAMPLER_NAMES", "SCHEDULERS": "SCHEDULER_NAMES"}
# Replaceable functions whose built-in is the compat adapter of the same name in
# compat/samplers_api.py (ComfyUI's signature over ours), by ExtensionPoints field: read as the
# session's value or the adapter, assigned into the session, deleted back to the adapter.
_POINTS = {"get_area_and_mult": "get_area_and_mult"}


def live_list(surface_name: str) -> list[str]:
    """The session's live list for `surface_name` (one of `LIVE_LISTS`), made from ComfyUI's on
    first read. Outside a session (the built-in points in force) a fresh copy: nothing to keep it."""
    field, initial = LIVE_LISTS[surface_name]
    points = active_points()
    value = getattr(points, field)
    if value is None:
        value = list(initial)
        if points is not extension_points.BUILT_IN:
            setattr(points, field, value)
    return value


def set_live_list(surface_name: str, value: Any) -> None:
    """A pack assigning a whole list (`comfy.samplers.SAMPLER_NAMES = [...]`): the session's from now."""
    field, _ = LIVE_LISTS[surface_name]
    setattr(active_points(), field, value)


def scheduler_handlers() -> MutableMapping[str, Any]:
    """`SCHEDULER_HANDLERS` as packs see it: ours (read-only) under the session's additions,
    which take every write (`[name] = handler`, `pop(name)`)."""
    from comfy_core.sampling.schedulers import SCHEDULER_HANDLERS

    return collections.ChainMap(active_points().scheduler_handlers, SCHEDULER_HANDLERS)  # type: ignore[arg-type]


class SamplersModule(FacadeModule):
    """`comfy.samplers`: the facade, plus the live lists and `SCHEDULER_HANDLERS` of the session."""

    def __getattr__(self, name: str) -> Any:
        if name in LIVE_LISTS:
            return live_list(name)
        if name == "SCHEDULER_HANDLERS":
            return scheduler_handlers()
        if name in _POINTS:
            fn = getattr(active_points(), _POINTS[name])
            if fn is not None:
                return fn
            from compat import samplers_api

            return getattr(samplers_api, name)
        return super().__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in LIVE_LISTS:
            set_live_list(name, value)
            return
        if name == "SCHEDULER_HANDLERS":
            additions = active_points().scheduler_handlers
            additions.clear()
            additions.update(value)
            return
        if name in _POINTS:
            setattr(active_points(), _POINTS[name], value)
            return
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if name in _POINTS and name not in self.__dict__:
            setattr(active_points(), _POINTS[name], None)  # ours again
            return
        super().__delattr__(name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(LIVE_LISTS) | {"SCHEDULER_HANDLERS"} | set(_POINTS))


class KDiffusionSamplingModule(FacadeModule):
    """`comfy.k_diffusion.sampling`: ComfyUI finds a sampler name's function as
    `getattr(comfy.k_diffusion.sampling, "sample_" + name)`, so packs add samplers by assigning a
    new `sample_<name>` (smZNodes' `dpmpp_2m_alt`) and wrap ours by replacing one. Every `sample_*`
    name reads the session's `samplers[name]`, else ours; assigning or deleting one changes only
    the session's table."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("sample_"):
            key = name[len("sample_"):]
            fn = active_points().samplers.get(key)
            if fn is None:
                fn = _registry.built_in_kdiffusion_function(key)
            if fn is None:
                raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
            return fn
        return super().__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("sample_"):
            active_points().samplers[name[len("sample_"):]] = value
            return
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        # A pack removing the sampler it added (on unload) removes it from the session's table.
        if name.startswith("sample_"):
            if active_points().samplers.pop(name[len("sample_"):], None) is None:
                raise AttributeError(f"module {self.__name__!r}: {name!r} is not a pack's sampler")
            return
        super().__delattr__(name)

    def __dir__(self) -> list[str]:
        import importlib

        namespace = importlib.import_module("comfy_core.sampling.samplers.kdiffusion")
        ours = {n for n in dir(namespace) if n.startswith("sample_")}
        return sorted(set(super().__dir__()) | ours | {f"sample_{k}" for k in active_points().samplers})


class _KSamplerType(type):
    """The metaclass of the `comfy.samplers.KSampler` face: its `SAMPLERS` / `SCHEDULERS` are the
    session's live lists and its `sample` the session's `ksampler_sample` (or ours)."""

    def __getattribute__(cls, name: str) -> Any:
        if name in _CLASS_LISTS:
            return live_list(_CLASS_LISTS[name])
        if name == "sample" and cls is KSampler:
            fn = active_points().ksampler_sample
            return fn if fn is not None else _ksampler.KSampler.sample
        return super().__getattribute__(name)

    def __setattr__(cls, name: str, value: Any) -> None:
        if name in _CLASS_LISTS and cls is KSampler:
            set_live_list(_CLASS_LISTS[name], value)
            return
        if name == "sample" and cls is KSampler:
            active_points().ksampler_sample = value
            return
        super().__setattr__(name, value)


class KSampler(_ksampler.KSampler, metaclass=_KSamplerType):
    """ComfyUI's `comfy.samplers.KSampler`: comfy_core's, with the session's names and `sample`."""

    DISCARD_PENULTIMATE_SIGMA_SAMPLERS: set[str] = set(_ksampler.KSampler.DISCARD_PENULTIMATE_SIGMA_SAMPLERS)

    def sample(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """`KSampler.sample` as the session has it (a pack's replacement, given this instance)."""
        fn = active_points().ksampler_sample
        if fn is None:
            return _ksampler.KSampler.sample(self, *args, **kwargs)
        return fn(self, *args, **kwargs)

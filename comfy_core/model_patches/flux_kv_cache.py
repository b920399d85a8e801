"""Reference K/V cache for Flux-style edit models (ComfyUI's `FluxKVCache` node, comfy_extras/nodes_flux.py,
read for behaviour; written here afresh).

An edit run feeds the same reference latents to the network at every step. With the references
modulated at timestep 0 ("index_timestep_zero", the placement the Klein 9B KV model is trained
for), their keys and values change only through their attention to the changing image tokens, so
the cache keeps them from the run's first call and reuses them afterwards:

- the first call for a set of conditionings (the `uuids` of the cond batch) runs the whole
  sequence `[text, image, references]` and each attention keeps the last `reference tokens` of its
  rotated keys and values (per block kind and index);
- the later calls of the run leave the reference tokens out of the sequence; each attention runs
  its text and image queries against its keys plus the kept reference keys and values. The
  reference tokens are not run at all, which is where the time goes.

A batch of another size or another number of reference tokens fills its entry anew. As in
ComfyUI the model's default reference method becomes "index_timestep_zero" (an object patch of
`diffusion_model.default_ref_method`; a conditioning that names a method keeps it).

State: the MODEL carries a *template* (no state) under the network's `reference_kv_key` in
`transformer_options`; the `outer_sample` wrapper gives each sampling run a live copy and drops it
at the end, so nothing is kept between runs and the input MODEL is never touched (the node installs
on a clone). The network side (where the slot is asked for and used) is the family's
(comfy_core/families/flux2/dit.py, `_joint_attention`).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Hashable

import torch

from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.wrappers import WrappersMP, copy_nested_dicts

log = logging.getLogger(__name__)

WRAPPER_KEY = "flux_kv_cache"
TIMESTEP_ZERO_METHOD = "index_timestep_zero"


class FluxKVCacheError(ModelPatchError):
    """A model the reference K/V cache cannot be installed on, or a call it cannot serve."""


class _Entry:
    """What the first call for one set of conditionings kept: `(kind, index) -> (k, v)` `[B, H, R, d]`."""

    __slots__ = ("batch", "ref_tokens", "kv")

    def __init__(self, batch: int, ref_tokens: int) -> None:
        self.batch = batch
        self.ref_tokens = ref_tokens
        self.kv: dict[tuple[Any, Any], tuple[torch.Tensor, torch.Tensor]] = {}


class KVSlot:
    """One network call's use of an entry: `filling` (keep the references' K/V) or reading them."""

    __slots__ = ("entry", "filling")

    def __init__(self, entry: _Entry, filling: bool) -> None:
        self.entry = entry
        self.filling = filling

    def keys_for(self, kind: Any, index: Any, k: torch.Tensor, v: torch.Tensor,
                 mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The keys, values and mask one attention runs with (k/v `[B, H, L, d]`, rotated): filling
        keeps their last `ref_tokens` and returns them as they are; reading appends the kept ones
        (and widens a mask with "attend" columns for them)."""
        n = self.entry.ref_tokens
        if self.filling:
            if k.shape[2] < n:
                raise FluxKVCacheError(f"FluxKVCache: block {kind} {index} attends over {k.shape[2]} tokens, fewer "
                                       f"than the {n} reference tokens")
            self.entry.kv[(kind, index)] = (k[:, :, -n:].detach().clone(), v[:, :, -n:].detach().clone())
            return k, v, mask
        kept = self.entry.kv.get((kind, index))
        if kept is None:
            raise FluxKVCacheError(f"FluxKVCache: block {kind} {index} kept no reference keys on the run's first "
                                   "call (a block replacement skipped it?)")
        kk, vv = kept
        if mask is not None:
            extra = torch.ones if mask.dtype == torch.bool else torch.zeros
            mask = torch.cat((mask, extra((*mask.shape[:-1], n), dtype=mask.dtype, device=mask.device)), dim=-1)
        return torch.cat((k, kk.to(k)), dim=2), torch.cat((v, vv.to(v)), dim=2), mask


class ReferenceKVCache:
    """The cache's holder: a template (settings only, no state) or a run's live copy.

    Counters for tests, benches and logs: `filling_calls`, `cached_calls`."""

    name = "FluxKVCache"

    def __init__(self) -> None:
        self.live = False
        self.reset()

    def clone_for_run(self) -> "ReferenceKVCache":
        run = type(self)()
        run.live = True
        return run

    def cache_signature(self) -> Hashable:
        """Settings only (comfy_core/patching/signature.py): a template carries no state."""
        return (self.name,)

    def reset(self) -> None:
        self.entries: dict[Hashable, _Entry] = {}
        self.filling_calls = 0
        self.cached_calls = 0

    def slot_for(self, options: dict, batch: int, ref_tokens: int) -> KVSlot | None:
        """The slot of one network call with `ref_tokens` reference tokens (None for a template:
        the network runs plainly)."""
        if not self.live:
            return None
        key = tuple(options.get("uuids") or ())
        entry = self.entries.get(key)
        if entry is not None and entry.batch == batch and entry.ref_tokens == ref_tokens and entry.kv:
            self.cached_calls += 1
            return KVSlot(entry, filling=False)
        entry = self.entries[key] = _Entry(batch, ref_tokens)
        self.filling_calls += 1
        return KVSlot(entry, filling=True)


def _template_key(model: Any) -> str:
    network = getattr(getattr(model, "model", None), "diffusion_model", None)
    key = getattr(network, "reference_kv_key", None)
    if not isinstance(key, str):
        raise FluxKVCacheError(f"FluxKVCache: the model's network ({type(network).__name__}) does not run a reference "
                               "K/V cache (Flux.2 models do)")
    return key


def flux_kv_sample_wrapper(executor: Callable, *args: Any, **kwargs: Any) -> Any:
    """`outer_sample` wrapper: the run gets a live copy of the MODEL's template in its own copy of the
    guider's model_options; dropped at the end."""
    guider = executor.class_obj
    original = guider.model_options
    key = _template_key(guider.model_patcher)
    run_options = copy_nested_dicts(original)
    template = run_options.get("transformer_options", {}).get(key)
    if not isinstance(template, ReferenceKVCache):
        raise FluxKVCacheError(f"FluxKVCache: the run's transformer_options hold no ReferenceKVCache under {key!r} "
                               f"(found {type(template).__name__})")
    holder = template.clone_for_run()
    run_options["transformer_options"][key] = holder
    guider.model_options = run_options
    try:
        return executor(*args, **kwargs)
    finally:
        log.info("%s - %d filling calls, %d cached calls", holder.name, holder.filling_calls, holder.cached_calls)
        holder.reset()
        guider.model_options = original


def apply_flux_kv_cache(model: Any) -> Any:
    """A clone of the MODEL patcher `model` with the reference K/V cache and the "index_timestep_zero"
    default reference method (the input is unchanged)."""
    key = _template_key(model)
    present = (model.model_options.get("transformer_options") or {}).get(key)
    if present is not None:
        raise FluxKVCacheError(f"FluxKVCache: the model already carries a reference K/V cache "
                               f"({type(present).__name__}) under transformer_options[{key!r}]")
    patched = model.clone()
    patched.model_options.setdefault("transformer_options", {})[key] = ReferenceKVCache()
    patched.add_wrapper_with_key(WrappersMP.OUTER_SAMPLE, WRAPPER_KEY, flux_kv_sample_wrapper)
    patched.add_object_patch("diffusion_model.default_ref_method", TIMESTEP_ZERO_METHOD)
    return patched

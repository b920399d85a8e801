"""Attaching hooks, masks and timestep ranges to CONDITIONING, and combining pairs of them.

After ComfyUI's comfy/hooks.py (`set_hooks_for_conditioning`, `set_mask_for_conditioning`,
`set_timesteps_for_conditioning`, `set_conds_props`, `set_conds_props_and_combine`,
`set_default_conds_and_combine`). Entries are new `[tensor, dict]` pairs with copied dicts; the
inputs are never changed. Hooks are appended: an entry that already carries a group gets a new
group of both (one per distinct pair of groups in one call, so entries that shared a group keep
sharing one, which keeps them in one forward pass when sampling).
"""
from __future__ import annotations

from typing import Sequence

import torch

from comfy_core.hooks.hook import HookGroup

Conditioning = list  # [[tensor, dict], ...]
TimestepsRange = tuple  # (start_percent, end_percent)


def _set_values(cond: Conditioning, values: dict) -> Conditioning:
    return [[t, {**d, **values}] for t, d in cond]


def set_hooks(cond: Conditioning, hooks: HookGroup | None, cache: dict | None = None) -> Conditioning:
    """Every entry with `hooks` added to the ones it carries (None: `cond` as it is)."""
    if hooks is None:
        return cond
    cache = {} if cache is None else cache
    out = []
    for t, d in cond:
        d = dict(d)
        existing = d.get("hooks")
        if existing is None:  # (ComfyUI fails on an explicit None; it means "no hooks" here)
            d["hooks"] = hooks
        else:
            pair = (id(existing), id(hooks))
            if pair not in cache:
                cache[pair] = (existing, hooks, existing.clone_and_combine(hooks))  # keeps both alive
            d["hooks"] = cache[pair][2]
        out.append([t, d])
    return out


def set_mask(cond: Conditioning, mask: torch.Tensor | None, set_cond_area: str, strength: float) -> Conditioning:
    """A mask on every entry, weighted by `strength` (`mask_strength`); "mask bounds" also
    restricts the entry to the mask's bounding box. Without a mask, `cond` as it is."""
    if mask is None:
        return cond
    if mask.ndim < 3:
        mask = mask.unsqueeze(0)
    return _set_values(cond, {"mask": mask, "set_area_to_bounds": set_cond_area != "default",
                              "mask_strength": strength})


def set_timesteps(cond: Conditioning, timesteps: TimestepsRange | None) -> Conditioning:
    if timesteps is None:
        return cond
    return _set_values(cond, {"start_percent": timesteps[0], "end_percent": timesteps[1]})


def _props(cond: Conditioning, strength: float, set_cond_area: str, mask: torch.Tensor | None,
           hooks: HookGroup | None, timesteps: TimestepsRange | None, cache: dict) -> Conditioning:
    cond = set_hooks(cond, hooks, cache)
    cond = set_mask(cond, mask, set_cond_area, strength)
    return set_timesteps(cond, timesteps)


def set_conds_props(conds: Sequence[Conditioning], strength: float, set_cond_area: str,
                    mask: torch.Tensor | None = None, hooks: HookGroup | None = None,
                    timesteps: TimestepsRange | None = None) -> list[Conditioning]:
    """Hooks, then mask, then timestep range on each conditioning of `conds`."""
    cache: dict = {}
    return [_props(c, strength, set_cond_area, mask, hooks, timesteps, cache) for c in conds]


def set_conds_props_and_combine(conds: Sequence[Conditioning], new_conds: Sequence[Conditioning],
                                strength: float = 1.0, set_cond_area: str = "default",
                                mask: torch.Tensor | None = None, hooks: HookGroup | None = None,
                                timesteps: TimestepsRange | None = None) -> list[Conditioning]:
    """Each of `new_conds` with the properties set, appended to the matching one of `conds`."""
    cache: dict = {}
    return [list(c) + _props(n, strength, set_cond_area, mask, hooks, timesteps, cache)
            for c, n in zip(conds, new_conds)]


def set_default_conds_and_combine(conds: Sequence[Conditioning], new_conds: Sequence[Conditioning],
                                  hooks: HookGroup | None = None,
                                  timesteps: TimestepsRange | None = None) -> list[Conditioning]:
    """Each of `new_conds` marked `default` (the sampler uses it where nothing else of its list
    covers the latent), with hooks, appended to the matching one of `conds`."""
    cache: dict = {}
    out = []
    for c, n in zip(conds, new_conds):
        n = set_hooks(n, hooks, cache)
        n = _set_values(n, {"default": True})
        out.append(list(c) + set_timesteps(n, timesteps))
    return out


def timesteps_ranges(start_percent: float, end_percent: float) -> tuple[TimestepsRange, TimestepsRange, TimestepsRange]:
    """The range, the part before it and the part after it."""
    return (start_percent, end_percent), (0.0, start_percent), (end_percent, 1.0)

"""Merging one patcher's weights into a clone of another, and the strengths of each merge kind.

ComfyUI's merge nodes (comfy_extras/nodes_model_merging.py, 0.3.64) all do the same thing with
different strengths: for each weight `k` of model2, `model1_clone.add_patches({k: model2's k},
strength_patch, strength_model)`, i.e.

    simple / blocks (ratio r):   w = r · w1 + (1 - r) · w2
    subtract (multiplier m):     w = m · w1 - m · w2
    add:                         w = w1 + w2

where w2 carries model2's own patches (its LoRAs, an earlier merge). A strength function maps a
weight's name to `(strength_patch, strength_model)`. Weights model1 lacks are skipped (add_patches'
rule); weights of another shape get the patch but stay unmerged (scaled by strength_model only),
as in ComfyUI; both are logged once, here.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from comfy_core.patching.patcher import Patcher

log = logging.getLogger(__name__)

UNET_PREFIX = "diffusion_model."
# ComfyUI's CLIP merges leave these alone: an index buffer and CLIP's contrastive temperature.
CLIP_SKIPPED_SUFFIXES = (".position_ids", ".logit_scale")

Strengths = Callable[[str], "tuple[float, float]"]


@dataclass
class MergeReport:
    """What `merge_into` did: keys patched, keys the target lacks, keys of another shape."""

    merged: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)


def simple_strengths(ratio: float) -> Strengths:
    """ModelMergeSimple / CLIPMergeSimple: `ratio · w1 + (1 - ratio) · w2`."""
    return lambda _key: (1.0 - ratio, ratio)


def subtract_strengths(multiplier: float) -> Strengths:
    """ModelMergeSubtract / CLIPMergeSubtract: `multiplier · (w1 - w2)`."""
    return lambda _key: (-multiplier, multiplier)


def add_strengths() -> Strengths:
    """ModelMergeAdd / CLIPMergeAdd: `w1 + w2`."""
    return lambda _key: (1.0, 1.0)


def block_ratio(name: str, ratios: Sequence[tuple[str, float]]) -> float:
    """ModelMergeBlocks' ratio for weight `name` (relative to the UNet): the ratio of the longest
    block prefix `name` starts with (the first of equal length), else the first ratio given."""
    if not ratios:
        raise ValueError("block_ratio: no block ratios given")
    ratio, longest = ratios[0][1], 0
    for prefix, value in ratios:
        if name.startswith(prefix) and len(prefix) > longest:
            ratio, longest = value, len(prefix)
    return ratio


def block_strengths(ratios: Sequence[tuple[str, float]], prefix: str = UNET_PREFIX) -> Strengths:
    """ModelMergeBlocks and the per-architecture ModelMerge* nodes: a simple merge whose ratio
    is chosen per weight by `block_ratio` on the name without `prefix`."""
    ratios = tuple(ratios)

    def strengths(key: str) -> tuple[float, float]:
        ratio = block_ratio(key[len(prefix):] if key.startswith(prefix) else key, ratios)
        return 1.0 - ratio, ratio
    return strengths


def merge_into(target: Patcher, source: Patcher, strengths: Strengths, *, prefix: str | None = None,
               skip_suffixes: Iterable[str] = ()) -> MergeReport:
    """Patch `target` (a clone: it is changed) with every weight of `source` under `prefix`.

    Each patch is a lazy `ModelWeight` (source's base module, the key, source's patch chain):
    nothing is read or copied now. `source` is not changed.
    """
    skip = tuple(skip_suffixes)
    report = MergeReport()
    target_shapes = {k: tuple(t.shape) for k, t in target.model_state_dict(prefix).items()}
    # One add_patches call per strength pair: each call lists the target's weights once, so a
    # call per key made merging quadratic in the number of weights (2 500 for SDXL's UNet).
    by_strengths: dict[tuple[float, float], dict[str, Any]] = {}
    for key, weight in source.weight_references(prefix).items():
        if skip and key.endswith(skip):
            continue
        if key not in target_shapes:
            report.missing.append(key)
            continue
        if target_shapes[key] != weight.shape:
            report.mismatched.append(key)
        by_strengths.setdefault(tuple(strengths(key)), {})[key] = weight
        report.merged.append(key)
    for (strength_patch, strength_model), patches in by_strengths.items():
        target.add_patches(patches, strength_patch, strength_model)
    _log(report)
    return report


def _log(report: MergeReport) -> None:
    if report.mismatched:
        log.warning("model merge: %d weights have another shape in the second model and are not merged "
                    "(only scaled), e.g. %s", len(report.mismatched), ", ".join(report.mismatched[:3]))
    if report.missing:
        log.warning("model merge: %d weights of the second model have no counterpart in the first and are "
                    "skipped, e.g. %s", len(report.missing), ", ".join(report.missing[:3]))

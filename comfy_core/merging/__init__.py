"""Model merging as weight patches: one model's weights, lazily, as patches on a clone of another.

    merged = model1.clone()
    report = merge_into(merged, model2, simple_strengths(0.4), prefix=UNET_PREFIX)

After ComfyUI's comfy_extras/nodes_model_merging.py: every weight `k` of model2 (under a prefix)
becomes the patch `(strength_patch, model2's k with model2's patches, strength_model)` on model1's
clone, so `w = strength_model · w1 + strength_patch · w2`, computed when the model is applied.
"""
from __future__ import annotations

from comfy_core.merging.merge import (
    CLIP_SKIPPED_SUFFIXES,
    UNET_PREFIX,
    MergeReport,
    add_strengths,
    block_ratio,
    block_strengths,
    merge_into,
    simple_strengths,
    subtract_strengths,
)

__all__ = [
    "CLIP_SKIPPED_SUFFIXES", "MergeReport", "UNET_PREFIX", "add_strengths", "block_ratio", "block_strengths",
    "merge_into", "simple_strengths", "subtract_strengths",
]

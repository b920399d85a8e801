"""Attention multipliers: the q/k/v/out projection weights (and biases) of chosen attention
layers multiplied by constants, as weight patches (ComfyUI's
comfy_extras/nodes_attention_multiply.py).

A patch entry with strength_model `m` and no delta makes the patched weight `w * m`; entries
stack by multiplication, as ComfyUI's `add_patches({key: (None,)}, 0.0, m)`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import torch

from comfy_core.weights.entries import Function

# UNet attention (attn1 self, attn2 cross) and CLIP self-attention projection names.
UNET_PROJECTIONS = {"q": "to_q", "k": "to_k", "v": "to_v", "out": "to_out.0"}
CLIP_PROJECTIONS = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
                    "out": "self_attn.out_proj"}


@dataclass(frozen=True)
class NoDelta:
    """Weight patch data adding nothing: only the entry's strength_model acts."""

    def apply_to(self, weight: torch.Tensor, strength: float, function: Function) -> torch.Tensor:
        return weight

    def cache_signature(self) -> tuple:
        return ("NoDelta",)


def projection_factors(keys: Iterable[str], prefix: str, projections: Mapping[str, str],
                       factors: Mapping[str, float]) -> list[tuple[str, float]]:
    """`(key, factor)` for every `*{prefix}{projection}.weight|.bias` key, in key order;
    `prefix` is e.g. "attn1." (empty for CLIP's names)."""
    found = []
    for key in keys:
        for name, projection in projections.items():
            stem = f"{prefix}{projection}"
            if key.endswith(stem + ".weight") or key.endswith(stem + ".bias"):
                found.append((key, float(factors[name])))
    return found


def temporal_factors(keys: Iterable[str], self_structural: float, self_temporal: float,
                     cross_structural: float, cross_temporal: float) -> list[tuple[str, float]]:
    """`(key, factor)` for the attention output projections, temporal (`.time_stack.`) or not."""
    found = []
    for key in keys:
        temporal = ".time_stack." in key
        if key.endswith("attn1.to_out.0.bias") or key.endswith("attn1.to_out.0.weight"):
            found.append((key, self_temporal if temporal else self_structural))
        elif key.endswith("attn2.to_out.0.bias") or key.endswith("attn2.to_out.0.weight"):
            found.append((key, cross_temporal if temporal else cross_structural))
    return found


def add_multipliers(patcher, factors: list[tuple[str, float]]) -> None:  # noqa: ANN001
    """Record each `(key, factor)` on `patcher` as a no-delta patch of strength_model `factor`."""
    for key, factor in factors:
        patcher.add_patches({key: NoDelta()}, 0.0, factor)

"""Shared helpers of the model-patch node tests: one short KSampler run on the tiny SD1 model."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from graph.context import NodeContext, reset_current, set_current

MY_NODES = ("FreeU", "FreeU_V2", "PerturbedAttentionGuidance", "SelfAttentionGuidance", "PerpNeg",
            "UNetSelfAttentionMultiply", "UNetCrossAttentionMultiply", "CLIPAttentionMultiply",
            "UNetTemporalAttentionMultiply", "TomePatchModel", "HyperTile", "PatchModelAddDownscale",
            "DifferentialDiffusion", "FreSca", "HypernetworkLoader", "ModelComputeDtype")


def sample(model: Any, sd1: Any, *, steps: int = 2, size: int = 16, cfg: float = 7.0, latent: dict | None = None,
           positive: Any = None, env: Any = None) -> torch.Tensor:
    """KSampler (euler, simple, seed 3, denoise 1) on a zero latent; the sampled latent."""
    from nodes.sampling import ksampler

    token = set_current(NodeContext("p", "1", "1", None, env or SimpleNamespace(preview_method="none")))
    try:
        latent = latent or {"samples": torch.zeros(1, 4, size, size)}
        return ksampler(model, 3, steps, cfg, "euler", "simple", positive or sd1.positive, sd1.negative,
                        latent, 1.0)[0]["samples"]
    finally:
        reset_current(token)


def snapshot(model: Any) -> tuple:
    """What a node must not change on its input MODEL (or CLIP patcher)."""
    return (repr(model.model_options), {k: list(v) for k, v in model.patches.items()}, dict(model.object_patches))

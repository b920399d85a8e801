"""Perturbed-Attention Guidance (Ahn et al. 2024, "Self-Rectifying Diffusion Sampling with
Perturbed-Attention Guidance", arXiv 2403.17377) as a `sampler_post_cfg_function`.

Behaviour of ComfyUI's comfy_extras/nodes_pag.py: the positive is run once more with the
middle block's self-attention map replaced by the identity (each token attends only to itself,
so the attention returns `v`), and the guided result moves away from that perturbed
prediction: `cfg + scale * (cond - perturbed)`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from comfy_core.model_patches.options import with_attention_replace
from comfy_core.sampling.cond_batch import calc_cond_batch_in_force


def identity_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, extra_options: dict,
                       mask: torch.Tensor | None = None) -> torch.Tensor:
    """An `attn1` replacement whose attention map is the identity: the output is `v`."""
    return v


@dataclass(frozen=True)
class PerturbedAttentionGuidance:
    """Post-CFG hook; at scale 0 the CFG result is returned as it is (no extra pass)."""

    scale: float
    block: tuple[str, int] = ("middle", 0)

    def __call__(self, args: dict) -> torch.Tensor:
        guided = args["denoised"]
        if self.scale == 0:
            return guided
        model = args["model"]
        options = with_attention_replace(args["model_options"], identity_attention, "attn1", *self.block)
        (perturbed,) = calc_cond_batch_in_force()(model.apply_model, [args["cond"]], args["input"], args["sigma"], options)
        return guided + (args["cond_denoised"] - perturbed) * self.scale

    def cache_signature(self) -> tuple:
        return ("PerturbedAttentionGuidance", self.scale, self.block)

"""Perp-Neg guidance (Armandpour et al. 2023, "Re-imagine the Negative Prompt Algorithm: Transform
2D Diffusion into 3D, alleviate Janus problem and Beyond", arXiv 2304.04968), as a GUIDER.

After ComfyUI's comfy_extras/nodes_perpneg.py (`perp_neg`, `Guider_PerpNeg`): the negative
direction's component perpendicular to the positive one is subtracted,
`empty + cfg * (pos - neg_scale * perp)` with `pos = D_pos - D_empty`, `neg = D_neg - D_empty`,
`perp = neg - (<neg, pos> / |pos|^2) pos` (one dot product over the whole batch, as ComfyUI).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from comfy_core.sampling.cond_batch import calc_cond_batch_in_force
from comfy_core.sampling.guider import CFGGuider


def perp_neg(noise_pred_pos: torch.Tensor, noise_pred_neg: torch.Tensor, noise_pred_nocond: torch.Tensor,
             neg_scale: float, cond_scale: float) -> torch.Tensor:
    """The Perp-Neg combination of three predictions (see the module docstring)."""
    pos = noise_pred_pos - noise_pred_nocond
    neg = noise_pred_neg - noise_pred_nocond
    perp = neg - (torch.mul(neg, pos).sum() / (torch.norm(pos) ** 2)) * pos
    return noise_pred_nocond + cond_scale * (pos - perp * neg_scale)


class PerpNegGuider(CFGGuider):
    """Positive, negative and an empty conditioning (encoded as a negative prompt).

    At neg_scale == 0 the negative pass is skipped (and the empty one too at cfg == 1) unless
    `disable_cfg1_optimization`; pre- and post-CFG hooks run as in ComfyUI's guider (the post
    hooks also get `empty_cond` and `empty_cond_denoised`).
    """

    def set_conds(self, positive: Any, negative: Any, empty_negative_prompt: Any) -> None:  # type: ignore[override]
        empty = [[c[0], {**c[1], "prompt_type": "negative"}] for c in empty_negative_prompt]
        self.inner_set_conds({"positive": positive, "empty_negative_prompt": empty, "negative": negative})

    def set_cfg(self, cfg: float, neg_scale: float) -> None:  # type: ignore[override]
        self.cfg = cfg
        self.neg_scale = neg_scale

    def predict_noise(self, x: torch.Tensor, timestep: torch.Tensor, model_options: dict,
                      seed: int | None = None) -> torch.Tensor:
        positive = self.conds.get("positive")
        negative = self.conds.get("negative")
        empty = self.conds.get("empty_negative_prompt")
        if not model_options.get("disable_cfg1_optimization", False) and math.isclose(self.neg_scale, 0.0):
            negative = None
            if math.isclose(self.cfg, 1.0):
                empty = None
        conds = [positive, negative, empty]
        model = self.inner_model
        # ComfyUI's guider calls `comfy.samplers.calc_cond_batch`: the host's replacement, if any.
        out = calc_cond_batch_in_force()(model, conds, x, timestep, model_options)
        for fn in model_options.get("sampler_pre_cfg_function", []):
            out = fn({"conds": conds, "conds_out": out, "cond_scale": self.cfg, "timestep": timestep, "input": x,
                      "sigma": timestep, "model": model, "model_options": model_options})
        pred_pos, pred_neg, pred_empty = out
        result = perp_neg(pred_pos, pred_neg, pred_empty, self.neg_scale, self.cfg)
        for fn in model_options.get("sampler_post_cfg_function", []):
            result = fn({"denoised": result, "cond": positive, "uncond": negative, "cond_scale": self.cfg,
                         "model": model, "uncond_denoised": pred_neg, "cond_denoised": pred_pos, "sigma": timestep,
                         "model_options": model_options, "input": x, "empty_cond": empty,
                         "empty_cond_denoised": pred_empty})
        return result

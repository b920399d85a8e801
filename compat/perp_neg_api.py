"""ComfyUI's `comfy_extras.nodes_perpneg` helpers, over comfy_core.sampling.perp_neg.

- `perp_neg(x, noise_pred_pos, noise_pred_neg, noise_pred_nocond, neg_scale, cond_scale)`:
  ComfyUI's parameter list (its `x` is not used by the combination);
- `Guider_PerpNeg`: the Perp-Neg GUIDER class packs subclass (Inspire-Pack's
  `Guider_PerpNegAG(comfy_extras.nodes_perpneg.Guider_PerpNeg)`), our `PerpNegGuider` with
  ComfyUI's `predict_noise(x, timestep, model_options={}, seed=None)` defaults.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.sampling import perp_neg as _core


def perp_neg(x: torch.Tensor, noise_pred_pos: torch.Tensor, noise_pred_neg: torch.Tensor,
             noise_pred_nocond: torch.Tensor, neg_scale: float, cond_scale: float) -> torch.Tensor:
    """The Perp-Neg combination of three predictions (comfy_core.sampling.perp_neg.perp_neg)."""
    return _core.perp_neg(noise_pred_pos, noise_pred_neg, noise_pred_nocond, neg_scale, cond_scale)


class Guider_PerpNeg(_core.PerpNegGuider):  # noqa: N801 - ComfyUI's name
    """Positive, negative and an empty conditioning, combined by Perp-Neg (`set_conds(positive,
    negative, empty_negative_prompt)`, `set_cfg(cfg, neg_scale)`)."""

    def predict_noise(self, x: torch.Tensor, timestep: torch.Tensor, model_options: dict | None = None,
                      seed: int | None = None) -> Any:
        return super().predict_noise(x, timestep, {} if model_options is None else model_options, seed)

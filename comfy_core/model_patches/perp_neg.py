"""The old PerpNeg model patch (ComfyUI's comfy_extras/nodes_perpneg.py `PerpNeg`, deprecated
there in favour of the PerpNegGuider): Perp-Neg guidance (Armandpour et al. 2023, arXiv
2304.04968) as a `sampler_cfg_function`. The empty conditioning is run through the model at each
step (one extra pass) and combined with the positive and negative predictions by
`comfy_core.sampling.perp_neg.perp_neg`, the maths the PerpNegGuider uses.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.sampling.cond_batch import calc_cond_batch_in_force
from comfy_core.sampling.conditioning import convert_cond, encode_model_conds
from comfy_core.sampling.perp_neg import perp_neg


class PerpNegCFG:
    """`sampler_cfg_function(args) -> noise prediction` for Perp-Neg with `neg_scale`.

    Holds the empty CONDITIONING as sampler entries; immutable, so clones share it.
    """

    def __init__(self, empty_conditioning: Any, neg_scale: float) -> None:
        self.entries = convert_cond(empty_conditioning, "empty_conditioning")
        self.neg_scale = float(neg_scale)

    def __deepcopy__(self, memo: dict) -> "PerpNegCFG":
        return self

    def __call__(self, args: dict) -> torch.Tensor:
        model = args["model"]
        x = args["input"]
        # As ComfyUI: the entries get their model conds only (no area or timestep-range preparation).
        entries = [encode_model_conds(e, x, getattr(model, "encode_adm", None), "negative",
                                      extra_inputs=getattr(model, "extra_inputs", None)) for e in self.entries]
        (nocond,) = calc_cond_batch_in_force()(model.apply_model, [entries], x, args["sigma"], args["model_options"])
        guided = perp_neg(args["cond_denoised"], args["uncond_denoised"], nocond, self.neg_scale, args["cond_scale"])
        return x - guided

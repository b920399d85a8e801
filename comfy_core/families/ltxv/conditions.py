"""What the LTX-Video DiT receives besides the noisy latent and the T5 context: ComfyUI's
`comfy/model_base.py` `LTXV.extra_conds`, from the conditioning keys its LTXV nodes set; written here.

- `attention_mask` (the T5 token mask) as it is; `frame_rate` (LTXVConditioning; default 25);
- `denoise_mask`: `concat_mask` if given, else the sampler's denoise mask (the network turns it
  into per-token timesteps); `keyframe_idxs` (LTXVAddGuide's guide-token positions) and
  `guide_attention_entries` as they are.
- The region a denoise mask keeps stays the clean latent at every step instead of being re-noised
  (ComfyUI's `LTXV.scale_latent_inpaint`).
"""
from __future__ import annotations

from typing import Any

from comfy_core.models.model_conditions import ModelConditions

DEFAULT_FRAME_RATE = 25


class LTXVConditions(ModelConditions):
    name = "ltxv"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if kwargs.get("attention_mask") is not None:
            out["attention_mask"] = kwargs["attention_mask"]
        out["frame_rate"] = kwargs.get("frame_rate", DEFAULT_FRAME_RATE)
        mask = kwargs.get("concat_mask", kwargs.get("denoise_mask"))
        if mask is not None:
            out["denoise_mask"] = mask
        for key in ("keyframe_idxs", "guide_attention_entries"):
            if kwargs.get(key) is not None:
                out[key] = kwargs[key]
        return out

    @property
    def scale_latent_inpaint(self) -> Any:
        return lambda model, sigma, noise, latent_image: latent_image

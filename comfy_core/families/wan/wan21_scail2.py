"""SCAIL-2 on Wan 2.1 (`wan2.1_14B_SCAIL_2_*`): ComfyUI's `supported_models.WAN21_SCAIL2`
(model_base.WAN21_SCAIL2, not image_to_video; flow shift 8).

Detected by the identity-mask patch embedding (`patch_embedding_mask.weight`) beside the pose one
(comfy_core/families/wan/scail.py). Its inputs are SCAIL's (wan21_scail.py) plus, as
`WAN21_SCAIL2.extra_conds` / `concat_cond` / `scale_latent_inpaint`:

- `driving_mask_28ch` `[1, Tp, 28, Hp, Wp]` (the pose video's colour masks) -> `sam_latents`
  `[1, 28, Tp, Hp, Wp]`; `ref_mask_28ch` `[1, n + T, 28, H, W]` (one mask per reference, zeros over
  the video) -> `ref_mask_latents` `[1, 28, n + T, H, W]`; `ref_mask_flag` (false in replacement
  mode) as given.
- The 4 extra input channels are the history mask: 1 - the denoise mask (`concat_mask`, else the
  latent's noise mask: 0 over the anchored frames of a continued chunk), averaged to one channel
  unless it has 4, resized bilinearly to the latent, zero-padded to its frames, repeated to 4
  channels; zeros without a mask.
- The kept (anchored) frames stay the clean latent at every step instead of being re-noised.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import MASK_CHANNELS, i2v_concat_mask
from comfy_core.families.wan.wan21_scail import SCAILConditions
from comfy_core.models.model_conditions import ConditioningError


def _channels_second(value: Any, name: str) -> torch.Tensor:
    """WanSCAILToVideo's `[B, T, 28, H, W]` masks -> `[B, 28, T, H, W]`."""
    if getattr(value, "ndim", None) != 5:
        raise ConditioningError(f"Wan SCAIL-2: {name} must be [batch, frames, 28, height, width], got "
                                f"{tuple(getattr(value, 'shape', ()))}")
    return value.movedim(1, 2).contiguous()


class SCAIL2Conditions(SCAILConditions):
    """SCAIL-2's model inputs (module docstring)."""

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        if kwargs.get("driving_mask_28ch") is not None:
            out["sam_latents"] = _channels_second(kwargs["driving_mask_28ch"], "driving_mask_28ch")
        if kwargs.get("ref_mask_28ch") is not None:
            out["ref_mask_latents"] = _channels_second(kwargs["ref_mask_28ch"], "ref_mask_28ch")
        if kwargs.get("ref_mask_flag") is not None:
            out["ref_mask_flag"] = bool(kwargs["ref_mask_flag"])
        return out

    def concat_cond(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        noise = kwargs["noise"]  # [B, C, T, H, W]
        extra = model.diffusion_model.patch_embedding.weight.shape[1] - noise.shape[1]
        if extra != MASK_CHANNELS:
            return super().concat_cond(model, **kwargs)
        mask = kwargs.get("concat_mask", kwargs.get("denoise_mask"))
        return i2v_concat_mask(mask, noise, kwargs.get("device") or noise.device).to(noise.dtype)

    @property
    def scale_latent_inpaint(self) -> Any:
        """The anchored frames are held at the clean latent (ComfyUI's `WAN21_SCAIL2.scale_latent_inpaint`)."""
        return lambda model, sigma, noise, latent_image: latent_image


def definition() -> Family:
    return wan_family("wan21_scail2", "Wan 2.1 SCAIL-2", (("variant", "scail2"),), SCAIL2Conditions(),
                      supported_model=supported_models.WAN21_SCAIL2, comfy_model_class="WAN21_SCAIL2")

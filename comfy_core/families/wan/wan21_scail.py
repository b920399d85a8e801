"""SCAIL-Preview on Wan 2.1 (character animation from a reference image and a pose video):
ComfyUI's `supported_models.WAN21_SCAIL` (model_base.WAN21_SCAIL, not image_to_video; flow shift 8).

Detected by the pose patch embedding (`patch_embedding_pose.weight`) without the mask one
(comfy_core/families/wan/scail.py has the network and the detection). Its inputs, as
`WAN21_SCAIL.extra_conds` / `concat_cond` from WanSCAILToVideo's conditioning keys:

- 4 extra input channels (the network takes 20): zeros (ComfyUI's WAN21.concat_cond without an
  image on a model that is not image-to-video).
- `reference_latents` (a list of `[B, 16, 1, H, W]` latents, the first the primary reference):
  ordered [additional..., primary], each in model space followed by 4 channels of ones,
  concatenated along time -> `reference_latent` `[B, 20, n, H, W]`.
- `pose_video_latent` in model space followed by 4 channels of ones -> `pose_latents`.
- `clip_vision_output`'s penultimate states -> `clip_fea` (the i2v image embedding).

SCAIL-2 (wan21_scail2.py) adds the identity masks, the replacement-mode flag and the history
anchor of a continued chunk.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import MASK_CHANNELS, WanConditions
from comfy_core.models.model_conditions import ConditioningError


def _with_ones(model: Any, latent: Any, name: str) -> torch.Tensor:
    """A 16-channel latent in model space followed by 4 channels of ones `[B, 20, T, H, W]`."""
    if getattr(latent, "ndim", None) != 5:
        raise ConditioningError(f"Wan SCAIL: {name} must be a 5-D video latent, got "
                                f"{tuple(getattr(latent, 'shape', ()))}")
    latent = model.process_latent_in(latent)
    return torch.cat([latent, torch.ones_like(latent[:, :MASK_CHANNELS])], dim=1)


class SCAILConditions(WanConditions):
    """SCAIL's model inputs (module docstring)."""

    def __init__(self) -> None:
        super().__init__("wan21", image_to_video=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        references = kwargs.get("reference_latents")
        if references is not None:
            references = list(references)
            ordered = references[1:] + references[:1]  # the primary reference next to the video
            out["reference_latent"] = torch.cat([_with_ones(model, r, "reference_latents") for r in ordered], dim=2)
        pose = kwargs.get("pose_video_latent")
        if pose is not None:
            out["pose_latents"] = _with_ones(model, pose, "pose_video_latent")
        return out


def definition() -> Family:
    return wan_family("wan21_scail", "Wan 2.1 SCAIL", (("variant", "scail"),), SCAILConditions(),
                      supported_model=supported_models.WAN21_SCAIL, comfy_model_class="WAN21_SCAIL")

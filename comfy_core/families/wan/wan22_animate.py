"""Wan 2.2 Animate (character animation / replacement from a reference image, a pose video and a
face video): ComfyUI's `supported_models.WAN22_Animate` (model_base.WAN22_Animate, not
image_to_video; flow shift 8, the Wan 2.1 latent).

Detected by the face adapter (`face_adapter.fuser_blocks.0.k_norm.weight`, ComfyUI's marker); the
network is `AnimateWanModel` (wan/animate.py). Its inputs, as `WAN22_Animate.extra_conds` from
WanAnimateToVideo's conditioning keys: the i2v concat (`concat_latent_image` after the inverted
4-channel `concat_mask`), `clip_vision_output`, `face_video_pixels` -> `face_pixel_values` as given
(`[B, 3, T, 512, 512]` in -1..1), `pose_video_latent` in model space -> `pose_latents`.
"""
from __future__ import annotations

from typing import Any

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import WanConditions
from comfy_core.models.model_conditions import ConditioningError


class AnimateConditions(WanConditions):
    """The i2v inputs plus the face pixels and the pose latent (module docstring)."""

    def __init__(self) -> None:
        super().__init__("wan21", image_to_video=False)

    def __repr__(self) -> str:
        return "AnimateConditions()"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        faces = kwargs.get("face_video_pixels")
        if faces is not None:
            if getattr(faces, "ndim", None) != 5:
                raise ConditioningError(f"Wan 2.2 Animate: face_video_pixels must be [B, 3, T, H, W], got "
                                        f"{tuple(getattr(faces, 'shape', ()))}")
            out["face_pixel_values"] = faces
        pose = kwargs.get("pose_video_latent")
        if pose is not None:
            if getattr(pose, "ndim", None) != 5:
                raise ConditioningError(f"Wan 2.2 Animate: pose_video_latent must be a 5-D video latent, got "
                                        f"{tuple(getattr(pose, 'shape', ()))}")
            out["pose_latents"] = model.process_latent_in(pose)
        return out


def definition() -> Family:
    return wan_family("wan22_animate", "Wan 2.2 Animate", (("variant", "animate"),), AnimateConditions(),
                      supported_model=supported_models.WAN22_Animate, comfy_model_class="WAN22_Animate")

"""Wan-Animate-2 (character animation from a reference image and a pose video): ComfyUI's
`supported_models.WAN_Animate2` (model_base.WAN_Animate2, image_to_video; flow shift 5).

Detected from the file's `config` metadata (`{"transformer": {"model_type": "animate2"}}`) on
i2v-shaped weights (`wan/animate2.py`: `with_metadata`); the network is `WanAnimate2Model`. Its
inputs besides the i2v ones (reference image latent + video latent after a 4-channel mask, CLIP
vision): from WanAnimate2ToVideo's conditioning keys, as ComfyUI's `WAN_Animate2.extra_conds`,
`pose_video_latent` -> `pose_latents` (model space), `clip_vision_output_pose` -> `clip_fea_pose`,
`cross_attn_pose` -> `context_pose`, and the constants `pose_strength` / `reference_strength`
when they differ from 1."""
from __future__ import annotations

import dataclasses
from typing import Any

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import WanConditions
from comfy_core.models.model_conditions import ConditioningError

SHIFT = 5.0  # ComfyUI's WAN_Animate2.sampling_settings


class Animate2Conditions(WanConditions):
    """The i2v inputs plus the pose branch's (module docstring)."""

    def __init__(self) -> None:
        super().__init__("wan21", image_to_video=True)

    def __repr__(self) -> str:
        return "Animate2Conditions()"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        pose = kwargs.get("pose_video_latent")
        if pose is not None:
            if getattr(pose, "ndim", None) != 5:
                raise ConditioningError(f"Wan Animate 2: pose_video_latent must be a 5-D video latent, got "
                                        f"{tuple(getattr(pose, 'shape', ()))}")
            out["pose_latents"] = model.process_latent_in(pose)
        clip_pose = kwargs.get("clip_vision_output_pose")
        if clip_pose is not None:
            states = getattr(clip_pose, "penultimate_hidden_states", None)
            if states is None:
                raise ConditioningError("Wan Animate 2: clip_vision_output_pose has no penultimate_hidden_states")
            out["clip_fea_pose"] = states
        if kwargs.get("cross_attn_pose") is not None:
            out["context_pose"] = kwargs["cross_attn_pose"]
        for key in ("pose_strength", "reference_strength"):
            value = kwargs.get(key, 1.0)
            if value != 1.0:
                out[key] = float(value)
        return out


def definition() -> Family:
    family = wan_family("wan_animate2", "Wan Animate 2", (("variant", "animate2"),), Animate2Conditions(),
                        supported_model=supported_models.WAN_Animate2, comfy_model_class="WAN_Animate2")
    return dataclasses.replace(family, sampling=dataclasses.replace(family.sampling, shift=SHIFT))

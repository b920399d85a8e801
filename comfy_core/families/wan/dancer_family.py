"""Wan Dancer (Wan 2.2 "WanToDance", 14B, music-driven dance video): ComfyUI's
`model_base.WAN22_WanDancer` (a WAN21 subclass, image_to_video) and its supported-model entry
(flow shift 8, Wan 2.1 latent format).

Detected by the second patch embedding (`patch_embedding_global.weight`, ComfyUI's marker) on
i2v-shaped weights; the network is comfy_core/families/wan/dancer.py. Its inputs besides the i2v
ones (WanDancerVideo's conditioning: the start-image latent after a 4-channel mask, the first
frame's CLIP-vision states), as `WAN22_WanDancer.extra_conds`: `audio_embed` (WanDancerEncodeAudio's
music features) as given, `clip_vision_output_ref`'s penultimate states -> `clip_fea_ref`, and the
constants `fps` and `audio_inject_scale`."""
from __future__ import annotations

from typing import Any

from comfy_core.families.base import Family
from comfy_core.families.wan import supported_models, wan_family
from comfy_core.families.wan.conditions import WanConditions
from comfy_core.models.model_conditions import ConditioningError


class WAN22_WanDancer(supported_models.WAN21_T2V):
    """ComfyUI's supported-model entry of the Dancer files (model type "wandancer"): shift 8, a fixed
    memory factor of 1.8 (its 14B i2v network plus the music modules)."""

    unet_config = {"image_model": "wan2.1", "model_type": "wandancer"}

    def __init__(self, unet_config: dict[str, Any]) -> None:
        super().__init__(unet_config)
        self.memory_usage_factor = 1.8


class DancerConditions(WanConditions):
    """The i2v inputs plus the Dancer's (module docstring)."""

    def __init__(self) -> None:
        super().__init__("wan21", image_to_video=True)

    def __repr__(self) -> str:
        return "DancerConditions()"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        if kwargs.get("audio_embed") is not None:
            out["audio_embed"] = kwargs["audio_embed"]
        reference = kwargs.get("clip_vision_output_ref")
        if reference is not None:
            states = getattr(reference, "penultimate_hidden_states", None)
            if states is None:
                raise ConditioningError("Wan Dancer: clip_vision_output_ref has no penultimate_hidden_states")
            out["clip_fea_ref"] = states
        for key in ("fps", "audio_inject_scale"):
            if kwargs.get(key) is not None:
                out[key] = float(kwargs[key])
        return out


def definition() -> Family:
    return wan_family("wan22_dancer", "Wan Dancer", (("variant", "wandancer"),), DancerConditions(),
                      supported_model=WAN22_WanDancer, comfy_model_class="WAN22_WanDancer")

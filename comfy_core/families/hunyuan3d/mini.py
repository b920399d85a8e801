"""Hunyuan3D 2.0 mini: the 2.0 network with 8 double blocks (ComfyUI's `Hunyuan3Dv2mini`: the same
model class, its own latent scale factor)."""
from __future__ import annotations

from comfy_core.families.base import Family, Signature
from comfy_core.families.hunyuan3d import MARKER, PREFIX, family_value, hunyuan3d_architecture, supported_models
from comfy_core.families.hunyuan3d.latent_format import Hunyuan3Dv2mini


def definition() -> Family:
    return family_value("hunyuan3d2_mini", "Hunyuan3D 2.0 mini",
                        Signature(required_prefixes=(PREFIX + MARKER,),
                                  unet=(("image_model", "hunyuan3d2"), ("mini", True))),
                        Hunyuan3Dv2mini(), hunyuan3d_architecture(), "Hunyuan3Dv2",
                        supported_models.Hunyuan3Dv2mini)

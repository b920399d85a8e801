"""Hunyuan3D 2.1: the U-ViT shape DiT with a mixture of experts (`dit21.py`; ComfyUI's
`Hunyuan3Dv2_1`, marker `t_embedder.mlp.2.weight` under `model.`), the same ShapeVAE, DINOv2
encoder and sampling as 2.0, its own latent scale factor."""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Signature
from comfy_core.families.hunyuan3d import PREFIX, family_value, supported_models
from comfy_core.families.hunyuan3d.latent_format import Hunyuan3Dv2_1

MARKER = "t_embedder.mlp.2.weight"


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.hunyuan3d.dit21 import Hunyuan3D21DiTConfig

    return Hunyuan3D21DiTConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "hunyuan3d2_1"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.hunyuan3d.dit21 import Hunyuan3Dv21DiT

    return Hunyuan3Dv21DiT.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.hunyuan3d.dit import Hunyuan3DConfigError

    return (Hunyuan3DConfigError,)


def hunyuan3d21_architecture() -> Architecture:
    return Architecture(name="hunyuan3d2_1", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    return family_value("hunyuan3d2_1", "Hunyuan3D 2.1",
                        Signature(required_prefixes=(PREFIX + MARKER,), unet=(("image_model", "hunyuan3d2_1"),)),
                        Hunyuan3Dv2_1(), hunyuan3d21_architecture(), "Hunyuan3Dv2_1",
                        supported_models.Hunyuan3Dv2_1)

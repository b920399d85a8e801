"""Hunyuan3D 2.0 (and 2.0 mini, 2.1: `mini.py`, `v21.py`): image to 3-D shape. The shape DiT
architecture (markers, detection, builder, ComfyUI's unet_config), the ShapeVAE decoder and its
VAE object, the latent formats, the sampling policy and the family values.

ComfyUI's `supported_models.Hunyuan3Dv2` / `Hunyuan3Dv2mini` / `Hunyuan3Dv2_1`
(`model_base.Hunyuan3Dv2` / `Hunyuan3Dv2_1`): rectified flow (CONST) with shift 1 and
multiplier 1, 64-channel 1-D latents of shape tokens (`EmptyLatentHunyuan3Dv2`), the DiT under
`model.` (markers `latent_in.weight` for 2.0, `t_embedder.mlp.2.weight` for 2.1, as ComfyUI's
detection), the ShapeVAE under `vae.` (`shape_vae.py`, `vae_patcher.py`), a DINOv2 image encoder
under `conditioner.main_image_encoder.model.` (ComfyUI's `clip_vision_prefix`; ImageOnlyCheckpointLoader
returns it, comfy_core/clip_vision), no text encoder. Conditioning is the image encoder's last
hidden state (`Hunyuan3Dv2Conditioning`) as the context; `guidance` (FluxGuidance, default 5.0)
reaches 2.0's guidance embedding where the file has one (the turbo releases).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.hunyuan3d import supported_models
from comfy_core.families.hunyuan3d import vae_patcher as _vae_patcher  # noqa: F401 -- VAELoader's ShapeVAE kind
from comfy_core.families.hunyuan3d.latent_format import Hunyuan3Dv2
from comfy_core.models.model_conditions import ModelConditions

PREFIX = "model."
VAE_PREFIX = "vae."
CLIP_VISION_PREFIX = "conditioner.main_image_encoder.model."
MARKER = "latent_in.weight"
DEFAULT_GUIDANCE = 5.0  # ComfyUI's model_base.Hunyuan3Dv2 extra_conds default


class Hunyuan3DConditions(ModelConditions):
    """The image tokens are the context (c_crossattn); `guidance` (default 5.0) as a further input."""

    name = "hunyuan3d"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        guidance = kwargs.get("guidance", DEFAULT_GUIDANCE)
        if guidance is None:
            return {}
        return {"guidance": torch.tensor([float(guidance)], dtype=torch.float32)}  # [1]


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.hunyuan3d.dit import Hunyuan3DDiTConfig

    return Hunyuan3DDiTConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    from comfy_core.families.hunyuan3d.dit import MINI_DEPTH

    facts = dataclasses.asdict(config)
    facts["image_model"] = "hunyuan3d2"
    facts["mini"] = config.depth == MINI_DEPTH  # ComfyUI's Hunyuan3Dv2mini: depth 8
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.hunyuan3d.dit import Hunyuan3Dv2DiT

    return Hunyuan3Dv2DiT.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.hunyuan3d.dit import Hunyuan3DConfigError

    return (Hunyuan3DConfigError,)


def hunyuan3d_architecture() -> Architecture:
    return Architecture(name="hunyuan3d2", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_in_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


class Hunyuan3DComponents:
    """What the single-file loader builds for Hunyuan3D besides the defaults: the ShapeVAE
    decoder and its VAE object, and the flow model sampling (shift 1, multiplier 1)."""

    def build_unet(self, config: Any, operations: Any = None) -> Any:
        from comfy_core.families.hunyuan3d.dit import Hunyuan3Dv2DiT, Hunyuan3DDiTConfig
        from comfy_core.families.hunyuan3d.dit21 import Hunyuan3Dv21DiT

        network = Hunyuan3Dv2DiT if isinstance(config, Hunyuan3DDiTConfig) else Hunyuan3Dv21DiT
        return network.from_config(config, operations=operations)

    def vae_config(self, tensors: Mapping[str, Any], prefix: str) -> Any:
        from comfy_core.families.hunyuan3d.shape_vae import ShapeVAEConfig, ShapeVAEConfigError
        from comfy_core.models.vae import VAEConfigError

        try:
            config = ShapeVAEConfig.detect_from_weights(tensors, prefix)
        except ShapeVAEConfigError as exc:
            raise VAEConfigError(str(exc)) from None
        return _LoaderVAEConfig(config)

    def build_vae(self, config: Any) -> Any:
        from comfy_core.families.hunyuan3d.shape_vae import ShapeVAE

        return ShapeVAE(config.shape)

    def vae_patcher(self, module: Any, load_device: Any, offload_device: Any) -> Any:
        from comfy_core.families.hunyuan3d.vae_patcher import ShapeVaePatcher

        return ShapeVaePatcher(module, load_device, offload_device)

    def build_model(self, unet: Any, family: Family, prediction: str, zsnr: bool) -> Any:
        from comfy_core.models.diffusion import DiffusionModel

        return DiffusionModel(unet, family.sampling.model_sampling(prediction, zsnr), family.latent_format,
                              family=family)


class _LoaderVAEConfig:
    """The ShapeVAE's config as the checkpoint loader checks it (`downscale`, `embed_dim`)."""

    def __init__(self, shape: Any) -> None:
        self.shape = shape
        self.downscale = 1
        self.embed_dim = shape.embed_dim


def family_value(name: str, display_name: str, signature: Signature, latent: Any, architecture: Architecture,
                 comfy_model_class: str, supported_model: Any) -> Family:
    """A Hunyuan3D family: what 2.0, 2.0 mini and 2.1 share."""
    return Family(
        name=name,
        display_name=display_name,
        signature=signature,
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=1.0, multiplier=1.0),
        geometry=Geometry(latent_channels=latent.channels, downscale=1),
        unet_prefix=PREFIX,
        vae_prefix=VAE_PREFIX,
        clip_vision_prefix=CLIP_VISION_PREFIX,
        conditioning=Hunyuan3DConditions(),
        components=Hunyuan3DComponents(),
        architecture=architecture,
        text_encoders=None,
        inference_dtypes=("fp16", "bf16", "fp32"),
        supported_model=supported_model,
        comfy_model_class=comfy_model_class,
    )


def definition() -> Family:
    return family_value("hunyuan3d2", "Hunyuan3D 2.0",
                        Signature(required_prefixes=(PREFIX + MARKER,),
                                  unet=(("image_model", "hunyuan3d2"), ("mini", False))),
                        Hunyuan3Dv2(), hunyuan3d_architecture(), "Hunyuan3Dv2", supported_models.Hunyuan3Dv2)

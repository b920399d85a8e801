"""LTX-Video 0.9.x (Lightricks): the LTXV DiT architecture (markers, detection, builder, the
diffusers conversion, ComfyUI's unet_config), the T5-XXL encoder set, the latent format, the
sampling policy and the family value.

ComfyUI's `supported_models.LTXV` / `model_base.LTXV`: rectified flow with ModelSamplingFlux's
exponential shift 2.37 and multiplier 1 (the network scales sigma by 1000 itself), bf16 / fp32
inference, 128-channel latents at 32x spatial and 8x temporal compression from the causal video VAE
(`comfy_core/models/ltxv_vae.py`, built by the VAE loader), T5-XXL with its token mask. Files are
single files (the DiT under `model.diffusion_model.`, the VAE under `vae.`, optionally T5 under
`text_encoders.t5xxl.transformer.`) or split files (UNETLoader, CLIPLoader type "ltxv",
VAELoader); diffusers' `LTXVideoTransformer3DModel` names are converted (`keys.py`).
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.ltxv import supported_models
from comfy_core.families.ltxv.conditions import LTXVConditions
from comfy_core.families.ltxv.latent_format import ltxv_latent_format

PREFIX = "model.diffusion_model."
MARKER = "adaln_single.emb.timestep_embedder.linear_1.bias"
LTXV_SHIFT = 2.37  # ComfyUI's LTXV sampling_settings


def _detect(tensors: Mapping[str, Any], prefix: str, metadata: Mapping[str, str] | None = None) -> Any:
    from comfy_core.families.ltxv.dit import LTXVConfig

    return LTXVConfig.detect_from_weights(tensors, prefix, metadata)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "ltxv"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.ltxv.dit import LTXVModel

    return LTXVModel.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.ltxv.dit import LTXVConfigError

    return (LTXVConfigError,)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.ltxv.keys import is_diffusers_ltxv

    return is_diffusers_ltxv(names)


def _from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.ltxv.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def ltxv_architecture() -> Architecture:
    return Architecture(name="ltxv", markers=(MARKER,), detect=_detect, facts=_facts, build=_build, errors=_errors(),
                        context_width=lambda config: config.caption_channels, is_diffusers=_is_diffusers,
                        from_diffusers=_from_diffusers, comfy_config=lambda config: config.comfy_unet_config(),
                        detect_with_metadata=_detect)


class LTXVComponents:
    """What the single-file loader builds for LTX-Video besides the defaults: the causal video VAE
    under `vae.` (`comfy_core/models/ltxv_vae.py`, its layout read from the weights)."""

    def build_unet(self, config: Any, operations: Any = None) -> Any:
        return _build(config, operations)

    def vae_config(self, tensors: Mapping[str, Any], prefix: str) -> Any:
        from comfy_core.models.ltxv_vae import LTXVVAEConfig

        return LTXVVAEConfig.detect_from_weights(tensors, prefix)

    def build_vae(self, config: Any) -> Any:
        from comfy_core.models.ltxv_vae import LTXVVAE

        return LTXVVAE(config)

    def build_model(self, unet: Any, family: Family, prediction: str, zsnr: bool) -> Any:
        from comfy_core.models.diffusion import DiffusionModel

        return DiffusionModel(unet, family.sampling.model_sampling(prediction, zsnr), family.latent_format,
                              family=family)


def text_encoders() -> Any:
    from comfy_core.families.ltxv.encoders import LTXV_TEXT_ENCODERS

    return LTXV_TEXT_ENCODERS


def definition() -> Family:
    latent = ltxv_latent_format()
    return Family(
        name="ltxv",
        display_name="LTX-Video 0.9",
        signature=Signature(required_prefixes=(PREFIX + MARKER,),
                            forbidden_prefixes=(PREFIX + "pos_embed.", PREFIX + "audio_patchify_proj."),
                            unet=(("image_model", "ltxv"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flux", shift=LTXV_SHIFT, multiplier=1.0,
                                default_sampler="euler", default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=32),
        vae_prefix="vae.",
        conditioning=LTXVConditions(),
        components=LTXVComponents(),
        architecture=ltxv_architecture(),
        text_encoders=text_encoders(),
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.LTXV,
        comfy_model_class="LTXV",
    )

"""Mage-Flow (Microsoft Mage 2026; t2i, Turbo, Edit, Edit Turbo): a 12-block MMDiT of Qwen-Image's
double-stream blocks (`dit.py`: 3072 wide, 24 heads of 128, one token per latent pixel, 3-axis
RoPE with references on their own image index, the text unrotated) over the 128-channel latents
of the Mage-VAE (`comfy_core/models/mage_vae.py`: a one-step diffusion codec, 16x down, its
latents anchored to Flux.2's space), conditioned on Qwen3-VL 4B's final normed states (`clip.py`).

As today's ComfyUI's `supported_models.MageFlow` / `model_base.MageFlow` have it (read from a
port's notes quoting them; ComfyUI's files are not stored here):

- sampling: discrete flow (model type FLOW), shift 6, multiplier 1 (the network gets sigma; its
  sinusoid scales it by 1000); the templates: 30 steps cfg 5 (base, Edit) or 4 steps cfg 1
  (Turbo), euler / simple;
- latents: Flux.2's format (`flux2/latent_format.py`: scale 1, no shift);
- conditioning: the text states as the context, Mage-Flow-Edit's `reference_latents` (from
  TextEncodeMageFlowEdit, each VAE-encoded at the output size) as `ref_latents`, the token mask as
  `attention_mask` when it masks something;
- text encoders: Qwen3-VL 4B, loaded by CLIPLoader type "mage";
- inference in bf16 or fp32.

Files: bare diffusers-style names in the split files (`mage_flow_int8_convrot.safetensors`, int8
ConvRot, kept as stored by the generic quantised loading, comfy_core/weights/quant_registry.py),
under `model.diffusion_model.` in single files. Detected from Qwen-Image's names with a patch-1
128-channel `img_in` / `proj_out` (`MageFlowConfig.detect_from_weights`); Qwen-Image's detection
refuses that layout (its network would read it as 32 channels in 2x2 patches), and the
`diffusion_model` fact `patch_size` 1 says so for split files too.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.families.mage import supported_models
from comfy_core.families.mage.clip import MAGE_TEXT_ENCODERS
from comfy_core.models.model_conditions import ReferenceLatentConditions

MARKER = "transformer_blocks.0.img_mod.1.weight"
TXT_NORM = "txt_norm.weight"
IMAGE_MODEL = "mage_flow"


class MageConditions(ReferenceLatentConditions):
    """ComfyUI's `model_base.MageFlow.extra_conds` (Qwen-Image's): reference latents in model space
    as `ref_latents` (with `reference_latents_method` when given), the token mask."""

    name = "mage"
    pass_mask = True


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.mage.dit import MageFlowConfig, MageFlowConfigError

    if prefix + TXT_NORM not in tensors:
        raise MageFlowConfigError(f"Mage-Flow: no {prefix}{TXT_NORM}")
    return MageFlowConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = IMAGE_MODEL
    facts["patch_size"] = 1
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.mage.dit import MageFlowTransformer

    return (MageFlowTransformer.from_config(config) if operations is None
            else MageFlowTransformer.from_config(config, operations=operations))


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.mage.dit import MageFlowConfigError

    return (MageFlowConfigError,)


def mage_architecture() -> Architecture:
    return Architecture(name="mage_flow", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.joint_attention_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = Flux2LatentFormat()
    return Family(
        name="mage",
        display_name="Mage-Flow",
        signature=Signature(required_prefixes=("model.diffusion_model." + TXT_NORM,),
                            unet=(("image_model", IMAGE_MODEL),),
                            diffusion_model=(("patch_size", 1),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=supported_models.MAGE_SHIFT,
                                multiplier=supported_models.MAGE_MULTIPLIER, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=16),
        vae_prefix="vae.",
        conditioning=MageConditions(),
        architecture=mage_architecture(),
        text_encoders=MAGE_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.MageFlow,
        comfy_model_class="MageFlow",
    )


__all__ = ["IMAGE_MODEL", "MARKER", "MageConditions", "definition", "mage_architecture"]

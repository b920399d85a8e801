"""Flux.1 dev and Kontext (Black Forest Labs 2024/2025): a rectified-flow transformer with 19
double-stream and 38 single-stream blocks, 3-axis RoPE, a distilled-guidance embedding
(`guidance_in`), conditioned on T5-XXL's states (tokens) and CLIP-L's pooled output (vector);
16-channel latents (scale 0.3611, shift 0.1159) from its own autoencoder, 2x2 patches.

Sampled as ComfyUI's `supported_models.Flux` (model type FLUX): Flux's exponential time shift,
1.15 by default (ModelSamplingFlux re-derives it from the resolution). Kontext is the same network
given reference latents (`ReferenceLatent`); schnell, without the guidance embedding, is
`flux_schnell.py`.

Files: ComfyUI / BFL names under `model.diffusion_model.` in single files (`text_encoders.clip_l.`,
`text_encoders.t5xxl.`, `vae.`), bare BFL names in split files (`flux1-dev.safetensors`), or
diffusers' `FluxTransformer2DModel` names (converted: fused q/k/v, comfy_core/families/flux/keys.py).
Detected from names and shapes: `double_blocks.*` with `guidance_in.*`.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux.combine import FluxCombine
from comfy_core.families.flux import supported_models
from comfy_core.families.flux.latent_format import flux_latent_format
from comfy_core.models.model_conditions import FluxConditions
from comfy_core.text_encoders.encoder_set import PAD_EOS, PAD_ZERO, EncoderOptions, EncoderSetSpec
from comfy_core.families.flux.clip import FluxClipModel
from comfy_core.families.flux.clip import FluxTokenizer

DOUBLE_BLOCKS = "double_blocks."

# CLIP-L (its final output, unprojected pooled) and T5-XXL (256-token minimum), ComfyUI's
# FluxClipModel / FluxTokenizer: the states are T5's, the vector CLIP-L's pooled output.
TEXT_ENCODERS = EncoderSetSpec(
    "flux", (EncoderOptions("clip_l", "l", PAD_EOS, None, True, projected_pooled=False,
                            prefixes=("text_encoders.clip_l.transformer.text_model.",), nominal_width=768),
             EncoderOptions("t5xxl", "t5xxl", PAD_ZERO, None, True, prefixes=("text_encoders.t5xxl.transformer.",),
                            kind="t5", nominal_width=4096, min_length=256)),
    "clip_l", combine=FluxCombine(), set_class=FluxClipModel, tokenizer_class=FluxTokenizer, clip_types=("flux",))


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.flux.dit import FluxConfig

    return FluxConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["in_channels"] = config.in_channels
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.flux.dit import FluxTransformer

    return (FluxTransformer.from_config(config) if operations is None
            else FluxTransformer.from_config(config, operations=operations))


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.flux.dit import FluxConfigError

    return (FluxConfigError,)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.flux.keys import is_diffusers_flux

    return is_diffusers_flux(names)


def _from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.flux.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def flux_architecture() -> Architecture:
    return Architecture(name="flux", markers=(DOUBLE_BLOCKS + "0.img_attn.qkv.weight",), detect=_detect, facts=_facts,
                        build=_build, errors=_errors(), context_width=lambda config: config.context_in_dim,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config(),
                        self_attention_hook="attn1_output_patch")


def definition() -> Family:
    return Family(
        name="flux",
        display_name="Flux.1 dev",
        signature=Signature(required_prefixes=("model.diffusion_model." + DOUBLE_BLOCKS,),
                            unet=(("guidance_embed", True),)),
        latent_format=flux_latent_format(),
        sampling=SamplingPolicy(prediction="flow", schedule="flux", shift=1.15, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=16),
        vae_prefix="vae.",
        conditioning=FluxConditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=flux_architecture(),
        text_encoders=TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp16", "fp32"),  # ComfyUI's supported_models.Flux
        supported_model=supported_models.FluxModelConfig,
        comfy_model_class="Flux",
    )

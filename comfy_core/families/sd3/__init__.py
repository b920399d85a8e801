"""Stable Diffusion 3 and 3.5 (Esser et al. 2024, "Scaling Rectified Flow Transformers"): the MMDiT
(joint attention over text and image tokens; SD3.5 adds RMS q/k norms, SD3.5 medium MMDiT-X
self-attention in its first blocks), conditioned on CLIP-L + OpenCLIP-bigG (penultimate states
concatenated, zero-padded to 4096, and their pooled outputs as the vector) with T5-XXL's tokens
appended; 16-channel latents (scale 1.5305, shift 0.0609), 2x2 patches.

Sampled as ComfyUI's `supported_models.SD3` (model type FLOW): rectified flow with SD3's time
shift 3.0 and timestep multiplier 1000. Any of the three text encoders may be absent (ComfyUI's
SD3ClipModel): the absent ones count as zeros.

Files: SAI / ComfyUI names under `model.diffusion_model.` in single files (`text_encoders.clip_l.`,
`.clip_g.`, `.t5xxl.`, `first_stage_model.`), bare in split files, or diffusers'
`SD3Transformer2DModel` names (converted: comfy_core/families/sd3/keys.py). Detected from names and
shapes: `joint_blocks.*`; widths, depth, q/k norm and MMDiT-X layers from the weights.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.sd3.combine import SD3Combine
from comfy_core.families.sd3 import supported_models
from comfy_core.families.sd3.latent_format import sd3_latent_format
from comfy_core.models.model_conditions import PooledConditions
from comfy_core.text_encoders.encoder_set import PAD_EOS, PAD_ZERO, EncoderOptions, EncoderSetSpec
from comfy_core.families.sd3.clip import SD3ClipModel
from comfy_core.families.sd3.clip import SD3Tokenizer

JOINT_BLOCKS = "joint_blocks."
_TE = "text_encoders."

# ComfyUI's SD3ClipModel: CLIP-L and CLIP-G at their penultimate layer without the final norm
# (CLIP-L's pooled output unprojected, CLIP-G's projected), T5-XXL's final output (77-token minimum).
TEXT_ENCODERS = EncoderSetSpec(
    "sd3", (EncoderOptions("clip_l", "l", PAD_EOS, -2, False, projected_pooled=False,
                           prefixes=(_TE + "clip_l.transformer.text_model.",), nominal_width=768),
            EncoderOptions("clip_g", "g", PAD_ZERO, -2, False, prefixes=(_TE + "clip_g.transformer.text_model.",),
                           nominal_width=1280),
            EncoderOptions("t5xxl", "t5xxl", PAD_ZERO, None, True, prefixes=(_TE + "t5xxl.transformer.",),
                           kind="t5", nominal_width=4096, min_length=77)),
    "clip_g", combine=SD3Combine(), set_class=SD3ClipModel, tokenizer_class=SD3Tokenizer, partial=True,
    clip_types=("sd3",))


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.sd3.mmdit import MMDiTConfig

    return MMDiTConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(config)


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.sd3.mmdit import OpenAISignatureMMDITWrapper

    return OpenAISignatureMMDITWrapper.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.sd3.mmdit import MMDiTConfigError

    return (MMDiTConfigError,)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.sd3.keys import is_diffusers_mmdit

    return is_diffusers_mmdit(names)


def _from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.sd3.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def mmdit_architecture() -> Architecture:
    return Architecture(name="mmdit", markers=(JOINT_BLOCKS + "0.x_block.attn.qkv.weight",), detect=_detect,
                        facts=_facts, build=_build, errors=_errors(),
                        context_width=lambda config: config.context_in_features,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    return Family(
        name="sd3",
        display_name="Stable Diffusion 3 / 3.5",
        signature=Signature(required_prefixes=("model.diffusion_model." + JOINT_BLOCKS,),
                            unet=(("in_channels", 16),)),
        latent_format=sd3_latent_format(),
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=3.0, multiplier=1000.0,
                                default_scheduler="sgm_uniform"),
        geometry=Geometry(latent_channels=16),
        conditioning=PooledConditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=mmdit_architecture(),
        text_encoders=TEXT_ENCODERS,
        supported_model=supported_models.SD3,
        comfy_model_class="SD3",
    )

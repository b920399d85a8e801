"""Ovis-Image (AIDC-AI 2025): a 7B text-to-image model, Flux.1's double/single-stream transformer
with SwiGLU MLPs, an RMS-normed text input and no pooled vector or guidance embedding
(comfy_core/families/ovis_image/dit.py: 6 double and 27 single blocks of 3072), conditioned on
Ovis 2.5's Qwen3-2B language model (`clip.py`, 2048 wide); Flux.1's 16-channel latents (scale
0.3611, shift 0.1159) and autoencoder (`ae.safetensors`), 2x2 patches.

As ComfyUI runs it (its Flux class; `model_base.Flux`):

- sampling: model type FLOW, shift 1, multiplier 1 (the network gets sigma); the official template
  sets shift 3 with ModelSamplingAuraFlow and samples with CFG 5;
- conditioning: the text states as the context, nothing else (no pooled `y`, no guidance);
- text encoders: Ovis 2.5 (Qwen3-2B), loaded by CLIPLoader type "ovis".

Files: ComfyUI's names (its Flux layout) bare in split files (`ovis_image_bf16.safetensors`), under
`model.diffusion_model.` in single files. Detected from names and shapes: ComfyUI's markers
`double_blocks.0.img_mlp.gate_proj.weight` (SwiGLU) with `txt_norm.scale`; Flux's own detection
needs `vector_in`, which Ovis-Image lacks, so the two never both match.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux.latent_format import flux_latent_format
from comfy_core.families.ovis_image import supported_models
from comfy_core.families.ovis_image.clip import OVIS_TEXT_ENCODERS
from comfy_core.models.model_conditions import ModelConditions

MARKER = "double_blocks.0.img_mlp.gate_proj.weight"


class OvisImageConditions(ModelConditions):
    """Ovis-Image's model inputs: the context alone (its network has no vector or guidance input)."""

    name = "ovis_image"


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.ovis_image.dit import OvisImageConfig

    return OvisImageConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "ovis_image"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.ovis_image.dit import OvisImageTransformer

    return OvisImageTransformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.ovis_image.dit import OvisImageConfigError

    return (OvisImageConfigError,)


def ovis_image_architecture() -> Architecture:
    return Architecture(name="ovis_image", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_in_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    return Family(
        name="ovis_image",
        display_name="Ovis-Image",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", "ovis_image"),)),
        latent_format=flux_latent_format(),
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=1.0, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=16),
        vae_prefix="vae.",
        conditioning=OvisImageConditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=ovis_image_architecture(),
        text_encoders=OVIS_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp16", "fp32"),  # FluxSchnell's
        supported_model=supported_models.OvisImage,
        comfy_model_class="Flux",
    )


__all__ = ["OvisImageConditions", "definition", "ovis_image_architecture"]

"""Chroma (lodestones 2025, huggingface.co/lodestones/Chroma): Flux.1 schnell's transformer with its
per-block modulation linears and its CLIP / guidance embedders pruned, one approximator making all
modulations (comfy_core/families/chroma/dit.py); conditioned on T5-XXL alone; Flux's 16-channel
latents (scale 0.3611, shift 0.1159) and autoencoder, 2x2 patches.

As ComfyUI 0.3.64's `supported_models.Chroma` / `model_base.Chroma` have it:

- sampling: model type FLUX with sampling settings `{"multiplier": 1.0}` only, so Flux's
  exponential time shift at ModelSamplingFlux's default 1.15 (the multiplier is not read by it);
- conditioning: the T5 states; `guidance` defaults to 0 (Flux's is 3.5) and reaches the
  approximator; no pooled vector (Chroma has no `vector_in`), no reference latents, no extra
  input channels;
- text encoders: ComfyUI's `pixart_t5` set (`PixArtT5XXL`, `PixArtTokenizer`): T5-XXL's final
  output, no start token, no padding to a maximum, `min_length` 1, attention masks off (padding
  is attended; later ComfyUI versions mask it: not 0.3.64's behaviour); a weighted prompt
  interpolates from an all-pad "empty" prompt (PixArt's `gen_empty_tokens` drops the end token);
  CLIPLoader type "chroma".

Files: ComfyUI / BFL names under `model.diffusion_model.` in single files (T5 under
`cond_stage_model.t5xxl.transformer.`, the VAE under `first_stage_model.`: Chroma keeps ComfyUI's
default prefixes; `text_encoders.t5xxl.transformer.` is read too), bare names in split files
(`chroma-unlocked-v*.safetensors`), or diffusers' `ChromaTransformer2DModel` names (converted).
Detected from names and shapes: `double_blocks.*` with `distilled_guidance_layer.*` and no
`vector_in` (Flux's signature needs `vector_in`, so the two never both match).
"""
from __future__ import annotations

import types
from typing import Any, Mapping

import torch

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.chroma import supported_models
from comfy_core.families.flux.latent_format import flux_latent_format
from comfy_core.models.model_conditions import ModelConditions
from comfy_core.text_encoders.encoder_set import PAD_ZERO, EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

GUIDANCE_LAYER = "distilled_guidance_layer."
CHROMA_DEFAULT_GUIDANCE = 0.0  # model_base.Chroma.extra_conds: kwargs.get("guidance", 0)
T5_MIN_LENGTH = 1  # comfy/text_encoders/pixart_t5.py: T5XXLTokenizer(min_length=1)


class PixArtT5XXL(TextEncoderSet):
    """Chroma's (and PixArt's) T5-XXL set (ComfyUI's `comfy.text_encoders.pixart_t5.PixArtT5XXL`):
    the tower's "empty" prompt, which weighted prompts interpolate from, is pad tokens only
    (ComfyUI's `pixart_t5.T5XXLModel.gen_empty_tokens`), not SD3/Flux's end token then pads."""

    clip_name, clip = "t5xxl", "t5xxl"

    def __init__(self, spec: EncoderSetSpec, encoders: Mapping[str, Any]) -> None:
        super().__init__(spec, encoders)
        for slot in self.slots:
            tower = self.encoder(slot)
            if hasattr(tower, "empty_tokens"):
                tower.empty_tokens = types.MethodType(_pad_only_empty_tokens, tower)


def _pad_only_empty_tokens(tower: Any, length: int) -> list[int]:
    return [tower.special_tokens["pad"]] * max(0, length)


class PixArtTokenizer(FamilyTokenizer):
    """Chroma's T5-XXL tokenizer (ComfyUI's `comfy.text_encoders.pixart_t5.PixArtTokenizer`, whose
    tower tokenizer ComfyUI names `clip_t5xxl`)."""

    @property
    def clip_t5xxl(self) -> Any:
        return getattr(self, "t5xxl")


TEXT_ENCODERS = EncoderSetSpec(
    "chroma", (EncoderOptions("t5xxl", "t5xxl", PAD_ZERO, None, True,
                              prefixes=("cond_stage_model.t5xxl.transformer.", "text_encoders.t5xxl.transformer."),
                              kind="t5", nominal_width=4096, min_length=T5_MIN_LENGTH),),
    "t5xxl", set_class=PixArtT5XXL, tokenizer_class=PixArtTokenizer, clip_types=("chroma",))


class ChromaConditions(ModelConditions):
    """Chroma's model inputs (ComfyUI's `model_base.Chroma.extra_conds`): `guidance` (default 0,
    None: none, as FluxDisableGuidance sets it), no label embedding `y`, no extra channels."""

    name = "chroma"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        guidance = kwargs.get("guidance", CHROMA_DEFAULT_GUIDANCE)
        if guidance is None:
            return {}
        return {"guidance": torch.tensor([float(guidance)], dtype=torch.float32)}  # [1]


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.chroma.dit import ChromaConfig

    return ChromaConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "chroma"
    facts["latent_channels"] = config.latent_channels
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.chroma.dit import Chroma

    return Chroma.from_config(config) if operations is None else Chroma.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.chroma.dit import ChromaConfigError

    return (ChromaConfigError,)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.chroma.dit import is_diffusers_chroma

    return is_diffusers_chroma(names)


def _from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.chroma.dit import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def chroma_architecture() -> Architecture:
    # ComfyUI's names only (diffusers keeps `distilled_guidance_layer.in_proj` but spells the norms `.weight`).
    return Architecture(name="chroma", markers=(GUIDANCE_LAYER + "norms.0.scale",), detect=_detect, facts=_facts,
                        build=_build, errors=_errors(), context_width=lambda config: config.context_in_dim,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config(),
                        self_attention_hook="attn1_output_patch")


def definition() -> Family:
    return Family(
        name="chroma",
        display_name="Chroma",
        signature=Signature(required_prefixes=("model.diffusion_model." + GUIDANCE_LAYER,),
                            unet=(("image_model", "chroma"),)),
        latent_format=flux_latent_format(),
        sampling=SamplingPolicy(prediction="flow", schedule="flux", shift=1.15, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=16),
        vae_prefix="first_stage_model.",
        conditioning=ChromaConditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=chroma_architecture(),
        text_encoders=TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp16", "fp32"),  # ComfyUI's supported_models.Chroma
        supported_model=supported_models.Chroma,
        comfy_model_class="Chroma",
    )

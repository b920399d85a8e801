"""LongCat-Image and LongCat-Image-Edit (Meituan 2025): a 6B Flux-style text-to-image / instruction
editing model (comfy_core/families/flux/longcat_dit.py: Flux.1's blocks, 19 double and 38 single
of 3072, no pooled vector or guidance embedding, text positions on the row / column axes, the image
placed past the text in RoPE), conditioned on Qwen2.5-VL 7B's states (`longcat_clip.py`, 3584
wide); Flux.1's 16-channel latents (scale 0.3611, shift 0.1159) and autoencoder (`ae.safetensors`),
2x2 patches.

ComfyUI treats it as a Flux variant (`image_model` "flux", `supported_models.LongCatImage`,
`model_base.LongCatImage(Flux)`), and so does this module, a variant of the `flux` package:

- sampling: model type FLUX, Flux's exponential shift 1.15 (ModelSamplingFlux's default: the config
  sets no sampling settings), multiplier 1 (the network gets sigma); the templates sample with
  CFG 4 / 4.5 (CFGNorm on the text-to-image one), euler / simple;
- conditioning: the text states as the context; no pooled `y` and no `guidance` (LongCatImage
  drops FluxGuidance's value, the templates' FluxGuidance nodes change nothing); the edit's
  `reference_latents` (TextEncodeQwenImageEdit's VAE encoding, in model space) as `ref_latents`
  with `reference_latents_method` ("index" in the template: FluxKontextMultiReferenceLatentMethod);
- text encoder: Qwen2.5-VL 7B (`qwen_2.5_vl_7b*`, the file Qwen-Image loads) by CLIPLoader type
  "longcat_image"; for the edit the text encoder sees the input image (its vision tower).

Files: ComfyUI's names (its Flux layout) bare in split files (`longcat_image_bf16.safetensors`,
`longcat_image_edit_bf16.safetensors`), under `model.diffusion_model.` in single files; Meituan's
diffusers-layout release is converted (`from_diffusers`; ComfyUI reads only its repackaged files). Detected
from names and shapes: Flux's `double_blocks.*` with `img_in` and `txt_in` and none of `vector_in`,
`guidance_in` (Flux.1), SwiGLU MLPs or `txt_norm` (Ovis-Image), Chroma's approximator or FLUX.2's
global modulation (ComfyUI's model_detection: a Flux without `vector_in` whose `txt_in` takes
3584; the width is read here, so reduced test files load).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux.latent_format import FluxLatentFormat, flux_latent_format
from comfy_core.families.flux.longcat_clip import LONGCAT_TEXT_ENCODERS
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.model_conditions import FluxConditions
from comfy_core.models.model_config import BASE

MARKER = "double_blocks.0.img_attn.qkv.weight"


class LongCatImageConditions(FluxConditions):
    """ComfyUI's `model_base.LongCatImage`: Flux's conditions without the pooled `y` (`encode_adm`
    None) and without `guidance`; the edit's reference latents as Flux's."""

    name = "longcat_image"

    def encode_adm(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        return None

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        out.pop("guidance", None)
        return out


@comfyui_name("LongCatImage")
class LongCatImage(BASE):
    """ComfyUI's `supported_models.LongCatImage` (what `model.model.model_config` is for this family):
    Flux's `unet_config` without vector or guidance input, 3584-wide text, text ids on axes 1 and 2;
    no sampling settings (ModelSamplingFlux's shift 1.15)."""

    unet_config = {"image_model": "flux", "guidance_embed": False, "vec_in_dim": None, "context_in_dim": 3584,
                   "txt_ids_dims": [1, 2]}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings: dict[str, Any] = {}
    latent_format = FluxLatentFormat
    memory_usage_factor = 2.5
    supported_inference_dtypes = [torch.bfloat16, torch.float16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.flux.longcat_dit import LongCatImageConfig

    return LongCatImageConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "longcat_image"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.flux.longcat_dit import LongCatImageTransformer

    return LongCatImageTransformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.flux.longcat_dit import LongCatImageConfigError

    return (LongCatImageConfigError,)


DIFFUSERS_TIME = "time_embed.timestep_embedder."  # diffusers' LongCat name; its Flux's is `time_text_embed.`


def is_diffusers_longcat(names: Any) -> bool:
    """Whether the names are diffusers' `LongCatImageTransformer2DModel` (Meituan's release,
    `transformer/diffusion_pytorch_model*.safetensors`): Flux's diffusers names with the time
    embedding under `time_embed.` and no pooled-text embedder."""
    return ("x_embedder.weight" in names and DIFFUSERS_TIME + "linear_1.weight" in names
            and "context_embedder.weight" in names and "time_text_embed.text_embedder.linear_1.weight" not in names)


def from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    """ComfyUI's names from diffusers' (Flux's conversion, `flux/keys.py`, after renaming the time
    embedding to Flux's diffusers name). ComfyUI itself reads only its repackaged files."""
    from comfy_core.families.flux.keys import convert_diffusers_state_dict

    renamed = {("time_text_embed.timestep_embedder." + k[len(DIFFUSERS_TIME):] if k.startswith(DIFFUSERS_TIME)
                else k): v for k, v in state.items()}
    return convert_diffusers_state_dict(renamed)


def longcat_image_architecture() -> Architecture:
    return Architecture(name="longcat_image", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_in_dim,
                        is_diffusers=is_diffusers_longcat, from_diffusers=from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config(),
                        self_attention_hook="attn1_output_patch")


def definition() -> Family:
    return Family(
        name="longcat_image",
        display_name="LongCat-Image",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", "longcat_image"),)),
        latent_format=flux_latent_format(),
        sampling=SamplingPolicy(prediction="flow", schedule="flux", shift=1.15, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=16),
        vae_prefix="vae.",
        conditioning=LongCatImageConditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=longcat_image_architecture(),
        text_encoders=LONGCAT_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp16", "fp32"),  # ComfyUI's supported_models.LongCatImage
        supported_model=LongCatImage,
        comfy_model_class="LongCatImage",
    )


__all__ = ["LongCatImage", "LongCatImageConditions", "definition", "longcat_image_architecture"]

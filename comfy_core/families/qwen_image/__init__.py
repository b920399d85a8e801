"""Qwen-Image and Qwen-Image-Edit (Qwen team 2025): a 20B MMDiT (comfy_core/families/qwen_image/
dit.py: 60 double-stream blocks of 3072 wide, 24 heads of 128, MSRoPE) conditioned on Qwen2.5-VL-7B's
states (3584 wide); the 16-channel latents of its 3-D causal VAE, which is Wan 2.1's VAE
(`comfy_core/models/wan_vae*.py`: same network and names, so VAELoader reads
`qwen_image_vae.safetensors` as Wan 2.1's; diffusers' `AutoencoderKLQwenImage` computes the same),
with Wan 2.1's latent normalisation (per-channel mean / std), 8x down, 2x2 patches.

As today's ComfyUI's `supported_models.QwenImage` / `model_base.QwenImage` have it:

- sampling: model type FLUX (CONST), Flux's exponential shift 1.15, multiplier 1 (the network
  gets sigma); the templates replace it with ModelSamplingAuraFlow (shift 3.1), which our
  `model_sampling_aura_flow` does;
- conditioning: the text states as the context; Edit's `reference_latents` (each brought into
  model space) as `ref_latents`, with `reference_latents_method` as `ref_latents_method`; no
  pooled vector, no guidance, no attention mask;
- Edit-2511 files carry `__index_timestep_zero__`: its references default to the
  "index_timestep_zero" method; Qwen-Image-Layered files (`addition_t_embedding`) sample a 5-D
  latent of `layers + 1` frames (EmptyQwenImageLayeredLatentImage) with the input image as a
  reference on frame -1 ("negative_index"), decoded by its RGBA (4-channel) Wan-2.1-style VAE;
- inference in bf16 or fp32.

Files: ComfyUI's names under `model.diffusion_model.` in single files (the VAE under `vae.`),
bare in split files (`qwen_image_fp8_e4m3fn.safetensors`, `qwen_image_edit_2509_bf16.safetensors`)
and in diffusers' / Qwen's release (`transformer/diffusion_pytorch_model*.safetensors`: the same
names). Detected from names and shapes: `txt_norm.weight` with `transformer_blocks.N.img_mod.1`.
The text encoder is Qwen2.5-VL-7B (comfy_core/text_encoders/qwen25vl.py), its set in `clip.py`:
CLIPLoader type "qwen_image", ComfyUI's chat templates, the system-prompt tokens dropped.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.qwen_image import supported_models
from comfy_core.families.qwen_image.clip import QWEN_IMAGE_TEXT_ENCODERS
from comfy_core.families.wan.latent_format import wan21_latent_format
from comfy_core.models.model_conditions import ReferenceLatentConditions

MARKER = "transformer_blocks.0.img_mod.1.weight"
TXT_NORM = "txt_norm.weight"
QWEN_IMAGE_SHIFT = 1.15  # ComfyUI's supported_models.QwenImage: ModelSamplingFlux


class QwenImageConditions(ReferenceLatentConditions):
    """ComfyUI's `model_base.QwenImage.extra_conds`: Edit's reference latents in model space as
    `ref_latents` (one entry per reference, tiled to the batch by the cond batching), and their
    `ref_latents_method` when the conditioning names one."""

    name = "qwen_image"


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.qwen_image.dit import QwenImageConfig, QwenImageConfigError

    if prefix + TXT_NORM not in tensors:
        raise QwenImageConfigError(f"Qwen-Image: no {prefix}{TXT_NORM}")
    config = QwenImageConfig.detect_from_weights(tensors, prefix)
    if config.in_channels == 128 and config.out_channels * 4 == 128:  # Mage-Flow's patch-1 layout (families/mage)
        raise QwenImageConfigError(f"Qwen-Image: {prefix}img_in / proj_out of 128 channels are Mage-Flow's")
    return config


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "qwen_image"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.qwen_image.dit import QwenImageTransformer

    return (QwenImageTransformer.from_config(config) if operations is None
            else QwenImageTransformer.from_config(config, operations=operations))


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.qwen_image.dit import QwenImageConfigError

    return (QwenImageConfigError,)


def qwen_image_architecture() -> Architecture:
    return Architecture(name="qwen_image", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.joint_attention_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = wan21_latent_format()
    return Family(
        name="qwen_image",
        display_name="Qwen-Image",
        signature=Signature(required_prefixes=("model.diffusion_model." + TXT_NORM,),
                            unet=(("image_model", "qwen_image"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flux", shift=QWEN_IMAGE_SHIFT, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=8),
        vae_prefix="vae.",
        conditioning=QwenImageConditions(),
        architecture=qwen_image_architecture(),
        text_encoders=QWEN_IMAGE_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.QwenImage,
        comfy_model_class="QwenImage",
    )


__all__ = ["QWEN_IMAGE_SHIFT", "QwenImageConditions", "definition", "qwen_image_architecture"]

"""ERNIE-Image (Baidu 2026; ERNIE-Image and ERNIE-Image-Turbo): an 8B single-stream DiT
(comfy_core/families/ernie_image/dit.py: 36 layers of 4096 wide, 32 heads of 128, one shared
modulation, GELU-gated MLP of 12288, 3-axis RoPE) on Flux.2's 128-channel latents in 1x1 patches
(the Flux.2 autoencoder, 16x down), conditioned on Ministral 3 3B's next-to-last hidden states
(`clip.py`, `comfy_core.text_encoders.mistral`).

As today's ComfyUI's `supported_models.ErnieImage` / `model_base.ErnieImage` have it:

- sampling: model type FLOW (CONST), ModelSamplingDiscreteFlow with shift 3 and multiplier 1000
  (the network gets sigma x 1000);
- latents: Flux.2's format (`flux2/latent_format.py`);
- conditioning: the text states as the context (`c_crossattn`), nothing else: no pooled vector, no
  attention mask, no extra input channels;
- text encoders: the Ministral 3 3B set, loaded by CLIPLoader type "flux2" (the templates');
- inference in bf16 or fp32.

Files: ComfyUI's names (which are diffusers' `ErnieImageTransformer2DModel` names) bare in split files
(`ernie-image.safetensors`, `ernie-image-turbo.safetensors`), under `model.diffusion_model.` in
single files. Detected from `layers.0.adaLN_sa_ln.weight` (the marker stable-diffusion.cpp and
ComfyUI's tooling use); widths, depth, MLP width, channels, patch and text widths from the shapes,
heads of 128 as ComfyUI's. LoRA spellings: `keys.py`.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.ernie_image import supported_models
from comfy_core.families.ernie_image.clip import ERNIE_TEXT_ENCODERS
from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.models.model_conditions import ModelConditions

MARKER = "layers.0.adaLN_sa_ln.weight"


class ErnieImageConditions(ModelConditions):
    """ComfyUI's `model_base.ErnieImage.extra_conds`: the context alone (its attention mask is not
    passed on: the network attends to every text state)."""

    name = "ernie_image"


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.ernie_image.dit import ErnieImageConfig

    return ErnieImageConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "ernie"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.ernie_image.dit import ErnieImageTransformer

    return ErnieImageTransformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.ernie_image.dit import ErnieImageConfigError

    return (ErnieImageConfigError,)


def ernie_image_architecture() -> Architecture:
    return Architecture(name="ernie_image", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.text_in_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = Flux2LatentFormat()
    return Family(
        name="ernie_image",
        display_name="ERNIE-Image",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", "ernie"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=supported_models.ERNIE_SHIFT,
                                multiplier=supported_models.ERNIE_MULTIPLIER, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=16),
        vae_prefix="vae.",
        conditioning=ErnieImageConditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=ernie_image_architecture(),
        text_encoders=ERNIE_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.ErnieImage,
        comfy_model_class="ErnieImage",
    )


__all__ = ["ErnieImageConditions", "MARKER", "definition", "ernie_image_architecture"]

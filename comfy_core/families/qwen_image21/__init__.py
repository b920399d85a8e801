"""Qwen-Image 2.1 (Qwen team 2026): a 32-block single-stream DiT (4096 wide, 32 heads of 128,
SwiGLU 3x, one shared modulation; comfy_core/families/qwen_image21/dit.py) over the 64-channel
latents of its own VAE (16x down, RGBA; the Wan 2.2 layout with one-frame kernels,
`comfy_core.models.wan_image_vae`), conditioned on Qwen3-VL-8B's states (4096 wide) with the
reference images' latents spliced into the text where the encoder saw them (`image_slots`), and a
prefix key/value cache over sampling steps (prefix_cache.py; QwenImage21Cache's setting).

A family of its own, as in today's ComfyUI (`supported_models.QwenImage21`, `image_model`
"qwen_image21", `model_base.QwenImage21` over `model_base.QwenImage`), not a Qwen-Image variant:
another network, latent and text encoder.

- sampling: model type FLUX (Flux's exponential time shift) at shift 0.69, multiplier 1 (the
  network gets sigma);
- conditioning: Qwen-Image's (`reference_latents` brought into model space as `ref_latents`, their
  method), plus `image_slots` (TextEncodeQwenImage21's text positions of the references);
- files: ComfyUI's names under `model.diffusion_model.` in single files, bare in split files
  (`qwen_image_2.1_bf16.safetensors`, `*_int8_convrot`), diffusers' `transformer/` release the same
  names with the SwiGLU unfused; detected from `txt_in.text_norm.weight` (the zero-centred text norm
  no other DiT has) with `transformer_blocks.N.img_mlp`;
- the text encoder: Qwen3-VL-8B (`qwen3vl_8b`, CLIPLoader type "qwen_image" given a Qwen3-VL file), its
  set in `clip.py`.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.qwen_image import QwenImageConditions
from comfy_core.families.qwen_image21 import supported_models
from comfy_core.families.qwen_image21.clip import QWEN_IMAGE21_TEXT_ENCODERS
from comfy_core.families.qwen_image21.latent_format import QwenImage21LatentFormat

MARKER = "txt_in.text_norm.weight"
IMAGE_MODEL = "qwen_image21"


class QwenImage21Conditions(QwenImageConditions):
    """ComfyUI's `model_base.QwenImage21.extra_conds`: Qwen-Image's (`ref_latents` in model space and
    their method) and the references' text positions `image_slots`."""

    name = "qwen_image21"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        slots = kwargs.get("image_slots")
        if slots is not None:
            out["image_slots"] = [int(s) for s in slots]
        return out


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.qwen_image21.dit import QwenImage21Config

    return QwenImage21Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = IMAGE_MODEL
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.qwen_image21.dit import QwenImage21Transformer

    return (QwenImage21Transformer.from_config(config) if operations is None
            else QwenImage21Transformer.from_config(config, operations=operations))


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.qwen_image21.dit import QwenImage21ConfigError

    return (QwenImage21ConfigError,)


def qwen_image21_architecture() -> Architecture:
    return Architecture(name=IMAGE_MODEL, markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_in_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = QwenImage21LatentFormat()
    return Family(
        name="qwen_image21",
        display_name="Qwen-Image 2.1",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", IMAGE_MODEL),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flux", shift=supported_models.QWEN_IMAGE21_SHIFT,
                                multiplier=1.0, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=16),
        vae_prefix="vae.",
        conditioning=QwenImage21Conditions(),
        architecture=qwen_image21_architecture(),
        text_encoders=QWEN_IMAGE21_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.QwenImage21,
        comfy_model_class="QwenImage21",
    )


__all__ = ["QwenImage21Conditions", "definition", "qwen_image21_architecture"]

"""Boogu-Image 0.1 (t2i, Turbo, Edit; Boogu 2026): an OmniGen2-derived DiT with a dual-stream stage
(`dit.py`: 3360 wide, 28 query heads of 120 sharing 7 key/value heads, 8 double-stream and 32
single-stream layers, 2 refiner blocks per stream), conditioned on Qwen3-VL 8B's final normed
states (4096 wide, `clip.py`); Flux.1's 16-channel latents (scale 0.3611, shift 0.1159) and
autoencoder (the templates' `ae.safetensors`), 2x2 patches.

As today's ComfyUI's `supported_models.Boogu` / `model_base.Boogu` (subclasses of its Omnigen2) have it:

- sampling: model type FLOW (CONST), ModelSamplingDiscreteFlow with shift 3.16 and multiplier 1
  (the network gets sigma);
- conditioning: OmniGen2's (`OmniGen2Conditions`): the text states as the context, `num_tokens`
  and the mask when it masks anything, the `reference_latents` (TextEncodeBooguEdit's) in model
  space as `ref_latents`;
- text encoders: the Qwen3-VL 8B set, loaded by CLIPLoader type "boogu";
- what the weights cannot show (as OmniGen2): RoPE base 10000 over (index, row, col) with a third
  of the head each, timestep scale 1000, 2x2 patches; widths, heads, depths are read from the
  weights, so tiny files load.

Files: ComfyUI's names under `model.diffusion_model.` in single files (the Qwen3-VL tower under
`text_encoders.qwen3vl_8b.transformer.`, the VAE under `vae.`), bare in split files
(`boogu_image_*_fp8_scaled.safetensors`, `boogu_image_edit_int8_convrot.safetensors`: per-layer
float8 / int8 ConvRot weights as `weights/quant_registry.py` reads them). Detected from names and
shapes: the dual-stream marker `double_stream_layers.0.img_instruct_attn.processor.img_to_q.weight`
(OmniGen2's detection needs its `layers.*`, which Boogu lacks).
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.boogu import supported_models
from comfy_core.families.boogu.clip import BOOGU_TEXT_ENCODERS
from comfy_core.families.flux.latent_format import flux_latent_format
from comfy_core.families.omnigen2 import OmniGen2Conditions

MARKER = "double_stream_layers.0.img_instruct_attn.processor.img_to_q.weight"


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.boogu.dit import BooguConfig

    return BooguConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "boogu"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.boogu.dit import BooguTransformer

    return BooguTransformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.boogu.dit import BooguConfigError

    return (BooguConfigError,)


def boogu_architecture() -> Architecture:
    return Architecture(name="boogu", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.text_feat_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    return Family(
        name="boogu",
        display_name="Boogu-Image",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", "boogu"),)),
        latent_format=flux_latent_format(),
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=supported_models.BOOGU_SHIFT,
                                multiplier=supported_models.BOOGU_MULTIPLIER, default_scheduler="simple"),
        geometry=Geometry(latent_channels=16),
        vae_prefix="vae.",
        conditioning=OmniGen2Conditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=boogu_architecture(),
        text_encoders=BOOGU_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),  # ComfyUI adds fp16 where the device has extended fp16 support
        supported_model=supported_models.Boogu,
        comfy_model_class="Boogu",
    )


__all__ = ["MARKER", "boogu_architecture", "definition"]

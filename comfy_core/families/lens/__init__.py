"""Lens (Microsoft 2026; Lens and the distilled Lens-Turbo): a 3.8 B dual-stream MMDiT (`dit.py`:
1536 wide, 24 heads of 64, 48 blocks, joint attention over `[image, text]`, SwiGLU, 3-axis RoPE)
on Flux.2's 128-channel latents (the Flux.2 VAE, 16x down), conditioned on four tapped layers of
GPT-OSS 20B (`clip.py`, the tower `comfy_core/text_encoders/gpt_oss.py`).

As today's ComfyUI's `supported_models.Lens` / `model_base.Lens` have it:

- sampling: model type FLUX, ModelSamplingFlux with shift 1.829 (the network gets sigma; its
  sinusoid scales it by 1000), multiplier 1; the templates: ModelSamplingFlux (max 1.15, base 0.5)
  on the latent's size, CFGNorm, SamplerCustom euler / simple, 20 steps cfg 5 (Lens) or 4 steps cfg 1
  (Lens-Turbo);
- latents: Flux.2's format (`flux2/latent_format.py`);
- conditioning: the tapped text states as the context (`c_crossattn`), the token mask as
  `attention_mask` (the network masks those text keys); no pooled output;
- text encoder: GPT-OSS 20B, loaded whole from its file by CLIPLoader type "lens";
- inference in bf16 or fp32 (fp16 gives NaNs).

Files: ComfyUI's names, bare in split files (`lens_bf16.safetensors`, `lens_turbo_bf16.safetensors`),
under `model.diffusion_model.` in single files. Detected from `transformer_blocks.0.attn.img_qkv.
weight` (the per-stream fused q / k / v no other network has); widths, heads (the q-norm width),
depth, MLP, channels, taps and text width from the shapes.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.families.lens import supported_models
from comfy_core.models.model_conditions import ModelConditions

MARKER = "transformer_blocks.0.attn.img_qkv.weight"


class LensConditions(ModelConditions):
    """ComfyUI's `model_base.Lens.extra_conds`: the token mask as `attention_mask` (the context is
    every model's `c_crossattn`); no ADM."""

    name = "lens"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        mask = kwargs.get("attention_mask")
        return {} if mask is None else {"attention_mask": mask}


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.lens.dit import LensConfig

    return LensConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "lens"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.lens.dit import LensTransformer

    return LensTransformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.lens.dit import LensConfigError

    return (LensConfigError,)


def lens_architecture() -> Architecture:
    return Architecture(name="lens", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_width,
                        comfy_config=lambda config: config.comfy_unet_config())


def text_encoders() -> Any:
    """GPT-OSS's set, loaded whole from its file by CLIPLoader type "lens" (`clip.py`)."""
    import dataclasses

    from comfy_core.families.lens.clip import LENS_TEXT_ENCODERS, holds_gpt_oss, load_lens_text_encoder

    return dataclasses.replace(LENS_TEXT_ENCODERS, whole_files=((holds_gpt_oss, load_lens_text_encoder),))


def definition() -> Family:
    latent = Flux2LatentFormat()
    return Family(
        name="lens",
        display_name="Lens",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", "lens"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flux", shift=supported_models.LENS_SHIFT,
                                multiplier=supported_models.LENS_MULTIPLIER, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=16),
        vae_prefix="vae.",
        conditioning=LensConditions(),
        architecture=lens_architecture(),
        text_encoders=text_encoders(),
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.LensModelConfig,
        comfy_model_class="Lens",
    )


__all__ = ["LensConditions", "MARKER", "definition", "lens_architecture"]

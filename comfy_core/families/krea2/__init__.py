"""Krea 2 (Krea 2026; Raw and the distilled Turbo): a 28-block single-stream DiT (`dit.py`: 6144
wide, 48 query / 12 key-value heads of 128, sigmoid-gated attention, SwiGLU, shared adaLN with
per-block offsets, 3-axis RoPE base 1000) over `[text, image]` on Wan 2.1's 16-channel latents in 2x2
patches (the Qwen-Image VAE, 8x down), conditioned on 12 tapped layers of Qwen3-VL 4B fused inside
the network (`clip.py`, the `txtfusion` adapter).

As today's ComfyUI's `supported_models.Krea2` / `model_base.Krea2` have it:

- sampling: model type FLUX, ModelSamplingFlux with shift 1.15 (the network gets sigma; its
  sinusoid scales it by 1000), multiplier 1; the templates: 8 steps euler / simple, cfg 1;
- latents: Wan 2.1's format (`wan/latent_format.py`);
- conditioning: the tapped text states as the context (`c_crossattn`), reference latents (in the
  model's latent space) as `ref_latents` with `reference_latents_method` as `ref_latents_method`
  (the style-reference template: TextEncodeQwenImageEditPlus + FluxKontextMultiReferenceLatentMethod
  "index_timestep_zero"), the token mask as `attention_mask` (the network reads none of it);
- text encoders: Qwen3-VL 4B, loaded by CLIPLoader type "krea2";
- inference in bf16, fp16 or fp32.

Files: ComfyUI's names, bare in split files (`krea2_turbo_fp8_scaled.safetensors`, float8 with
per-layer scales; `krea2_turbo_int8_convrot.safetensors`, int8 ConvRot: both kept as stored by the
generic quantised loading, comfy_core/weights/quant_registry.py), under `model.diffusion_model.` in
single files; diffusers' layout converted (`keys.py`). Detected from `txtfusion.projector.weight`
(ComfyUI's marker); widths, heads (the q-norm width), depth, MLP, text width and taps from the shapes.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.krea2 import supported_models
from comfy_core.families.krea2.clip import KREA2_TEXT_ENCODERS
from comfy_core.families.wan.latent_format import wan21_latent_format
from comfy_core.models.model_conditions import ReferenceLatentConditions

MARKER = "txtfusion.projector.weight"  # ComfyUI's detection key


class Krea2Conditions(ReferenceLatentConditions):
    """ComfyUI's `model_base.Krea2.extra_conds`: reference latents (processed into the model's
    space) with their method, and the token mask (the context is every model's `c_crossattn`)."""

    name = "krea2"
    pass_mask = True


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.krea2.dit import Krea2Config

    return Krea2Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "krea2"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.krea2.dit import Krea2Transformer

    return Krea2Transformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.krea2.dit import Krea2ConfigError

    return (Krea2ConfigError,)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.krea2.keys import is_diffusers

    return is_diffusers(names)


def _from_diffusers(tensors: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.krea2.keys import from_diffusers

    return from_diffusers(tensors)


def krea2_architecture() -> Architecture:
    return Architecture(name="krea2", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_width,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = wan21_latent_format()
    return Family(
        name="krea2",
        display_name="Krea 2",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", "krea2"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flux", shift=supported_models.KREA2_SHIFT,
                                multiplier=supported_models.KREA2_MULTIPLIER, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=8),
        vae_prefix="vae.",
        conditioning=Krea2Conditions(),
        architecture=krea2_architecture(),
        text_encoders=KREA2_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp16", "fp32"),
        supported_model=supported_models.Krea2,
        comfy_model_class="Krea2",
    )


__all__ = ["Krea2Conditions", "MARKER", "definition", "krea2_architecture"]

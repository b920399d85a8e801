"""Ideogram 4 (Ideogram 2026, the open-weights release): a 34-layer single-stream DiT
(`dit.py`: 18 heads of 256, SwiGLU 12288, tanh-gated adaLN from a 512-wide time vector, 3-axis
interleaved M-RoPE) over `[text, image]` on Flux.2's 128-channel latents (the Flux.2 autoencoder,
16x down), conditioned on 13 tapped layers of Qwen3-VL 8B (`clip.py`). It ships as two networks of
one layout, the conditional `ideogram4_*` and the unconditional `ideogram4_unconditional_*` file,
which ComfyUI's template joins with DualModelGuider (the negative pass on the unconditional one) and
CFGOverride, on Ideogram4Scheduler's logit-normal sigmas (`nodes/ideogram4_nodes.py`).

As today's ComfyUI's `supported_models.Ideogram4` / `model_base.Ideogram4` have it:

- sampling: model type FLOW (CONST), ModelSamplingDiscreteFlow with shift 1 and multiplier 1 (the
  network gets sigma and runs on `1 - sigma`);
- latents: Flux.2's format (`flux2/latent_format.py`);
- conditioning: the text features as the context (`c_crossattn`) and the token mask
  (`attention_mask`) when it masks something; no pooled vector, no extra channels;
- text encoders: Qwen3-VL 8B, loaded by CLIPLoader type "ideogram4";
- inference in bf16 or fp32.

Files: ComfyUI's names, bare in split files (`ideogram4_fp8_scaled.safetensors`, float8 with
per-layer scales; `ideogram4_int8_convrot.safetensors`, int8 ConvRot: both kept as stored by the
generic quantised loading, comfy_core/weights/quant_registry.py), under `model.diffusion_model.` in
single files; diffusers' layout converted (`keys.py`). Detected from `embed_image_indicator.weight`
(ComfyUI's marker); widths, heads (the q-norm width), depth, MLP, adaLN and text widths from the
shapes.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.families.ideogram4 import supported_models
from comfy_core.families.ideogram4.clip import IDEOGRAM4_TEXT_ENCODERS
from comfy_core.models.model_conditions import ModelConditions

MARKER = "embed_image_indicator.weight"  # ComfyUI's detection key (diffusers' layout has it too)
COMFY_MARKER = "layers.0.attention.o.weight"  # ComfyUI's layout only (diffusers: attention.to_out.0)


class Ideogram4Conditions(ModelConditions):
    """ComfyUI's `model_base.Ideogram4.extra_conds`: the token mask when it masks any token (the
    context itself is every model's `c_crossattn`)."""

    name = "ideogram4"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        mask = kwargs.get("attention_mask")
        if mask is not None and int(mask.sum().item()) != mask.numel():
            return {"attention_mask": mask}
        return {}


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.ideogram4.dit import Ideogram4Config

    return Ideogram4Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "ideogram4"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.ideogram4.dit import Ideogram4Transformer

    return Ideogram4Transformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.ideogram4.dit import Ideogram4ConfigError

    return (Ideogram4ConfigError,)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.ideogram4.keys import is_diffusers

    return is_diffusers(names)


def _from_diffusers(tensors: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.ideogram4.keys import from_diffusers

    return from_diffusers(tensors)


def ideogram4_architecture() -> Architecture:
    return Architecture(name="ideogram4", markers=(COMFY_MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.llm_features_dim,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = Flux2LatentFormat()
    return Family(
        name="ideogram4",
        display_name="Ideogram 4",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", "ideogram4"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=supported_models.IDEOGRAM4_SHIFT,
                                multiplier=supported_models.IDEOGRAM4_MULTIPLIER, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=16),
        vae_prefix="vae.",
        conditioning=Ideogram4Conditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=ideogram4_architecture(),
        text_encoders=IDEOGRAM4_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.Ideogram4,
        comfy_model_class="Ideogram4",
    )


__all__ = ["COMFY_MARKER", "Ideogram4Conditions", "MARKER", "definition", "ideogram4_architecture"]

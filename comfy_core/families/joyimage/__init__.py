"""JoyImage Edit (JD's JoyAI-Image-Edit, 2026): a 40-block double-stream DiT (`dit.py`: 4096 wide, 32
heads of 128, per-stream learned modulation tables over one shared time vector, joint attention over
`[image, text]` with 3-axis RoPE on the image only) on Wan 2.1's 16-channel latents in 1x2x2 patches
(the Wan 2.1 VAE, 8x down), conditioned on the last Qwen3-VL 8B block's states (`clip.py`), the
reference images both seen by the text encoder's vision tower and given as reference latents.

As today's ComfyUI's `supported_models.JoyImage` / `model_base.JoyImage` have it:

- sampling: model type FLOW (CONST), ModelSamplingDiscreteFlow with shift 1.5 and multiplier 1000
  (the network gets sigma x 1000); the template: 40 steps euler / normal, cfg 4 behind CFGNorm;
- latents: Wan 2.1's format (`wan/latent_format.py`), three latent dimensions (an image latent is
  one frame);
- conditioning: the text states as the context (`c_crossattn`), `reference_latents` (in the model's
  latent space) as `ref_latents`, each its own RoPE frame after the image; the token mask is not passed;
- text encoders: Qwen3-VL 8B, loaded by CLIPLoader type "joyimage";
- inference in bf16 or fp32.

Files: ComfyUI's names (diffusers' `JoyImageEditPlusTransformer3DModel` names too), bare in split
files (`joyai_image_edit_bf16.safetensors`; `joyai_image_edit_int8_convrot.safetensors`, int8 ConvRot
kept as stored by the generic quantised loading, comfy_core/weights/quant_registry.py), under
`model.diffusion_model.` in single files. Detected as ComfyUI detects it: the q-norm
`double_blocks.0.attn.img_attn_q_norm.weight` with the time embedder
`condition_embedder.time_embedder.linear_1.weight`; width, channels, patch, heads (the q-norm width),
depth, MLP and text widths from the shapes.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.joyimage import supported_models
from comfy_core.families.joyimage.clip import JOYIMAGE_TEXT_ENCODERS
from comfy_core.families.wan.latent_format import wan21_latent_format
from comfy_core.models.model_conditions import ReferenceLatentConditions

MARKER = "double_blocks.0.attn.img_attn_q_norm.weight"  # ComfyUI's detection keys
TIME_MARKER = "condition_embedder.time_embedder.linear_1.weight"
PREFIX = "model.diffusion_model."


class JoyImageConditions(ReferenceLatentConditions):
    """ComfyUI's `model_base.JoyImage.extra_conds`: the reference latents processed into the model's
    space (the context is every model's `c_crossattn`; no mask, no reference method)."""

    name = "joyimage"
    pass_method = False


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.joyimage.dit import JoyImageConfig, JoyImageConfigError

    if prefix + TIME_MARKER not in tensors:
        raise JoyImageConfigError(f"JoyImage: {prefix + TIME_MARKER!r} is missing")
    return JoyImageConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "joyimage"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.joyimage.dit import JoyImageTransformer

    return JoyImageTransformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.joyimage.dit import JoyImageConfigError

    return (JoyImageConfigError,)


def joyimage_architecture() -> Architecture:
    return Architecture(name="joyimage", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.text_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = wan21_latent_format()
    return Family(
        name="joyimage",
        display_name="JoyImage Edit",
        signature=Signature(required_prefixes=(PREFIX + MARKER, PREFIX + TIME_MARKER),
                            unet=(("image_model", "joyimage"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=supported_models.JOYIMAGE_SHIFT,
                                multiplier=supported_models.JOYIMAGE_MULTIPLIER, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=8),
        vae_prefix="vae.",
        conditioning=JoyImageConditions(),
        architecture=joyimage_architecture(),
        text_encoders=JOYIMAGE_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.JoyImage,
        comfy_model_class="JoyImage",
    )


__all__ = ["JoyImageConditions", "MARKER", "TIME_MARKER", "definition", "joyimage_architecture"]

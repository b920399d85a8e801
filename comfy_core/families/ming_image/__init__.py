"""Ming-Image (inclusionAI Ming-Image 0.1 Design): Z-Image's 6B NextDiT without learned pad tokens
(`dit.py`: a direct-context caption extension, a frame axis, reference frames), conditioned by a
Bailing MoE V2 "Ling mini 2.0" thinker with a Qwen2.5-VL vision tower and a Qwen2 connector
(`encoder.py`, `clip.py`); the 16-channel video latents of a Wan 2.1-style RGBA VAE scaled by
8.0064 (`latent_format.py`), 2x2 patches.

As today's ComfyUI has it (`supported_models.MingImage`, a `ZImage`; `model_detection`'s 3840-wide
NextDiT entry; `sd.py`'s MING_IMAGE text encoder):

- detection: a NextDiT with Z-Image's modulation (`layers.N.adaLN_modulation.0`) and no
  `cap_pad_token` (ComfyUI: `image_model` "ming_image", `masked_pad_multiple` 32); a file saved with
  ComfyUI's `__ming_image__` marker or the `config` metadata `{"transformer": {"image_model":
  "ming_image"}}` too (pad tokens in such a file are refused: Ming-Image-Layer is not here);
  widths, depths, heads from the weights as for Z-Image;
- sampling: flow (CONST), shift 3.16, multiplier 1 (the template sets ModelSamplingFlux);
- conditioning: the connector's caption states as the context, `num_tokens` as Z-Image, the text
  encoder's `direct_context` passed on, and the conditioning's `reference_latents` (in model space)
  as `ref_frames` (clean frames after the target);
- text encoder: one file, any CLIPLoader type (the template's "qwen_image"), loaded whole
  (`EncoderSetSpec.whole_files`: ComfyUI's `thinker.layers.1.mlp.image_gate.proj.weight` test).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.ming_image import supported_models
from comfy_core.families.ming_image.latent_format import MingImage
from comfy_core.families.zimage import (CAP_EMBEDDER, COMFY_MARKER, ZIMAGE_AXES_LENS, ZIMAGE_PAD_MULTIPLE,
                                        ZIMAGE_ROPE_THETA, ZIMAGE_TIME_SCALE, NextDiTConditions, nextdit_errors,
                                        zimage_axes)

MING_MARKER = "__ming_image__"  # ComfyUI's NextDiT registers this empty buffer for image_model "ming_image"
# (comfy_core.families.ming_image.dit.MING_MARKER, repeated here so detection imports no torch module)


class MingConditions(NextDiTConditions):
    """Z-Image's inputs plus the text encoder's `direct_context` and the edit's reference latents
    (in model space) as `ref_frames` (what ComfyUI's MingImage NextDiT reads)."""

    name = "ming_image"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        direct = kwargs.get("direct_context")
        if direct is not None:
            out["direct_context"] = direct
        references = kwargs.get("reference_latents")
        if references is not None:
            out["ref_frames"] = [model.process_latent_in(latent) for latent in references]
        return out


def _metadata_says_ming(metadata: Mapping[str, str] | None) -> bool:
    try:
        config = json.loads((metadata or {}).get("config", "{}"))
        return config.get("transformer", {}).get("image_model") == "ming_image"
    except (ValueError, AttributeError):
        return False


def _detect(tensors: Mapping[str, Any], prefix: str, metadata: Mapping[str, str] | None = None) -> Any:
    from comfy_core.families.ming_image.dit import MingDiTConfig
    from comfy_core.families.zimage.nextdit import NextDiTConfig, NextDiTConfigError

    if any(k.startswith(prefix + "dec_net.") for k in tensors):
        raise NextDiTConfigError("Ming-Image: a pixel-space NextDiT (dec_net)")
    # Z-Image's NextDiT with what its weights cannot show (ComfyUI's 3840-wide entry: RoPE 32 / 48 / 48, ...)
    config = NextDiTConfig.detect_from_weights(tensors, prefix, axes_split=zimage_axes, axes_lens=ZIMAGE_AXES_LENS,
                                               rope_theta=ZIMAGE_ROPE_THETA, time_scale=ZIMAGE_TIME_SCALE,
                                               pad_multiple=ZIMAGE_PAD_MULTIPLE)
    if config.pad_tokens_multiple is not None and (prefix + MING_MARKER in tensors or _metadata_says_ming(metadata)):
        raise NextDiTConfigError("Ming-Image: learned pad tokens in a Ming-Image file (Ming-Image-Layer) are not "
                                 "supported here")
    return MingDiTConfig.from_nextdit(config, marker=prefix + MING_MARKER in tensors)


def _facts(config: Any) -> dict[str, Any]:
    facts = dataclasses.asdict(config)
    facts["image_model"] = "ming_image"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.ming_image.dit import MingNextDiT
    from comfy_core.families.zimage.keys import lora_key_map

    return MingNextDiT(config, operations=operations, lora_keys=lora_key_map)


def ming_architecture() -> Architecture:
    return Architecture(name="ming_image", markers=(COMFY_MARKER,), detect=lambda t, p: _detect(t, p), facts=_facts,
                        build=_build, errors=nextdit_errors(), context_width=lambda config: config.cap_feat_dim,
                        comfy_config=lambda config: config.comfy_unet_config(),
                        detect_with_metadata=_detect)


def text_encoders() -> Any:
    """Ming-Image's encoder set, loaded whole from its file by CLIPLoader of any type (`clip.py`)."""
    from comfy_core.families.ming_image.clip import MING_TEXT_ENCODERS, holds_ming_encoder, load_ming_text_encoder

    return dataclasses.replace(MING_TEXT_ENCODERS, whole_files=((holds_ming_encoder, load_ming_text_encoder),))


def definition() -> Family:
    latent = MingImage()
    return Family(
        name="ming_image",
        display_name="Ming-Image",
        signature=Signature(required_prefixes=("model.diffusion_model." + CAP_EMBEDDER,),
                            unet=(("image_model", "ming_image"),),
                            diffusion_model=(("masked_pad_multiple", 32),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=supported_models.MING_SHIFT, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=8),
        vae_prefix="vae.",
        conditioning=MingConditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=ming_architecture(),
        text_encoders=text_encoders(),
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.MingImage,
        comfy_model_class="MingImage",
    )


__all__ = ["MING_MARKER", "MingConditions", "definition", "ming_architecture"]

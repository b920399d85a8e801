"""HiDream-O1-Image (HiDream.ai 2026, full and dev): a Qwen3-VL-8B turned into a pixel-space
flow model (`dit.py`): prompt tokens, the timestep on one token, the noisy image's 32x32 RGB
patches and reference images (32x32 patches plus the Qwen3-VL vision tower's tokens) in one
sequence; the model inputs built from the prompt's ids and the image size in `conditioning.py`.

As today's ComfyUI's `supported_models.HiDreamO1` / `model_base.HiDreamO1` have it:

- sampling: model type FLOW (CONST), ModelSamplingDiscreteFlow with shift 3 and multiplier 1000;
  the templates set the release's noise scale with ModelNoiseScale (full 8, dev 7.6);
- latents: the image itself (`HiDreamO1Pixel`: 3 channels in -1..1, factor 1), ComfyUI's
  pixel-space VAE;
- conditioning: the prompt's token ids (`text_input_ids`: the text encoder only tokenizes, in
  Qwen's chat template ending `<|boi|><|tms|>`, `clip.py`) and reference images
  (`reference_latents`, HiDreamO1ReferenceImages) made into the network's inputs
  (`HiDreamO1Conditions`);
- inference in bf16 or fp32.

Files: ComfyUI's single checkpoints (`hidream_o1_image_bf16`, `_fp8_scaled`, `_mxfp8`, `_dev_*`) hold
the network under `model.diffusion_model.` (ComfyUI's `language_model.*`, `visual.*`,
`t_embedder1.*`, `x_embedder.*`, `final_layer2.*`; the vision tower's DeepStack mergers stored but
unused) and nothing for the VAE or the text encoder. Detected from `t_embedder1.mlp.0.weight` with
`x_embedder.proj1.weight` (ComfyUI's keys); widths, depth, heads, MLP, vocabulary and the vision
tower from the shapes. Quantised layers load as every family's (comfy_core/weights/quant_registry.py).
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import BuiltinParts, Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.hidream_o1 import supported_models
from comfy_core.families.hidream_o1.conditioning import HiDreamO1Conditions
from comfy_core.families.hidream_o1.latent_format import HiDreamO1PixelLatentFormat

MARKER = "t_embedder1.mlp.0.weight"
PATCH_MARKER = "x_embedder.proj1.weight"
LANGUAGE_MARKER = "language_model.embed_tokens.weight"


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.hidream_o1.dit import HiDreamO1Config

    return HiDreamO1Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    return {"image_model": "hidream_o1", "hidden_size": config.hidden_size, "num_layers": config.num_layers,
            "patch_size": config.patch_size, "has_vision": config.vision is not None}


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.hidream_o1.dit import HiDreamO1Transformer

    return HiDreamO1Transformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.hidream_o1.dit import HiDreamO1ConfigError

    return (HiDreamO1ConfigError,)


def _pixel_space_vae() -> Any:
    from comfy_core.models.pixel_space_vae import PixelSpaceVAE

    return PixelSpaceVAE().eval()


def _clip(load_device: Any, offload_device: Any) -> Any:
    from comfy_core.families.hidream_o1.clip import tokenizer_only_clip

    return tokenizer_only_clip(load_device, offload_device)


def hidream_o1_architecture() -> Architecture:
    return Architecture(name="hidream_o1", markers=(PATCH_MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = HiDreamO1PixelLatentFormat()
    prefix = "model.diffusion_model."
    return Family(
        name="hidream_o1",
        display_name="HiDream-O1",
        signature=Signature(required_prefixes=(prefix + MARKER, prefix + PATCH_MARKER, prefix + LANGUAGE_MARKER),
                            unet=(("image_model", "hidream_o1"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=supported_models.HIDREAM_O1_SHIFT,
                                multiplier=supported_models.HIDREAM_O1_MULTIPLIER, default_scheduler="normal"),
        geometry=Geometry(latent_channels=3, downscale=1),
        conditioning=HiDreamO1Conditions(),
        architecture=hidream_o1_architecture(),
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.HiDreamO1,
        comfy_model_class="HiDreamO1",
        builtin_parts=BuiltinParts(vae=_pixel_space_vae, clip=_clip),
    )


__all__ = ["HiDreamO1Conditions", "LANGUAGE_MARKER", "MARKER", "PATCH_MARKER", "definition",
           "hidream_o1_architecture"]

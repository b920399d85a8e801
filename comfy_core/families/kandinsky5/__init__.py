"""Kandinsky 5 (Kandinsky Lab, 2025): the Lite / Pro video models (text-to-video, image-to-video) and
the Lite text-to-image model, one rectified-flow diffusion transformer (dit.py) conditioned on
Qwen2.5-VL-7B's states and CLIP-L's pooled vector (clip.py).

As today's ComfyUI's `supported_models.Kandinsky5` / `Kandinsky5Image` and `model_base.Kandinsky5*`
have it (supported_models.py, conditions.py):

- sampling: model type FLOW (SD3's shift, multiplier 1000), shift 10 (the image model: 3); the
  templates set ModelSamplingSD3 5 (video) / 3 (image);
- latents: video models in HunyuanVideo 1.0's format (16 channels, 8x / 4x, scale 0.476986;
  latent_format.py; the VAE: comfy_core/models/hunyuan_video_vae.py), the image model in Flux.1's;
- conditioning: `y` = CLIP-L's pooled vector; the video models read the latent plus a zero image
  latent and a mask channel (33 channels), image-to-video's start latent as `time_dim_replace`;
- inference in bf16 or fp32.

Files: the released names (`kandinsky5lite_t2v_sft_5s.safetensors`, `kandinsky5lite_i2v_5s`,
`kandinsky5lite_t2i`: ComfyUI's and diffusers' names are the same) under `model.diffusion_model.` in
single files, bare in split files. Detected from `visual_transformer_blocks.0.cross_attention.key_norm`
(ComfyUI's marker); the image model (`image.py`) reads as many channels as it writes (no
conditioning channels: ComfyUI's `visual_embed_dim` 64; ComfyUI also asks for its 2560 width, which the
released files have and tiny test files need not).
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.kandinsky5 import supported_models
from comfy_core.families.kandinsky5.clip import KANDINSKY5_IMAGE_TEXT_ENCODERS, KANDINSKY5_TEXT_ENCODERS
from comfy_core.families.kandinsky5.conditions import Kandinsky5Conditions

MARKER = "visual_transformer_blocks.0.cross_attention.key_norm.weight"


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.kandinsky5.dit import Kandinsky5Config

    return Kandinsky5Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "kandinsky5"
    facts["kandinsky5_image"] = config.image_model
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.kandinsky5.dit import Kandinsky5Transformer

    return Kandinsky5Transformer.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.kandinsky5.dit import Kandinsky5ConfigError

    return (Kandinsky5ConfigError,)


def kandinsky5_architecture() -> Architecture:
    return Architecture(name="kandinsky5", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.in_text_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


def kandinsky5_family(name: str, display_name: str, image: bool) -> Family:
    config_class = supported_models.Kandinsky5Image if image else supported_models.Kandinsky5
    latent = config_class.latent_format()
    return Family(
        name=name,
        display_name=display_name,
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", "kandinsky5"), ("kandinsky5_image", image)),
                            diffusion_model=(("kandinsky5_image", image),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=config_class.sampling_settings["shift"],
                                multiplier=1000.0, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=8),
        vae_prefix="vae.",
        conditioning=Kandinsky5Conditions(image=image),
        architecture=kandinsky5_architecture(),
        text_encoders=KANDINSKY5_IMAGE_TEXT_ENCODERS if image else KANDINSKY5_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=config_class,
        comfy_model_class="Kandinsky5Image" if image else "Kandinsky5",
    )


def definition() -> Family:
    """The video models (t2v, i2v): 33 input channels per latent pixel."""
    return kandinsky5_family("kandinsky5", "Kandinsky 5", image=False)


__all__ = ["MARKER", "definition", "kandinsky5_architecture", "kandinsky5_family"]

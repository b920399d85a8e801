"""HunyuanVideo 1.0 (Tencent Hunyuan, December 2024): a 13B rectified-flow video transformer (dit.py)
on the 16-channel latents of its 8x / 4x causal VAE (comfy_core/models/hunyuan_video_vae.py; the
latent format is shared with Kandinsky 5: kandinsky5/latent_format.py), conditioned on the text part
of LLaVA-Llama-3-8B and CLIP-L's pooled vector (clip.py, conditions.py).

As ComfyUI's `supported_models.HunyuanVideo` / `HunyuanVideoI2V` / `HunyuanVideoSkyreelsI2V` and
`model_base.HunyuanVideo*` have it:

- sampling: model type FLOW (SD3's shift, multiplier 1000), shift 7; the template sets
  ModelSamplingSD3 7 and FluxGuidance 6 (the distilled guidance embedding, default 6);
- conditioning: `y` = CLIP-L's pooled vector, the text token mask, guidance; the I2V release
  (`i2v.py`, 33 input channels) reads the image latent and an inverted mask, SkyReels' I2V
  (`skyreels.py`, 32) the image latent; HunyuanImageToVideo's "v2 (replace)" gives the first frame
  its own modulation (`guiding_frame_index`), "custom" prepends a reference latent (`ref_latent`);
- inference in bf16 or fp32.

Files: Tencent's names (ComfyUI's repackaged `hunyuan_video_t2v_720p_bf16.safetensors`,
`hunyuan_video_image_to_video_720p_bf16`, `hunyuan_video_v2_replace_image_to_video_720p_bf16`)
under `model.diffusion_model.` in single files, bare in split files, or diffusers' names (converted:
keys.py). Detected from `txt_in.individual_token_refiner` (HunyuanVideo 1.5's marker too) with a
3-D patch (HunyuanImage 2.1's is 2-D) and no `cond_type_embedding` (1.5's type rows); the variant
from the input channels against the output channels.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.hunyuan_video import supported_models
from comfy_core.families.hunyuan_video.conditions import HunyuanVideoConditions

MARKER = "txt_in.individual_token_refiner.blocks.0.norm1.weight"
TYPE_ROWS = "cond_type_embedding.weight"
DOWNSCALE = 8
VARIANTS = {  # variant -> (display name, ComfyUI's config / model_base class name)
    "t2v": ("HunyuanVideo", "HunyuanVideo"),
    "i2v": ("HunyuanVideo I2V", "HunyuanVideoI2V"),
    "skyreels_i2v": ("HunyuanVideo SkyReels I2V", "HunyuanVideoSkyreelsI2V"),
}


def variant_of(in_channels: int, out_channels: int) -> str | None:
    """t2v: the latent alone; i2v: latent + image latent + mask; SkyReels: latent + image latent."""
    return {out_channels: "t2v", 2 * out_channels + 1: "i2v", 2 * out_channels: "skyreels_i2v"}.get(in_channels)


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.hunyuan_video.dit import HunyuanVideoConfig

    return HunyuanVideoConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "hunyuan_video"
    facts["hunyuan_video_variant"] = variant_of(config.in_channels, config.out_channels)
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.hunyuan_video.dit import HunyuanVideoTransformer

    return HunyuanVideoTransformer.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.hunyuan_video.dit import HunyuanVideoConfigError
    from comfy_core.families.hunyuan_video.keys import HunyuanVideoKeyError

    return (HunyuanVideoConfigError, HunyuanVideoKeyError)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.hunyuan_video.keys import is_diffusers_hunyuan_video

    return is_diffusers_hunyuan_video(names)


def _from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.hunyuan_video.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def hunyuan_video_architecture() -> Architecture:
    return Architecture(name="hunyuan_video", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_in_dim,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config())


def hunyuan_video_family(variant: str) -> Family:
    from comfy_core.families.hunyuan_video.clip import HUNYUAN_VIDEO_TEXT_ENCODERS

    display_name, class_name = VARIANTS[variant]
    config_class = getattr(supported_models, class_name)
    latent = config_class.latent_format()
    name = "hunyuan_video" if variant == "t2v" else f"hunyuan_video_{variant}"
    return Family(
        name=name,
        display_name=display_name,
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            forbidden_prefixes=("model.diffusion_model." + TYPE_ROWS,),
                            unet=(("image_model", "hunyuan_video"), ("hunyuan_video_variant", variant)),
                            diffusion_model=(("hunyuan_video_variant", variant),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=config_class.sampling_settings["shift"],
                                multiplier=1000.0, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=DOWNSCALE),
        vae_prefix="vae.",
        conditioning=HunyuanVideoConditions(),
        architecture=hunyuan_video_architecture(),
        text_encoders=HUNYUAN_VIDEO_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=config_class,
        comfy_model_class=class_name,
    )


def definition() -> Family:
    """HunyuanVideo 1.0 text-to-video (and the v2 "replace" I2V release, the same 16-channel network)."""
    return hunyuan_video_family("t2v")


__all__ = ["MARKER", "definition", "hunyuan_video_architecture", "hunyuan_video_family", "variant_of"]

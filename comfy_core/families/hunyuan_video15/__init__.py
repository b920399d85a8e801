"""HunyuanVideo 1.5 (Tencent Hunyuan, November 2025) and Capybara v0.1 (the same network): an 8.3B
rectified-flow video transformer (dit.py) on the 32-channel latents of a 16x / 4x causal VAE
(latent_format.py), conditioned on Qwen2.5-VL-7B's states, ByT5 glyph states of quoted text and,
for image-to-video, SigLIP image states (clip.py, conditions.py).

As today's ComfyUI's `supported_models.HunyuanVideo15` / `HunyuanVideo15_SR_Distilled` and
`model_base.HunyuanVideo15*` have it:

- sampling: model type FLOW (SD3's shift, multiplier 1000), shift 7 (the 1080p super-resolution
  model: 2); the templates set ModelSamplingSD3 7 (SR: 2);
- conditioning: image latent + mask channels (t2v / i2v, 65 in), the SR model's 98-channel block
  with noise augmentation (conditions.py), ByT5 states, CLIP-vision states, text mask;
- inference in fp16, bf16 or fp32.

Files: Tencent's names (ComfyUI's repackaged `hunyuanvideo1.5_720p_t2v_fp16.safetensors`,
`..._i2v_fp16`, `hunyuanvideo1.5_1080p_sr_distilled_fp16`, `capybara_v0.1`) under
`model.diffusion_model.` in single files, bare in split files, or diffusers' names (converted:
keys.py). Detected from `txt_in.individual_token_refiner` with `cond_type_embedding` (HunyuanVideo
1.0 and HunyuanImage 2.1 have no type rows); the SR model (`sr.py`) by its 98 input channels
(3 x 32 + 2).
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.hunyuan_video15 import supported_models
from comfy_core.families.hunyuan_video15.conditions import HunyuanVideo15Conditions
from comfy_core.families.hunyuan_video15.latent_format import HV15_DOWNSCALE, HunyuanVideo15

MARKER = "txt_in.individual_token_refiner.blocks.0.norm1.weight"
TYPE_ROWS = "cond_type_embedding.weight"


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.hunyuan_video15.dit import HunyuanVideo15Config, HunyuanVideo15ConfigError

    if prefix + TYPE_ROWS not in tensors:
        raise HunyuanVideo15ConfigError(f"HunyuanVideo 1.5: no {prefix}{TYPE_ROWS}")
    return HunyuanVideo15Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "hunyuan_video15"
    # The SR model: latent + image latent + mask + low-resolution latent + ones channel.
    facts["super_resolution"] = config.in_channels == 3 * config.out_channels + 2
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.hunyuan_video15.dit import HunyuanVideo15Transformer

    return HunyuanVideo15Transformer.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.hunyuan_video15.dit import HunyuanVideo15ConfigError
    from comfy_core.families.hunyuan_video15.keys import HunyuanVideo15KeyError

    return (HunyuanVideo15ConfigError, HunyuanVideo15KeyError)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.hunyuan_video15.keys import is_diffusers_hunyuan_video15

    return is_diffusers_hunyuan_video15(names)


def _from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.hunyuan_video15.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def hunyuan_video15_architecture() -> Architecture:
    return Architecture(name="hunyuan_video15", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_in_dim,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config())


def hunyuan_video15_family(name: str, display_name: str, super_resolution: bool) -> Family:
    from comfy_core.families.hunyuan_video15.clip import HV15_TEXT_ENCODERS

    latent = HunyuanVideo15()
    config_class = supported_models.HunyuanVideo15_SR_Distilled if super_resolution else supported_models.HunyuanVideo15
    return Family(
        name=name,
        display_name=display_name,
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER, "model.diffusion_model." + TYPE_ROWS),
                            unet=(("image_model", "hunyuan_video15"), ("super_resolution", super_resolution)),
                            diffusion_model=(("super_resolution", super_resolution),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=config_class.sampling_settings["shift"],
                                multiplier=1000.0, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=HV15_DOWNSCALE),
        vae_prefix="vae.",
        conditioning=HunyuanVideo15Conditions(super_resolution=super_resolution),
        architecture=hunyuan_video15_architecture(),
        text_encoders=HV15_TEXT_ENCODERS,
        inference_dtypes=("fp16", "bf16", "fp32"),
        supported_model=config_class,
        comfy_model_class="HunyuanVideo15_SR_Distilled" if super_resolution else "HunyuanVideo15",
    )


def definition() -> Family:
    """HunyuanVideo 1.5 t2v / i2v (and Capybara v0.1): 65 input channels."""
    return hunyuan_video15_family("hunyuan_video15", "HunyuanVideo 1.5", super_resolution=False)


__all__ = ["MARKER", "definition", "hunyuan_video15_architecture", "hunyuan_video15_family"]

"""What the Wan families share: the Wan DiT architecture (markers, detection, builder, the
diffusers conversion, ComfyUI's unet_config), the umT5-XXL encoder set, the sampling policy and
one constructor, so each family file states only what tells it apart.

ComfyUI's `supported_models.WAN21_T2V` and its subclasses: rectified flow with
ModelSamplingDiscreteFlow's shift 8.0 and multiplier 1000 (the network takes `sigma * 1000`),
fp16 / bf16 / fp32 inference, the Wan 2.1 latent format (16 channels, 8x spatial, 4x temporal) or
Wan 2.2's (48 channels, 16x) for TI2V-5B. Wan files are split files (UNETLoader, CLIPLoader type
"wan", VAELoader); single files with the DiT under `model.diffusion_model.` are read too.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.wan import supported_models
from comfy_core.families.wan.latent_format import wan21_latent_format, wan22_latent_format

PREFIX = "model.diffusion_model."
MARKER = "head.modulation"
WAN_SHIFT = 8.0  # ComfyUI's WAN21_T2V sampling_settings


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.wan.dit import WanConfig

    return WanConfig.detect_from_weights(tensors, prefix)


def _detect_with_metadata(tensors: Mapping[str, Any], prefix: str, metadata: Mapping[str, str]) -> Any:
    """ComfyUI merges a file's `config` metadata into the detected config: Wan-Animate-2's i2v-shaped
    weights are told apart by it alone (`wan/animate2.py`)."""
    from comfy_core.families.wan.animate2 import with_metadata

    return with_metadata(_detect(tensors, prefix), metadata)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["variant"] = config.variant
    facts["in_channels"] = config.in_dim
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.wan.dit import WanModel

    network = WanModel
    if config.model_type == "animate2":  # Wan-Animate-2's forward (wan/animate2.py) on i2v weights
        from comfy_core.families.wan.animate2 import WanAnimate2Model

        network = WanAnimate2Model
    elif config.model_type == "wandancer":  # Wan Dancer's music modules (wan/dancer.py) on i2v weights
        from comfy_core.families.wan.dancer import WanDancerModel

        network = WanDancerModel
    elif config.model_type == "animate":  # Wan 2.2 Animate's pose / face modules (wan/animate.py) on i2v weights
        from comfy_core.families.wan.animate import AnimateWanModel

        network = AnimateWanModel
    elif config.model_type in ("scail", "scail2"):  # SCAIL's pose / mask embeddings (wan/scail.py) on i2v weights
        from comfy_core.families.wan.scail import WanSCAILModel

        network = WanSCAILModel
    return network.from_config(config) if operations is None else network.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.wan.dit import WanConfigError

    return (WanConfigError,)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.wan.keys import is_diffusers_wan

    return is_diffusers_wan(names)


def _from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.wan.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def wan_architecture() -> Architecture:
    return Architecture(name="wan", markers=(MARKER,), detect=_detect, facts=_facts, build=_build, errors=_errors(),
                        context_width=lambda config: config.text_dim, is_diffusers=_is_diffusers,
                        from_diffusers=_from_diffusers, comfy_config=lambda config: config.comfy_unet_config(),
                        detect_with_metadata=_detect_with_metadata, self_attention_hook="attn1_patch")


def text_encoders() -> Any:
    from comfy_core.families.wan.encoders import WAN_TEXT_ENCODERS

    return WAN_TEXT_ENCODERS


def wan_family(name: str, display_name: str, facts: tuple[tuple[str, Any], ...], conditioning: Any,
               version: str = "21", supported_model: Any = None, comfy_model_class: str = "WAN21") -> Family:
    """A Wan family told apart by the DiT `facts` (from `WanConfig`: `variant`, `model_type`,
    `in_dim`, ...). `version` "22" gives Wan 2.2's 48-channel latent format and 16x geometry;
    `supported_model`: ComfyUI's config class (`supported_models.py`), WAN21_T2V by default;
    `comfy_model_class`: ComfyUI's `comfy.model_base` class (WAN21 and its subclasses)."""
    latent = wan22_latent_format() if version == "22" else wan21_latent_format()
    return Family(
        name=name,
        display_name=display_name,
        signature=Signature(required_prefixes=(PREFIX + MARKER,), unet=facts),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=WAN_SHIFT, multiplier=1000.0,
                                default_sampler="euler", default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=16 if version == "22" else 8),
        vae_prefix="vae.",
        conditioning=conditioning,
        architecture=wan_architecture(),
        text_encoders=text_encoders(),
        inference_dtypes=("fp16", "bf16", "fp32"),
        supported_model=supported_model or supported_models.WAN21_T2V,
        comfy_model_class=comfy_model_class,
    )

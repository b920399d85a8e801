"""SDPose (Liang et al. 2025, "SDPose: Exploiting Diffusion Priors for Out-of-Domain and Robust Pose
Estimation"; Comfy-Org/SDPose's `sdpose_wholebody_fp16.safetensors`): SD 2.x's UNet (linear
transformer projections, 64-channel heads, no label embedding) with a keypoint heatmap head under
`model.diffusion_model.heatmap_head.*`, and SD's VAE; the file carries no text encoder (the pose
extractor conditions on Lotus's fixed null prompt, nodes/lotus.py).

Today's ComfyUI detects it as SD 2.x with `unet_config["heatmap_head"] = True` (its
`comfy/model_detection.py` reads `heatmap_head.conv_layers.0.weight`) and loads it through
CheckpointLoaderSimple as its `SD20` model: the same sampling (eps or v from the one norm bias,
`sd2.prediction_from_weights`) and latent format. The network and the heatmap decoding are in
`head.py`.
"""
from __future__ import annotations

from typing import Any

from comfy_core.families.architecture import Architecture, unet_facts
from comfy_core.families.base import Family, SamplingPolicy, Signature
from comfy_core.families.sd2 import TEXT_ENCODERS, prediction_from_weights, supported_models
from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.models.latent_formats import sd15_latent_format

# The key whose presence ComfyUI reads (after the UNet prefix).
MARKER = "heatmap_head.conv_layers.0.weight"


def _detect(tensors: Any, prefix: str) -> Any:
    from comfy_core.families.sdpose.head import SDPoseConfig

    return SDPoseConfig.detect(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    facts = unet_facts(config)
    facts["heatmap_head"] = True
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.sdpose.head import SDPoseUNet

    return SDPoseUNet(config, operations=operations)


def _finalize(config: Any, family: Any) -> Any:
    import dataclasses

    return dataclasses.replace(config, num_heads=family.num_heads, num_head_channels=family.num_head_channels)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.models.unet import UNetConfigError

    return (UNetConfigError,)


def architecture() -> Architecture:
    """The UNet with its heatmap head: present where ComfyUI's marker is."""
    return Architecture(name="sdpose_unet", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), finalize=_finalize, context_width=lambda config: config.context_dim,
                        head_layout=True)


def definition() -> Family:
    return Family(
        name="sdpose",
        display_name="SDPose (SD 2.x pose estimator)",
        signature=Signature(
            required_prefixes=("model.diffusion_model.heatmap_head.",),
            unet=(("use_linear_in_transformer", True), ("has_adm", False), ("in_channels", 4)),
            diffusion_model=(("heatmap_head", True),),
        ),
        latent_format=sd15_latent_format(),
        sampling=SamplingPolicy(prediction="eps"),
        num_head_channels=64,
        # ComfyUI's SD20 config names SD 2's OpenCLIP set; SDPose files carry none of it, so the
        # checkpoint loader's CLIP output is None (with its warning), as ComfyUI's.
        text_encoders=TEXT_ENCODERS,
        prediction_from_weights=prediction_from_weights,
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=architecture(),
        supported_model=supported_models.SD20,
    )

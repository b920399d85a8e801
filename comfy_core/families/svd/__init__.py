"""Stable Video Diffusion img2vid (Blattmann et al. 2023; Stability's `svd` / `svd_xt` single
files, SGM layout): a spatial-temporal UNet (`time_stack` layers in every ResBlock and
transformer, comfy_core/families/svd/video_unet.py) with an 8-channel input (noisy frames + the
conditioning frame's latent), a 768-wide label embedding (fps, motion bucket, augmentation),
cross-attention to the OpenCLIP ViT-H/14 image embedding (`conditioner.embedders.0.open_clip.
model.visual.*`, returned as CLIP_VISION by ImageOnlyCheckpointLoader), no text encoder, and a
VAE with a temporal decoder (comfy_core/models/video_vae.py); SD latents (0.18215).

Sampling as ComfyUI's `supported_models.SVD_img2vid` (model type V_PREDICTION_EDM): continuous
EDM sigmas log-spaced from 0.002 to 700, timestep `0.25 ln(sigma)`, sigma_data 1, v-prediction.

Detected from names and shapes: a UNet with `time_stack` layers in its first ResBlock, 8 input
channels and a label embedding, and the image embedder's tower.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.base import Family, SamplingPolicy, Signature
from comfy_core.families.svd import supported_models
from comfy_core.models.latent_formats import sd15_latent_format
from comfy_core.models.unet import UNetConfig

CLIP_VISION_PREFIX = "conditioner.embedders.0.open_clip.model.visual."
SIGMA_MIN = 0.002
SIGMA_MAX = 700.0
SIGMA_DATA = 1.0


class SVDComponents:
    """The video UNet, the temporal-decoder VAE and the EDM v-prediction denoiser."""

    def build_unet(self, config: UNetConfig) -> Any:
        from comfy_core.families.svd.video_unet import VideoUNetModel

        return VideoUNetModel(config)

    def vae_config(self, tensors: Mapping[str, Any], prefix: str) -> Any:
        from comfy_core.models.video_vae import video_vae_config

        return video_vae_config(tensors, prefix)

    def build_vae(self, config: Any) -> Any:
        from comfy_core.models.video_vae import VideoAutoencoder

        return VideoAutoencoder(config)

    def build_model(self, unet: Any, family: Family, prediction: str, zsnr: bool) -> Any:
        from comfy_core.families.svd.video_diffusion import VideoDiffusionModel
        from comfy_core.models.model_sampling import ContinuousEDMModelSampling

        sampling = ContinuousEDMModelSampling(prediction, sigma_min=SIGMA_MIN, sigma_max=SIGMA_MAX,
                                              sigma_data=SIGMA_DATA)
        return VideoDiffusionModel(unet, sampling, family.latent_format, family=family)


def definition() -> Family:
    return Family(
        name="svd",
        display_name="Stable Video Diffusion",
        signature=Signature(
            required_prefixes=("model.diffusion_model.input_blocks.1.0.time_stack.", CLIP_VISION_PREFIX),
            unet=(("use_linear_in_transformer", True), ("has_adm", True), ("in_channels", 8)),
            # A UNet file alone: SDXL's instruct-pix2pix UNet has the same facts above, but no
            # transformer at its first level.
            diffusion_model=(("attention_at_first_level", True),),
        ),
        latent_format=sd15_latent_format(),
        sampling=SamplingPolicy(prediction="v"),
        num_head_channels=64,
        clip_vision_prefix=CLIP_VISION_PREFIX,
        key_conversions=(vae_attention_linear_to_conv(),),
        components=SVDComponents(),
        supported_model=supported_models.SVD_img2vid,
        modelspec_architecture="stable-video-diffusion-img2vid-v1",
        comfy_model_class="SVD_img2vid",
    )

"""SD1.x (Rombach et al. 2022; CompVis/RunwayML v1-x checkpoints): eps-prediction UNet with
1x1-convolution transformer projections and 8 heads per transformer, conditioned on OpenAI
CLIP ViT-L/14 (`cond_stage_model.transformer.text_model.*`), 4-channel latents at 1/8 size."""
from __future__ import annotations

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.base import Family, SamplingPolicy, Signature
from comfy_core.families.sd1 import supported_models
from comfy_core.models.latent_formats import sd15_latent_format
from comfy_core.text_encoders.encoder_set import PAD_EOS, EncoderOptions, EncoderSetSpec
from comfy_core.families.sd1.clip import SD1ClipModel
from comfy_core.families.sd1.clip import SD1Tokenizer

# OpenAI CLIP-L, its final output (after the final norm), padded with EOS; A1111 honours clip skip.
TEXT_ENCODERS = EncoderSetSpec(
    "sd1", (EncoderOptions("clip_l", "l", PAD_EOS, None, True,
                           prefixes=("cond_stage_model.transformer.text_model.",
                                     # saved with transformers < 4.3 (no text_model.)
                                     "cond_stage_model.transformer."),
                           webui_layer_idx=None, webui_layer_norm=True, webui_tokenizer="transformers",
                           save_prefix="cond_stage_model.transformer.text_model."),),
    "clip_l", set_class=SD1ClipModel, tokenizer_class=SD1Tokenizer, clip_types=("stable_diffusion",))


def definition() -> Family:
    return Family(
        name="sd1",
        display_name="Stable Diffusion 1.x",
        signature=Signature(
            required_prefixes=("model.diffusion_model.input_blocks.0.0.", "cond_stage_model.transformer."),
            unet=(("use_linear_in_transformer", False), ("has_adm", False), ("in_channels", 4)),
        ),
        latent_format=sd15_latent_format(),
        sampling=SamplingPolicy(prediction="eps"),
        num_heads=8,
        text_encoders=TEXT_ENCODERS,
        key_conversions=(vae_attention_linear_to_conv(),),
        supported_model=supported_models.SD15,
    )

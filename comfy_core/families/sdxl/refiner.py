"""SDXL refiner 1.0 (Podell et al. 2023, sec. 2.5): UNet conditioned on OpenCLIP ViT-bigG only
(`conditioner.embedders.0.model.*`) with a label embedding of pooled text + size + aesthetic
score; SDXL latents."""
from __future__ import annotations

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.base import Family, SamplingPolicy, Signature
from comfy_core.families.sdxl import supported_models
from comfy_core.families.sdxl.latent_format import sdxl_latent_format
from comfy_core.models.model_conditions import SdxlRefinerConditions
from comfy_core.text_encoders.encoder_set import PAD_ZERO, EncoderOptions, EncoderSetSpec
from comfy_core.families.sdxl.clip import SDXLRefinerClipModel
from comfy_core.families.sdxl.clip import SDXLRefinerTokenizer

# OpenCLIP bigG alone, penultimate layer without the final norm (A1111 the same; an all-empty
# negative is zeros).
TEXT_ENCODERS = EncoderSetSpec(
    "sdxl_refiner", (EncoderOptions("clip_g", "g", PAD_ZERO, -2, False, prefixes=("conditioner.embedders.0.model.",),
                                    webui_layer_idx=-2, webui_layer_norm=False, webui_tokenizer="open_clip",
                                    save_prefix="conditioner.embedders.0.model."),),
    "clip_g", set_class=SDXLRefinerClipModel, tokenizer_class=SDXLRefinerTokenizer, clip_types=("stable_diffusion",), webui_zero_empty_negative=True)


def definition() -> Family:
    return Family(
        name="sdxl_refiner",
        display_name="Stable Diffusion XL refiner",
        signature=Signature(
            required_prefixes=("model.diffusion_model.input_blocks.0.0.", "conditioner.embedders.0.model."),
            forbidden_prefixes=("conditioner.embedders.1.",),
            unet=(("use_linear_in_transformer", True), ("has_adm", True), ("in_channels", 4)),
            # Alone, told from SDXL by its four levels and from SD2.1 unCLIP by no attention at full size.
            diffusion_model=(("levels", 4), ("attention_at_first_level", False)),
        ),
        latent_format=sdxl_latent_format(),
        sampling=SamplingPolicy(prediction="eps"),
        num_head_channels=64,
        text_encoders=TEXT_ENCODERS,
        conditioning=SdxlRefinerConditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        supported_model=supported_models.SDXLRefiner,
        modelspec_architecture="stable-diffusion-xl-v1-refiner",
        comfy_model_class="SDXLRefiner",
    )

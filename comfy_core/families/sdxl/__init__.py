"""SDXL base 1.0 (Podell et al. 2023): three-level UNet with per-level transformer depth
(0, 2, 10), linear projections, 64-channel heads and a label embedding of pooled text + size
conditions; text from OpenAI CLIP ViT-L (`conditioner.embedders.0.transformer.*`) and OpenCLIP
ViT-bigG (`conditioner.embedders.1.model.*`); latents scaled by 0.13025."""
from __future__ import annotations

from typing import TYPE_CHECKING

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.base import Family, SamplingPolicy, Signature
from comfy_core.families.sdxl import supported_models
from comfy_core.families.sdxl.latent_format import sdxl_latent_format
from comfy_core.models.model_conditions import SdxlConditions
from comfy_core.text_encoders.encoder_set import PAD_EOS, PAD_ZERO, EncoderOptions, EncoderSetSpec
from comfy_core.families.sdxl.clip import SDXLClipModel
from comfy_core.families.sdxl.clip import SDXLTokenizer

# CLIP-L and OpenCLIP bigG, both their penultimate layer without the final norm, concatenated;
# pooled from bigG. A1111: the same layers (clip skip ignored), an all-empty negative is zeros.
TEXT_ENCODERS = EncoderSetSpec(
    "sdxl", (EncoderOptions("clip_l", "l", PAD_EOS, -2, False, prefixes=("conditioner.embedders.0.transformer.text_model.",),
                            webui_layer_idx=-2, webui_layer_norm=False, webui_tokenizer="transformers",
                            save_prefix="conditioner.embedders.0.transformer.text_model.", save_position_ids=True),
             EncoderOptions("clip_g", "g", PAD_ZERO, -2, False, prefixes=("conditioner.embedders.1.model.",),
                            webui_layer_idx=-2, webui_layer_norm=False, webui_tokenizer="open_clip",
                            save_prefix="conditioner.embedders.1.model.")),
    "clip_g", set_class=SDXLClipModel, tokenizer_class=SDXLTokenizer,
    # ComfyUI loads two CLIP towers as SDXL's set whatever the type (comfy/sd.py load_text_encoder_state_dicts)
    clip_types=("sdxl", "stable_diffusion"), webui_zero_empty_negative=True)

if TYPE_CHECKING:
    from comfy_core.checkpoint.reader import CheckpointFile


def prediction_from_markers(checkpoint: "CheckpointFile", unet_prefix: str) -> str | None:
    """ComfyUI honours a `v_pred` marker tensor in SDXL files (v-prediction fine-tunes)."""
    return "v" if "v_pred" in checkpoint.tensors else None


def definition() -> Family:
    return Family(
        name="sdxl",
        display_name="Stable Diffusion XL",
        signature=Signature(
            required_prefixes=("model.diffusion_model.input_blocks.0.0.", "conditioner.embedders.0.transformer.",
                               "conditioner.embedders.1.model."),
            unet=(("use_linear_in_transformer", True), ("has_adm", True), ("in_channels", 4)),
            # Alone, told from the refiner (and SD2.1 unCLIP) by its three levels.
            diffusion_model=(("levels", 3),),
        ),
        latent_format=sdxl_latent_format(),
        sampling=SamplingPolicy(prediction="eps"),
        num_head_channels=64,
        text_encoders=TEXT_ENCODERS,
        conditioning=SdxlConditions(),
        prediction_from_weights=prediction_from_markers,
        zsnr_marker="ztsnr",
        key_conversions=(vae_attention_linear_to_conv(),),
        supported_model=supported_models.SDXL,
        modelspec_architecture="stable-diffusion-xl-v1-base",
        comfy_model_class="SDXL",
    )

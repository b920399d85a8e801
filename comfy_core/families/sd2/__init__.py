"""SD2.x (Stability AI v2-x checkpoints): UNet with linear transformer projections and 64-channel
heads, conditioned on OpenCLIP ViT-H/14 in open_clip's key layout (`cond_stage_model.model.*`).
The 512 models predict eps, the 768 models v (Salimans & Ho 2022); names and shapes are the same,
so the prediction type comes from file metadata, an explicit option, or -- the one read of
tensor data detection allows -- ComfyUI's heuristic on one norm bias (see `prediction_from_weights`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.base import Family, SamplingPolicy, Signature
from comfy_core.families.sd2 import supported_models
from comfy_core.models.latent_formats import sd15_latent_format
from comfy_core.text_encoders.encoder_set import PAD_ZERO, EncoderOptions, EncoderSetSpec
from comfy_core.families.sd2.clip import SD2ClipModel
from comfy_core.families.sd2.clip import SD2Tokenizer

# OpenCLIP ViT-H, penultimate layer through the final norm, zero-padded; A1111 the same layer
# whatever the clip skip.
TEXT_ENCODERS = EncoderSetSpec(
    "sd2", (EncoderOptions("clip_h", "h", PAD_ZERO, -2, True, prefixes=("cond_stage_model.model.",),
                           webui_layer_idx=-2, webui_layer_norm=True, webui_tokenizer="open_clip",
                           save_prefix="cond_stage_model.model."),),
    "clip_h", set_class=SD2ClipModel, tokenizer_class=SD2Tokenizer, clip_types=("stable_diffusion",))

if TYPE_CHECKING:
    from comfy_core.checkpoint.reader import CheckpointFile

# ComfyUI (comfy/supported_models.py, SD20.model_type): v-prediction when this tensor's standard
# deviation exceeds 0.09.
V_MARKER = "output_blocks.11.1.transformer_blocks.0.norm1.bias"
V_MARKER_STD = 0.09


def prediction_from_weights(checkpoint: "CheckpointFile", unet_prefix: str) -> str | None:
    """"v" or "eps" from the spread of one norm bias; None when the tensor is absent."""
    key = unet_prefix + V_MARKER
    if key not in checkpoint.tensors:
        return None
    std = float(checkpoint.read(key).float().std())
    return "v" if std > V_MARKER_STD else "eps"


def definition() -> Family:
    return Family(
        name="sd2",
        display_name="Stable Diffusion 2.x",
        signature=Signature(
            required_prefixes=("model.diffusion_model.input_blocks.0.0.", "cond_stage_model.model."),
            # SDPose's UNet carries a heatmap head (comfy_core/families/sdpose).
            forbidden_prefixes=("model.diffusion_model.heatmap_head.",),
            unet=(("use_linear_in_transformer", True), ("has_adm", False), ("in_channels", 4)),
        ),
        latent_format=sd15_latent_format(),
        sampling=SamplingPolicy(prediction="eps"),
        num_head_channels=64,
        text_encoders=TEXT_ENCODERS,
        prediction_from_weights=prediction_from_weights,
        key_conversions=(vae_attention_linear_to_conv(),),
        supported_model=supported_models.SD20,
    )

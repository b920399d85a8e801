"""ComfyUI's `comfy.supported_models.CogVideoX_T2V` config class: what `model.model.model_config` is
for CogVideoX (and the 5B-class networks built on it: CogVideoX 1.5, CogVideoX-Fun, VOID), so packs
read `unet_config`, `latent_format`, `sampling_settings` and `isinstance` holds as in ComfyUI. Its
models are ComfyUI's `model_base.CogVideoX` (model type V_PREDICTION_DDPM)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.cogvideox.latent_format import SCALE_2B, SCALE_5B, CogVideoX
from comfy_core.models.model_config import BASE


class CogVideoX_T2V(BASE):  # noqa: N801 (ComfyUI's name)
    """CogVideoX: v-prediction on the zero-terminal-SNR scaled-linear DDPM table; the latent scale
    0.7 for the 5B class, 1.15258426 for the 2B (width 1920)."""

    unet_config = {"image_model": "cogvideox"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"linear_start": 0.00085, "linear_end": 0.012, "beta_schedule": "linear", "zsnr": True}
    latent_format = CogVideoX
    memory_usage_factor = 2.0
    supported_inference_dtypes = [torch.bfloat16, torch.float16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]

    def __init__(self, unet_config: dict[str, Any]) -> None:
        super().__init__(unet_config)
        width = unet_config.get("num_attention_heads", 0) * unet_config.get("attention_head_dim", 0)
        self.latent_format = CogVideoX(scale_factor=SCALE_2B if width == 1920 else SCALE_5B)

"""ComfyUI's `comfy.supported_models.Ideogram4` config class (its `supported_models.py`): `image_model`
"ideogram4", discrete flow sampling with shift 1 and multiplier 1, Flux.2's latent format, the
release's fixed widths in `unet_extra_config`, bf16 / fp32, memory factor 11.6, text encoder
`qwen3vl_8b`; model `model_base.Ideogram4` (model type FLOW). The conditional and the unconditional
files are both this class."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.models.model_config import BASE

IDEOGRAM4_SHIFT = 1.0
IDEOGRAM4_MULTIPLIER = 1.0


class Ideogram4(BASE):
    """Ideogram 4 (conditional and unconditional transformers)."""

    huggingface_repo = "ideogram-ai/ideogram-4"
    unet_config = {"image_model": "ideogram4"}
    unet_extra_config: dict[str, Any] = {
        "num_attention_heads": 18, "attention_head_dim": 256, "intermediate_size": 12288, "adaln_dim": 512,
        "llm_features_dim": 53248, "rope_theta": 5000000, "mrope_section": [24, 20, 20], "norm_eps": 1e-5}
    sampling_settings = {"multiplier": IDEOGRAM4_MULTIPLIER, "shift": IDEOGRAM4_SHIFT}
    latent_format = Flux2LatentFormat
    memory_usage_factor = 11.6
    supported_inference_dtypes = [torch.bfloat16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]

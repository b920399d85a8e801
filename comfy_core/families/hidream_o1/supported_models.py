"""ComfyUI's `comfy.supported_models.HiDreamO1` config class (its `supported_models.py`): `image_model`
"hidream_o1", discrete flow sampling with shift 3 and multiplier 1000 (noise scale 1 until
ModelNoiseScale sets the release's 8 / 7.5), the pixel latent format, bf16 / fp32, memory factor
0.033; a tokenizer-only text encoder and ComfyUI's pixel-space VAE (no tensors in the files for
either); model `model_base.HiDreamO1` (model type FLOW)."""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.hidream_o1.latent_format import HiDreamO1PixelLatentFormat
from comfy_core.models.model_config import BASE

HIDREAM_O1_SHIFT = 3.0
HIDREAM_O1_MULTIPLIER = 1000.0


class HiDreamO1(BASE):
    """HiDream-O1-Image (full and dev)."""

    unet_config = {"image_model": "hidream_o1"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": HIDREAM_O1_SHIFT, "multiplier": HIDREAM_O1_MULTIPLIER}
    latent_format = HiDreamO1PixelLatentFormat
    memory_usage_factor = 0.033
    supported_inference_dtypes = [torch.bfloat16, torch.float32]

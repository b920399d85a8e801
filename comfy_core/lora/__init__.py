"""LoRA: key maps derived from module names, adapters (LoRA/LoCon/DoRA, LoHa, LoKr), loading.

    new_model, new_clip, report = load_lora_for_models(model, clip, tensors, 1.0, 1.0, name)
"""
from __future__ import annotations

from comfy_core.lora.adapters import LohaAdapter, LokrAdapter, LoraAdapter, lora_delta
from comfy_core.lora.keymap import text_encoder_key_map, unet_diffusers_names, unet_key_map
from comfy_core.lora.loader import LoraParse, LoraReport, load_lora_for_models, parse_lora

__all__ = [
    "LohaAdapter", "LokrAdapter", "LoraAdapter", "LoraParse", "LoraReport", "load_lora_for_models",
    "lora_delta", "parse_lora", "text_encoder_key_map", "unet_diffusers_names", "unet_key_map",
]

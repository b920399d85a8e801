"""LoRA: key maps derived from module names, adapters (LoRA/LoCon/DoRA, LoHa, LoKr), loading.

    new_model, new_clip, report = load_lora_for_models(model, clip, tensors, 1.0, 1.0, name)

DiTs that name their own LoRA layers (Flux.1, SD3/SD3.5, Wan) get their own key maps (`dit_keymap`:
BFL/SAI, kohya, diffusers, OneTrainer, LyCORIS names; slices of fused weights), USO's and BFL's control-LoRA layouts are converted (`dit_convert`),
records that do not match are logged and skipped (`fit`); fp8 weights are stored back by seeded stochastic rounding
(`stochastic_rounding`), as ComfyUI stores them.
"""
from __future__ import annotations

from comfy_core.weights.adapters import LohaAdapter, LokrAdapter, LoraAdapter, lora_delta
from comfy_core.lora.dit_convert import convert_dit_lora
from comfy_core.lora.dit_keymap import dit_key_map, dit_kind
from comfy_core.lora.keymap import text_encoder_key_map, unet_diffusers_names, unet_key_map
from comfy_core.lora.loader import LoraParse, LoraReport, load_lora_for_models, parse_lora
from comfy_core.weights.stochastic_rounding import stochastic_rounding, string_to_seed

__all__ = [
    "LohaAdapter", "LokrAdapter", "LoraAdapter", "LoraParse", "LoraReport",
    "convert_dit_lora", "dit_key_map", "dit_kind",
    "load_lora_for_models", "lora_delta", "parse_lora", "stochastic_rounding",
    "string_to_seed", "text_encoder_key_map", "unet_diffusers_names", "unet_key_map",
]

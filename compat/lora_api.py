"""ComfyUI's `comfy/lora.py` functions over our LoRA parser, key maps and patch arithmetic.

Packs build patch dicts themselves (`key_map = model_lora_keys_unet(model.model, {})`,
`patches = load_lora(sd, key_map)`, `model.add_patches(patches, strength)`) and call the weight
maths (`calculate_weight(patches, weight, key)`, GGUF's dequantised weights). These give them our
values: `load_lora` returns our adapters (`comfy_core.weights.adapters`) keyed by parameter name,
which our patchers apply. `calculate_weight` is an extension point (comfy/lora.py's surface
table): `comfy_core.weights.entries.apply_patches` unless a pack assigned its own.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn

from comfy_core.weights.adapters import dora_renormalise
from comfy_core.lora.dit_convert import convert_dit_lora
from comfy_core.lora.keymap import text_encoder_key_map, unet_key_map
from comfy_core.lora.loader import parse_lora
from comfy_core.weights.function import identity

log = logging.getLogger(__name__)

# Hugging Face CLIP layer names -> their kohya spelling (ComfyUI's LORA_CLIP_MAP).
LORA_CLIP_MAP: dict[str, str] = {
    "mlp.fc1": "mlp_fc1",
    "mlp.fc2": "mlp_fc2",
    "self_attn.k_proj": "self_attn_k_proj",
    "self_attn.q_proj": "self_attn_q_proj",
    "self_attn.v_proj": "self_attn_v_proj",
    "self_attn.out_proj": "self_attn_out_proj",
}


def load_lora(lora: Mapping[str, torch.Tensor], to_load: Mapping[str, Any], log_missing: bool = True) -> dict:
    """`{parameter key: patch}` for the LoRA state dict `lora` resolved through `to_load`
    (LoRA layer name -> parameter key, what `model_lora_keys_*` build). File keys that patch
    nothing are logged (`log_missing`), as ComfyUI logs "lora key not loaded"."""
    parsed = parse_lora(lora, to_load)
    if log_missing:
        for key in parsed.unmatched:
            log.warning("lora key not loaded: %s", key)
    return parsed.patches


def model_lora_keys_unet(model: nn.Module, key_map: dict | None = None) -> dict:
    """Add to `key_map` (and return it) every LoRA name of the UNet of `model` (a MODEL's
    `.model`, parameters under `diffusion_model.`): kohya, diffusers/PEFT and ComfyUI names."""
    key_map = {} if key_map is None else key_map
    key_map.update(unet_key_map(_module(model, "model_lora_keys_unet")))
    return key_map


def model_lora_keys_clip(model: nn.Module, key_map: dict | None = None) -> dict:
    """Add to `key_map` (and return it) every LoRA name of the text encoders `model` (a CLIP's
    `.cond_stage_model`, children `clip_l` / `clip_h` / `clip_g`)."""
    key_map = {} if key_map is None else key_map
    key_map.update(text_encoder_key_map(_module(model, "model_lora_keys_clip")))
    return key_map


def _module(model: Any, what: str) -> nn.Module:
    if isinstance(model, nn.Module):
        return model
    inner = getattr(model, "model", None)  # a patcher given where ComfyUI wants patcher.model
    if isinstance(inner, nn.Module):
        return inner
    raise TypeError(f"{what}: expected the model module (ModelPatcher.model / CLIP.cond_stage_model), "
                    f"got {type(model).__name__}")


def weight_decompose(dora_scale: torch.Tensor, weight: torch.Tensor, lora_diff: torch.Tensor, alpha: float,
                     strength: float, intermediate_dtype: torch.dtype = torch.float32,
                     function: Callable[[torch.Tensor], torch.Tensor] = identity) -> torch.Tensor:
    """DoRA (Liu et al. 2024): `weight` becomes `dora_scale * (W + f(alpha * diff)) / norm`,
    blended with the original by `strength`; in place, and returned (ComfyUI's signature)."""
    diff = lora_diff.to(device=weight.device, dtype=intermediate_dtype) * alpha
    original = weight.to(intermediate_dtype)
    patched = original + function(diff)
    result = dora_renormalise(original, patched, dora_scale.to(weight.device, intermediate_dtype), strength)
    weight[...] = result.to(weight.dtype)
    return weight


def pad_tensor_to_shape(tensor: torch.Tensor, new_shape: Sequence[int]) -> torch.Tensor:
    """`tensor` zero-padded at the end of each axis to `new_shape` (a new tensor); a smaller
    target on any axis is an error, as ComfyUI's."""
    from comfy_core.weights.adapters import pad_to_shape
    from comfy_core.weights.errors import PatchDataError

    try:
        out = pad_to_shape(tensor, new_shape)
    except PatchDataError as exc:
        raise ValueError(f"pad_tensor_to_shape: {exc}") from None
    return out.clone() if out is tensor else out


def convert_lora(sd: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    """ComfyUI's `comfy.lora_convert.convert_lora`: our parser reads the SD and most Flux/SD3
    layouts as they are, so those come back unchanged; USO's Flux LoRAs and BFL's Flux control
    LoRAs (which widen `img_in`: an `img_in.reshape_weight` record) come back in the names and
    records ComfyUI's converter gives them (`comfy_core.lora.dit_convert`)."""
    return convert_dit_lora(sd)

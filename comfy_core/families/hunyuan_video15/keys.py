"""HunyuanVideo 1.5 key layouts: diffusers' `HunyuanVideo15Transformer3DModel` names to the released
files' (Tencent's, which ComfyUI's repackaged files keep; the network's names, dit.py).

diffusers splits the fused q/k/v projections (`attn.to_q/k/v`, `add_q/k/v_proj`, the refiner's
`attn.to_q/k/v`) and stores the final layer's modulation as (scale, shift) where the files store
(shift, scale); everything else is a renaming.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

DIFFUSERS_MARKER = "context_embedder.token_refiner.refiner_blocks.0.norm1.weight"


class HunyuanVideo15KeyError(ValueError):
    """A diffusers HunyuanVideo 1.5 state dict that cannot be converted (a projection missing)."""


_RENAMES = (
    ("x_embedder.proj.", "img_in.proj."),
    ("time_embed.timestep_embedder_r.linear_1.", "time_r_in.mlp.0."),
    ("time_embed.timestep_embedder_r.linear_2.", "time_r_in.mlp.2."),
    ("time_embed.timestep_embedder.linear_1.", "time_in.mlp.0."),
    ("time_embed.timestep_embedder.linear_2.", "time_in.mlp.2."),
    ("context_embedder.time_text_embed.timestep_embedder.linear_1.", "txt_in.t_embedder.mlp.0."),
    ("context_embedder.time_text_embed.timestep_embedder.linear_2.", "txt_in.t_embedder.mlp.2."),
    ("context_embedder.time_text_embed.text_embedder.linear_1.", "txt_in.c_embedder.linear_1."),
    ("context_embedder.time_text_embed.text_embedder.linear_2.", "txt_in.c_embedder.linear_2."),
    ("context_embedder.proj_in.", "txt_in.input_embedder."),
    ("context_embedder_2.norm.", "byt5_in.layernorm."),
    ("context_embedder_2.linear_1.", "byt5_in.fc1."),
    ("context_embedder_2.linear_2.", "byt5_in.fc2."),
    ("context_embedder_2.linear_3.", "byt5_in.fc3."),
    ("image_embedder.norm_in.", "vision_in.proj.0."),
    ("image_embedder.linear_1.", "vision_in.proj.1."),
    ("image_embedder.linear_2.", "vision_in.proj.3."),
    ("image_embedder.norm_out.", "vision_in.proj.4."),
    ("cond_type_embed.", "cond_type_embedding."),
    ("proj_out.", "final_layer.linear."),
)
_REFINER = (
    ("norm1.", "norm1."), ("norm2.", "norm2."), ("attn.to_out.0.", "self_attn_proj."),
    ("ff.net.0.proj.", "mlp.fc1."), ("ff.net.2.", "mlp.fc2."), ("norm_out.linear.", "adaLN_modulation.1."),
)
_BLOCK = (
    ("norm1.linear.", "img_mod.linear."), ("norm1_context.linear.", "txt_mod.linear."),
    ("attn.norm_q.", "img_attn_q_norm."), ("attn.norm_k.", "img_attn_k_norm."),
    ("attn.norm_added_q.", "txt_attn_q_norm."), ("attn.norm_added_k.", "txt_attn_k_norm."),
    ("attn.to_out.0.", "img_attn_proj."), ("attn.to_add_out.", "txt_attn_proj."),
    ("ff.net.0.proj.", "img_mlp.fc1."), ("ff.net.2.", "img_mlp.fc2."),
    ("ff_context.net.0.proj.", "txt_mlp.fc1."), ("ff_context.net.2.", "txt_mlp.fc2."),
)
_FUSED = {  # diffusers' separate projections -> the files' fused one
    "attn.to_": "img_attn_qkv.", "attn.add_": "txt_attn_qkv.",
}


def is_diffusers_hunyuan_video15(names: Any) -> bool:
    return DIFFUSERS_MARKER in set(names)


def fuse_projections(state: Mapping[str, Any], head: str, parts: tuple[str, ...], target: str,
                     out: dict[str, Any], used: set[str],
                     error: Callable[[str], Exception] = HunyuanVideo15KeyError) -> None:
    """diffusers' separate projections `head + part` concatenated (rows) into the files' fused
    `target` (weight and bias each when present); all or none of a set must be there. HunyuanVideo
    1.0's converter uses it too, with its own error class."""
    for suffix in ("weight", "bias"):
        keys = [f"{head}{part}.{suffix}" for part in parts]
        present = [key in state for key in keys]
        if not any(present):
            continue
        if not all(present):
            raise error(f"diffusers layout: {keys} are not all present")
        out[f"{target}{suffix}"] = torch.cat([state[key] for key in keys], dim=0)
        used.update(keys)


def convert_diffusers_state_dict(state: Mapping[str, Any]) -> dict[str, Any]:
    """diffusers' names -> the files' names (no prefix); unknown names raise."""
    out: dict[str, Any] = {}
    used: set[str] = set()
    for name in state:
        if name.startswith("transformer_blocks."):
            index = name.split(".")[1]
            fuse_projections(state, f"transformer_blocks.{index}.attn.to_", ("q", "k", "v"),
                  f"double_blocks.{index}.img_attn_qkv.", out, used)
            fuse_projections(state, f"transformer_blocks.{index}.attn.add_", ("q_proj", "k_proj", "v_proj"),
                  f"double_blocks.{index}.txt_attn_qkv.", out, used)
        elif name.startswith("context_embedder.token_refiner.refiner_blocks."):
            index = name.split(".")[3]
            fuse_projections(state, f"context_embedder.token_refiner.refiner_blocks.{index}.attn.to_", ("q", "k", "v"),
                  f"txt_in.individual_token_refiner.blocks.{index}.self_attn_qkv.", out, used)
    for name, tensor in state.items():
        if name in used:
            continue
        new = None
        if name.startswith("transformer_blocks."):
            _, index, rest = name.split(".", 2)
            new = next((f"double_blocks.{index}.{dst}{rest[len(src):]}" for src, dst in _BLOCK if rest.startswith(src)),
                       None)
        elif name.startswith("context_embedder.token_refiner.refiner_blocks."):
            parts = name.split(".", 4)
            index, rest = parts[3], parts[4]
            new = next((f"txt_in.individual_token_refiner.blocks.{index}.{dst}{rest[len(src):]}"
                        for src, dst in _REFINER if rest.startswith(src)), None)
        elif name.startswith("norm_out.linear."):
            scale, shift = tensor.chunk(2, dim=0)  # diffusers' AdaLayerNormContinuous: (scale, shift)
            out["final_layer.adaLN_modulation.1." + name[len("norm_out.linear."):]] = torch.cat([shift, scale], dim=0)
            continue
        else:
            new = next((dst + name[len(src):] for src, dst in _RENAMES if name.startswith(src)), None)
        if new is None:
            raise HunyuanVideo15KeyError(f"HunyuanVideo 1.5 (diffusers): no counterpart for {name!r}")
        out[new] = tensor
    return out


def lora_key_map(names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> the state-dict name it patches: the generic spellings over the files'
    names (`diffusion_model.<path>`, `lora_unet_<path_with_underscores>`, `transformer.<path>`)."""
    from comfy_core.families.lora_keys import UNET_PREFIX, add_diffusers_names, native_key_map

    key_map = native_key_map(names)
    same = {name[len(UNET_PREFIX):]: name for name in names if name.startswith(UNET_PREFIX)}
    add_diffusers_names(key_map, same, set(names), ("transformer.", "diffusion_model.", ""), ("lora_transformer_",))
    return key_map

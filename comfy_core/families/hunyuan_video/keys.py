"""HunyuanVideo 1.0 key layouts: diffusers' `HunyuanVideoTransformer3DModel` names to the released
files' (Tencent's, which ComfyUI's repackaged files keep; the network's names, dit.py).

diffusers splits the fused projections (the double blocks' `attn.to_q/k/v`, `add_q/k/v_proj`, the
refiner's `attn.to_q/k/v`, the single blocks' `attn.to_q/k/v` + `proj_mlp`, which the files hold as
one `linear1`) and stores the final layer's modulation as (scale, shift) where the files store
(shift, scale); everything else is a renaming. HunyuanVideo 1.5's diffusers files share the refiner
marker and carry `cond_type_embed` (not converted here).
"""
from __future__ import annotations

import functools
from typing import Any, Mapping

import torch

# HunyuanVideo 1.5's projection fusing and LoRA names (the same spellings over the same state-dict paths).
from comfy_core.families.hunyuan_video15.keys import fuse_projections, lora_key_map  # noqa: F401

DIFFUSERS_MARKER = "context_embedder.token_refiner.refiner_blocks.0.norm1.weight"
DIFFUSERS_SINGLE = "single_transformer_blocks.0.proj_out.weight"


class HunyuanVideoKeyError(ValueError):
    """A diffusers HunyuanVideo state dict that cannot be converted (a projection missing)."""


# diffusers' separate projections fused as HunyuanVideo 1.5's converter does, with this family's error.
_fuse = functools.partial(fuse_projections, error=HunyuanVideoKeyError)


_RENAMES = (
    ("x_embedder.proj.", "img_in.proj."),
    ("time_text_embed.timestep_embedder.linear_1.", "time_in.mlp.0."),
    ("time_text_embed.timestep_embedder.linear_2.", "time_in.mlp.2."),
    ("time_text_embed.guidance_embedder.linear_1.", "guidance_in.mlp.0."),
    ("time_text_embed.guidance_embedder.linear_2.", "guidance_in.mlp.2."),
    ("time_text_embed.text_embedder.linear_1.", "vector_in.in_layer."),
    ("time_text_embed.text_embedder.linear_2.", "vector_in.out_layer."),
    ("context_embedder.time_text_embed.timestep_embedder.linear_1.", "txt_in.t_embedder.mlp.0."),
    ("context_embedder.time_text_embed.timestep_embedder.linear_2.", "txt_in.t_embedder.mlp.2."),
    ("context_embedder.time_text_embed.text_embedder.linear_1.", "txt_in.c_embedder.linear_1."),
    ("context_embedder.time_text_embed.text_embedder.linear_2.", "txt_in.c_embedder.linear_2."),
    ("context_embedder.proj_in.", "txt_in.input_embedder."),
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
_SINGLE = (
    ("attn.norm_q.", "q_norm."), ("attn.norm_k.", "k_norm."), ("norm.linear.", "modulation.linear."),
    ("proj_out.", "linear2."),
)


def is_diffusers_hunyuan_video(names: Any) -> bool:
    names = set(names)
    return DIFFUSERS_MARKER in names and "cond_type_embed.weight" not in names


def convert_diffusers_state_dict(state: Mapping[str, Any]) -> dict[str, Any]:
    """diffusers' names -> the files' names (no prefix); unknown names raise."""
    out: dict[str, Any] = {}
    used: set[str] = set()
    for name in state:
        parts = name.split(".")
        if name.startswith("transformer_blocks."):
            head = f"transformer_blocks.{parts[1]}."
            _fuse(state, head + "attn.to_", ("q", "k", "v"), f"double_blocks.{parts[1]}.img_attn_qkv.", out, used)
            _fuse(state, head + "attn.add_", ("q_proj", "k_proj", "v_proj"),
                  f"double_blocks.{parts[1]}.txt_attn_qkv.", out, used)
        elif name.startswith("single_transformer_blocks."):
            head = f"single_transformer_blocks.{parts[1]}."
            _fuse(state, head, ("attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"),
                  f"single_blocks.{parts[1]}.linear1.", out, used)
        elif name.startswith("context_embedder.token_refiner.refiner_blocks."):
            _fuse(state, f"context_embedder.token_refiner.refiner_blocks.{parts[3]}.attn.to_", ("q", "k", "v"),
                  f"txt_in.individual_token_refiner.blocks.{parts[3]}.self_attn_qkv.", out, used)
    for name, tensor in state.items():
        if name in used:
            continue
        new = None
        if name.startswith("transformer_blocks."):
            _, index, rest = name.split(".", 2)
            new = next((f"double_blocks.{index}.{dst}{rest[len(src):]}" for src, dst in _BLOCK if rest.startswith(src)),
                       None)
        elif name.startswith("single_transformer_blocks."):
            _, index, rest = name.split(".", 2)
            new = next((f"single_blocks.{index}.{dst}{rest[len(src):]}" for src, dst in _SINGLE
                        if rest.startswith(src)), None)
        elif name.startswith("context_embedder.token_refiner.refiner_blocks."):
            pieces = name.split(".", 4)
            index, rest = pieces[3], pieces[4]
            new = next((f"txt_in.individual_token_refiner.blocks.{index}.{dst}{rest[len(src):]}"
                        for src, dst in _REFINER if rest.startswith(src)), None)
        elif name.startswith("norm_out.linear."):
            scale, shift = tensor.chunk(2, dim=0)  # diffusers' AdaLayerNormContinuous: (scale, shift)
            out["final_layer.adaLN_modulation.1." + name[len("norm_out.linear."):]] = torch.cat([shift, scale], dim=0)
            continue
        else:
            new = next((dst + name[len(src):] for src, dst in _RENAMES if name.startswith(src)), None)
        if new is None:
            raise HunyuanVideoKeyError(f"HunyuanVideo (diffusers): no counterpart for {name!r}")
        out[new] = tensor
    return out

"""diffusers' `CogVideoXTransformer3DModel` state-dict names <-> ComfyUI's (`comfy/ldm/cogvideo`).

The same tensors, renamed: `transformer_blocks.N` is `blocks.N`, its `attn1.to_q / to_k / to_v /
to_out.0 / norm_q / norm_k` are `q / k / v / attn_out / norm_q / norm_k`, `ff.net.0.proj` /
`ff.net.2` are `ff_proj` / `ff_out`; `time_embedding.linear_1` is `time_embedding_linear_1` (and
`ofs_embedding.*` alike); `patch_embed.*`, `norm1`, `norm2`, `norm_final`, `norm_out`, `proj_out` are
named alike.
"""
from __future__ import annotations

from typing import Any, Mapping

DIFFUSERS_MARKERS = ("time_embedding.linear_1.weight", "transformer_blocks.0.attn1.to_q.weight")
_TOP = (("time_embedding.linear_", "time_embedding_linear_"), ("ofs_embedding.linear_", "ofs_embedding_linear_"))
_BLOCK = ((".attn1.to_q.", ".q."), (".attn1.to_k.", ".k."), (".attn1.to_v.", ".v."),
          (".attn1.to_out.0.", ".attn_out."), (".attn1.norm_q.", ".norm_q."), (".attn1.norm_k.", ".norm_k."),
          (".ff.net.0.proj.", ".ff_proj."), (".ff.net.2.", ".ff_out."))


def is_diffusers_cogvideox(names: Any) -> bool:
    return all(marker in names for marker in DIFFUSERS_MARKERS)


def diffusers_to_comfy_name(name: str) -> str:
    for old, new in _TOP:
        if name.startswith(old):
            return new + name[len(old):]
    if name.startswith("transformer_blocks."):
        name = "blocks." + name[len("transformer_blocks."):]
        for old, new in _BLOCK:
            name = name.replace(old, new)
    return name


def comfy_to_diffusers_name(name: str) -> str:
    for new, old in _TOP:
        if name.startswith(old):
            return new + name[len(old):]
    if name.startswith("blocks."):
        name = "transformer_blocks." + name[len("blocks."):]
        for new, old in _BLOCK:
            name = name.replace(old, new)
    return name


def convert_diffusers_state_dict(state: Mapping[str, Any]) -> dict[str, Any]:
    return {diffusers_to_comfy_name(k): v for k, v in state.items()}


def lora_key_map(names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> target: the native names (ComfyUI's, kohya's) and diffusers' / PEFT's
    module paths under `transformer.` and `diffusion_model.`; every target a whole parameter."""
    from comfy_core.families.lora_keys import UNET_PREFIX, native_key_map

    key_map = native_key_map(names)
    for name in names:
        if not name.endswith(".weight"):
            continue
        layer = name[len(UNET_PREFIX):-len(".weight")]
        diffusers = comfy_to_diffusers_name(layer + ".weight")[:-len(".weight")]
        for prefix in ("transformer.", "diffusion_model."):
            key_map[prefix + diffusers] = name
        key_map["lora_transformer_" + diffusers.replace(".", "_")] = name
    return key_map

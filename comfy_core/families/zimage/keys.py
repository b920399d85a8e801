"""Z-Image key layouts: diffusers' `ZImageTransformer2DModel` names (also the layout of Tongyi-MAI's
own release) against ComfyUI's NextDiT names, and the LoRA spellings.

The two layouts differ in the attention (diffusers: separate `to_q` / `to_k` / `to_v`, `to_out.0`,
`norm_q` / `norm_k`; ComfyUI: one fused `qkv` with query rows, then key rows, then value rows,
`out`, `q_norm` / `k_norm`) and in the patch-size keyed embedders (`all_x_embedder.2-1`,
`all_final_layer.2-1`: ComfyUI's `x_embedder`, `final_layer`); every other name is shared.

`diffusers_key_map(config, output_prefix)` has the semantics of ComfyUI's
`comfy.utils.z_image_to_diffusers`: `{diffusers key: target}`, a target being a ComfyUI key or a
`(key, (dim, offset, size))` slice of the fused `qkv` (sized by the query and key/value head
counts, so grouped-query heads map too). `convert_diffusers_state_dict` builds ComfyUI-named
tensors from a diffusers-layout state dict; `lora_key_map` gives every spelling ComfyUI reads for
this model (comfy/lora.py's Lumina2 branch: `diffusion_model.<diffusers path>`,
`transformer.<diffusers path>`, `lycoris_<...>`, the bare diffusers path) plus the native and
kohya names (`diffusion_model.layers.0.attention.qkv`, `lora_unet_layers_0_attention_qkv`) and
OneTrainer's / musubi-tuner's `lora_transformer_...` / `lora_unet_<diffusers path>`.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch

X_EMBEDDER = "all_x_embedder.2-1."
FINAL_LAYER = "all_final_layer.2-1."
_BLOCK_GROUPS = ("layers", "noise_refiner", "context_refiner")
_SHARED_BLOCK = ("feed_forward.w1", "feed_forward.w2", "feed_forward.w3", "attention_norm1", "attention_norm2",
                 "ffn_norm1", "ffn_norm2")
_RENAMES = ((".attention.to_out.0.", ".attention.out."), (".attention.norm_q.", ".attention.q_norm."),
            (".attention.norm_k.", ".attention.k_norm."))


class ZImageKeyError(ValueError):
    """A diffusers-layout Z-Image state dict with missing or unsupported tensors."""


def is_diffusers_zimage(names: Iterable[str]) -> bool:
    """Whether `names` are a Z-Image transformer in diffusers' (and Tongyi-MAI's) layout."""
    names = set(names)
    return X_EMBEDDER + "weight" in names and "layers.0.attention.to_q.weight" in names


def diffusers_key_map(config: Any, output_prefix: str = "") -> dict[str, Any]:
    """`{diffusers key: ComfyUI target}` for a NextDiT of `config` (a `NextDiTConfig`)."""
    d = config.head_dim
    q, kv = config.n_heads * d, config.n_kv_heads * d
    out: dict[str, Any] = {}

    def block(name: str, modulated: bool) -> None:
        src, dst = name + ".", output_prefix + name + "."
        qkv = dst + "attention.qkv.weight"
        out[src + "attention.to_q.weight"] = (qkv, (0, 0, q))
        out[src + "attention.to_k.weight"] = (qkv, (0, q, kv))
        out[src + "attention.to_v.weight"] = (qkv, (0, q + kv, kv))
        out[src + "attention.to_out.0.weight"] = dst + "attention.out.weight"
        out[src + "attention.norm_q.weight"] = dst + "attention.q_norm.weight"
        out[src + "attention.norm_k.weight"] = dst + "attention.k_norm.weight"
        for shared in _SHARED_BLOCK:
            out[f"{src}{shared}.weight"] = f"{dst}{shared}.weight"
        if modulated:
            mod = "adaLN_modulation.0" if config.z_image_modulation else "adaLN_modulation.1"
            for end in ("weight", "bias"):
                out[f"{src}{mod}.{end}"] = f"{dst}{mod}.{end}"

    for i in range(config.n_layers):
        block(f"layers.{i}", True)
    for i in range(config.n_refiner_layers):
        block(f"noise_refiner.{i}", True)
        block(f"context_refiner.{i}", False)
    for end in ("weight", "bias"):
        out[X_EMBEDDER + end] = output_prefix + "x_embedder." + end
        out[FINAL_LAYER + "linear." + end] = output_prefix + "final_layer.linear." + end
        out[FINAL_LAYER + "adaLN_modulation.1." + end] = output_prefix + "final_layer.adaLN_modulation.1." + end
        for shared in ("t_embedder.mlp.0", "t_embedder.mlp.2", "cap_embedder.1"):
            out[f"{shared}.{end}"] = f"{output_prefix}{shared}.{end}"
    out["cap_embedder.0.weight"] = output_prefix + "cap_embedder.0.weight"
    if config.pad_tokens_multiple is not None:
        for token in ("x_pad_token", "cap_pad_token"):
            out[token] = output_prefix + token
    if getattr(config, "siglip_feat_dim", None) is not None:  # Z-Image Omni: named alike in both layouts
        for i in range(config.n_refiner_layers):
            block(f"siglip_refiner.{i}", False)
        for name in ("siglip_embedder.0.weight", "siglip_embedder.1.weight", "siglip_embedder.1.bias",
                     "siglip_pad_token"):
            out[name] = output_prefix + name
    return out


def _comfy_name(name: str) -> str:
    if name.startswith(X_EMBEDDER):
        return "x_embedder." + name[len(X_EMBEDDER):]
    if name.startswith(FINAL_LAYER):
        return "final_layer." + name[len(FINAL_LAYER):]
    if name.startswith("all_x_embedder.") or name.startswith("all_final_layer."):
        raise ZImageKeyError(f"Z-Image: only 2x2 patches (`2-1` embedders) are supported, found {name!r}")
    for old, new in _RENAMES:
        name = name.replace(old, new)
    return name


def convert_diffusers_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ComfyUI-named tensors (bare names) from a diffusers-layout Z-Image state dict: q, k and v
    of each block concatenated into `qkv`, the other tensors renamed (same objects)."""
    out: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if name.endswith(".attention.to_k.weight") or name.endswith(".attention.to_v.weight"):
            continue
        if name.endswith(".attention.to_q.weight"):
            block = name[: -len("to_q.weight")]
            try:
                parts = [state[block + part + ".weight"] for part in ("to_q", "to_k", "to_v")]
            except KeyError as exc:
                raise ZImageKeyError(f"Z-Image: {block}to_q.weight without {exc.args[0]!r}") from None
            out[block + "qkv.weight"] = torch.cat(parts, dim=0)
            continue
        out[_comfy_name(name)] = value
    for name in state:
        for part in ("to_k", "to_v"):
            if name.endswith(f".attention.{part}.weight") and name.replace(part, "to_q") not in state:
                raise ZImageKeyError(f"Z-Image: {name!r} without its to_q")
    return out


def lora_key_map(config: Any, names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> target for a Z-Image NextDiT (`config` its `NextDiTConfig`) whose
    state-dict names under `diffusion_model.` are `names` (see the module docstring)."""
    from comfy_core.families.lora_keys import UNET_PREFIX, add_diffusers_names, native_key_map

    key_map = native_key_map(names)
    add_diffusers_names(key_map, diffusers_key_map(config, output_prefix=UNET_PREFIX), set(names),
                        ("transformer.", "diffusion_model.", ""), ("lycoris_", "lora_transformer_", "lora_unet_"))
    return key_map

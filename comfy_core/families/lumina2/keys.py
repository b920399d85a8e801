"""Lumina-Image 2.0 key layouts: diffusers' `Lumina2Transformer2DModel` names against ComfyUI's
NextDiT names (which are Alpha-VLLM's original `models/model.py` names), and the LoRA spellings.

diffusers renames most modules: `time_caption_embed.timestep_embedder.linear_1/2` (ComfyUI
`t_embedder.mlp.0/2`), `time_caption_embed.caption_embedder.0/1` (`cap_embedder.0/1`), per block
`attn.to_q/to_k/to_v` (the fused `attention.qkv`: query rows, then the key and value rows of the
grouped heads), `attn.to_out.0` (`attention.out`), `attn.norm_q/norm_k` (`attention.q_norm/k_norm`),
`feed_forward.linear_1/2/3` (`feed_forward.w1/w2/w3`), `norm1.linear` (`adaLN_modulation.1`),
`norm1.norm` of a modulated block or `norm1` of a context refiner block (`attention_norm1`),
`norm2` (`attention_norm2`), and `norm_out.linear_1/2` (`final_layer.adaLN_modulation.1`,
`final_layer.linear`).

`diffusers_key_map(config, output_prefix)`: `{diffusers key: target}` (a ComfyUI key or a
`(key, (dim, offset, size))` slice of `qkv`); `convert_diffusers_state_dict` builds ComfyUI-named
tensors from a diffusers state dict; `lora_key_map` gives the native / kohya names and
`transformer.`, `diffusion_model.`, bare, `lycoris_`, `lora_transformer_` and `lora_unet_`
spellings of the diffusers names (ComfyUI reads Lumina 2 LoRAs through its Lumina2 branch of
comfy/lora.py).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Iterable, Mapping

import torch

CAPTION = "time_caption_embed.caption_embedder."


class Lumina2KeyError(ValueError):
    """A diffusers-layout Lumina 2 state dict with missing or inconsistent tensors."""


def is_diffusers_lumina2(names: Iterable[str]) -> bool:
    """Whether `names` are a Lumina 2 transformer in diffusers' layout."""
    names = set(names)
    # OmniGen2's own names share these two (comfy_core/families/omnigen2); its reference-image embedder tells it apart.
    return CAPTION + "1.weight" in names and "layers.0.attn.to_q.weight" in names \
        and "ref_image_patch_embedder.weight" not in names


def diffusers_key_map(config: Any, output_prefix: str = "") -> dict[str, Any]:
    """`{diffusers key: ComfyUI target}` for a Lumina 2 NextDiT of `config` (a `NextDiTConfig`)."""
    d = config.head_dim
    q, kv = config.n_heads * d, config.n_kv_heads * d
    out: dict[str, Any] = {}

    def block(name: str, modulated: bool) -> None:
        src, dst = name + ".", output_prefix + name + "."
        qkv = dst + "attention.qkv.weight"
        out[src + "attn.to_q.weight"] = (qkv, (0, 0, q))
        out[src + "attn.to_k.weight"] = (qkv, (0, q, kv))
        out[src + "attn.to_v.weight"] = (qkv, (0, q + kv, kv))
        out[src + "attn.to_out.0.weight"] = dst + "attention.out.weight"
        out[src + "attn.norm_q.weight"] = dst + "attention.q_norm.weight"
        out[src + "attn.norm_k.weight"] = dst + "attention.k_norm.weight"
        for i in (1, 2, 3):
            out[f"{src}feed_forward.linear_{i}.weight"] = f"{dst}feed_forward.w{i}.weight"
        out[src + "norm2.weight"] = dst + "attention_norm2.weight"
        out[src + "ffn_norm1.weight"] = dst + "ffn_norm1.weight"
        out[src + "ffn_norm2.weight"] = dst + "ffn_norm2.weight"
        if modulated:
            out[src + "norm1.norm.weight"] = dst + "attention_norm1.weight"
            for end in ("weight", "bias"):
                out[f"{src}norm1.linear.{end}"] = f"{dst}adaLN_modulation.1.{end}"
        else:
            out[src + "norm1.weight"] = dst + "attention_norm1.weight"

    for i in range(config.n_layers):
        block(f"layers.{i}", True)
    for i in range(config.n_refiner_layers):
        block(f"noise_refiner.{i}", True)
        block(f"context_refiner.{i}", False)
    for end in ("weight", "bias"):
        for theirs, ours in (("x_embedder", "x_embedder"),
                             ("time_caption_embed.timestep_embedder.linear_1", "t_embedder.mlp.0"),
                             ("time_caption_embed.timestep_embedder.linear_2", "t_embedder.mlp.2"),
                             (CAPTION + "1", "cap_embedder.1"), ("norm_out.linear_1", "final_layer.adaLN_modulation.1"),
                             ("norm_out.linear_2", "final_layer.linear")):
            out[f"{theirs}.{end}"] = f"{output_prefix}{ours}.{end}"
    out[CAPTION + "0.weight"] = output_prefix + "cap_embedder.0.weight"
    return out


def convert_diffusers_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ComfyUI-named tensors (bare names) from a diffusers-layout Lumina 2 state dict (q, k, v
    concatenated into `qkv`); any tensor the layout does not name is an error."""
    names = set(state)
    try:
        head = state["layers.0.attn.norm_q.weight"].shape[0]
        dim = state["x_embedder.weight"].shape[0]
        kv_heads = state["layers.0.attn.to_k.weight"].shape[0] // head
    except KeyError as exc:
        raise Lumina2KeyError(f"Lumina 2: diffusers tensor {exc.args[0]!r} is missing") from None
    # The key map needs the block counts and head layout only.
    config = SimpleNamespace(head_dim=head, n_heads=dim // head, n_kv_heads=kv_heads,
                             n_layers=len({n.split(".")[1] for n in names if n.startswith("layers.")}),
                             n_refiner_layers=len({n.split(".")[1] for n in names if n.startswith("noise_refiner.")}))
    key_map = diffusers_key_map(config)
    out: dict[str, torch.Tensor] = {}
    pieces: dict[str, dict[int, torch.Tensor]] = {}
    for name, value in state.items():
        target = key_map.get(name)
        if target is None:
            raise Lumina2KeyError(f"Lumina 2: diffusers tensor {name!r} has no ComfyUI name")
        if isinstance(target, str):
            out[target] = value
        else:
            pieces.setdefault(target[0], {})[target[1][1]] = value
    for fused, parts in pieces.items():
        if len(parts) != 3:
            raise Lumina2KeyError(f"Lumina 2: {fused!r} needs to_q, to_k and to_v, found {len(parts)}")
        out[fused] = torch.cat([parts[offset] for offset in sorted(parts)], dim=0)
    return out


def lora_key_map(config: Any, names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> target for a Lumina 2 NextDiT (`config` its `NextDiTConfig`) whose
    state-dict names under `diffusion_model.` are `names` (see the module docstring)."""
    from comfy_core.families.lora_keys import UNET_PREFIX, add_diffusers_names, native_key_map

    key_map = native_key_map(names)
    add_diffusers_names(key_map, diffusers_key_map(config, output_prefix=UNET_PREFIX), set(names),
                        ("transformer.", "diffusion_model.", ""), ("lycoris_", "lora_transformer_", "lora_unet_"))
    return key_map

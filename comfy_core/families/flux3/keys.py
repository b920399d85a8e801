"""FLUX 3 key layouts: diffusers' `Flux3Transformer2DModel` names against BFL's (ComfyUI's) names.

The two layouts differ only in names (no fused tensors), and in the final adaLN linear, whose
halves diffusers orders scale then shift (BFL: shift then scale); the renames are those diffusers'
own single-file converter applies (`convert_flux3_transformer_checkpoint_to_diffusers`):
`emb_in.` / `x_embedders.`, `txt_in` / `context_embedder`, `time_in` / `timestep_embedder`,
`ref_time_in` / `target_timestep_embedder`, `content_mode_blocks.` / `mode_blocks.`,
`single_blocks.` / `single_transformer_blocks.`, `*.lin` / `*.linear`, and inside a block
`q_proj` / `attn.to_q`, ..., `attn_out` / `attn.to_out.0`, `norm.query_norm.scale` /
`attn.norm_q.weight`, `mlp_in` / `ff.linear_in`, `mlp_out` / `ff.linear_out`. BFL's training-only
`repa_projectors.*` are not part of the network and are refused here (as any unknown tensor).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.checkpoint.keys import swap_scale_shift
from comfy_core.families.flux.keys import FluxKeyError, Target, _count, _group

_BLOCK = {
    "q_proj.weight": "attn.to_q.weight", "k_proj.weight": "attn.to_k.weight", "v_proj.weight": "attn.to_v.weight",
    "attn_out.weight": "attn.to_out.0.weight", "norm.query_norm.scale": "attn.norm_q.weight",
    "norm.key_norm.scale": "attn.norm_k.weight", "mlp_in.weight": "ff.linear_in.weight",
    "mlp_out.weight": "ff.linear_out.weight",
}
_EMBEDDERS = {"time_in": "timestep_embedder", "ref_time_in": "target_timestep_embedder"}


class Flux3KeyError(FluxKeyError):
    """A diffusers-layout FLUX 3 state dict with unknown or missing tensors."""


def _get(config: Any, key: str, default: Any = None) -> Any:
    return config.get(key, default) if isinstance(config, Mapping) else getattr(config, key, default)


def flux3_to_diffusers(config: Any, output_prefix: str = "") -> dict[str, Target]:
    """The diffusers -> BFL key map of a FLUX 3 with `depth` mode blocks per mode,
    `depth_single_blocks` single blocks, a reference mode when `cond_in_channels` is set and a
    flow-map embedder when `flow_map` (a `Flux3Config` or a mapping with those keys)."""
    depth, depth_single = int(_get(config, "depth", 0)), int(_get(config, "depth_single_blocks", 0))
    modes = ("image", "image_cond") if _get(config, "cond_in_channels") is not None else ("image",)
    key_map: dict[str, Target] = {}
    blocks = [(f"mode_blocks.{m}.{i}", f"content_mode_blocks.{m}.{i}") for m in modes for i in range(depth)]
    blocks += [(f"txt_mode_blocks.{i}", f"txt_mode_blocks.{i}") for i in range(depth)]
    blocks += [(f"single_transformer_blocks.{i}", f"single_blocks.{i}") for i in range(depth_single)]
    for src, dst in blocks:
        for bfl, diffusers in _BLOCK.items():
            key_map[f"{src}.{diffusers}"] = f"{output_prefix}{dst}.{bfl}"
    for mode in modes:
        key_map[f"x_embedders.{mode}.weight"] = f"{output_prefix}emb_in.{mode}.weight"
    for kind in ("early_stream_modulations", "single_stream_modulations"):
        for mode in (*modes, "txt"):
            key_map[f"{kind}.{mode}.linear.weight"] = f"{output_prefix}{kind}.{mode}.lin.weight"
    embedders = ("time_in", "ref_time_in") if _get(config, "flow_map", False) else ("time_in",)
    for bfl in embedders:
        key_map[f"{_EMBEDDERS[bfl]}.linear_1.weight"] = f"{output_prefix}{bfl}.in_layer.weight"
        key_map[f"{_EMBEDDERS[bfl]}.linear_2.weight"] = f"{output_prefix}{bfl}.out_layer.weight"
    key_map["context_embedder.weight"] = f"{output_prefix}txt_in.weight"
    key_map["proj_out.weight"] = f"{output_prefix}final_layer.image.linear.weight"
    key_map["norm_out.linear.weight"] = (f"{output_prefix}final_layer.image.adaLN_modulation.1.weight", None,
                                         swap_scale_shift)
    return key_map


def is_diffusers_flux3(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    """Whether the names under `prefix` are a diffusers `Flux3Transformer2DModel`."""
    return (prefix + "x_embedders.image.weight" in tensors
            and prefix + "early_stream_modulations.image.linear.weight" in tensors)


def diffusers_flux3_facts(tensors: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The map's facts (depths, reference mode, flow map) of a diffusers-layout FLUX 3."""
    if prefix + "x_embedders.image.weight" not in tensors:
        raise Flux3KeyError(f"FLUX 3 (diffusers): {prefix}x_embedders.image.weight is missing")
    cond = prefix + "x_embedders.image_cond.weight" in tensors
    return {"depth": _count(tensors, prefix, "txt_mode_blocks"),
            "depth_single_blocks": _count(tensors, prefix, "single_transformer_blocks"),
            "cond_in_channels": int(tensors[prefix + "x_embedders.image_cond.weight"].shape[1]) if cond else None,
            "flow_map": prefix + "target_timestep_embedder.linear_1.weight" in tensors}


def convert_diffusers_state_dict(state: Mapping[str, torch.Tensor], config: Any = None, prefix: str = "",
                                 output_prefix: str = "") -> dict[str, torch.Tensor]:
    """BFL-named tensors (with `output_prefix`) from a diffusers `Flux3Transformer2DModel` state dict
    under `prefix` (the final adaLN halves swapped). Raises `FluxKeyError` for unknown tensors."""
    key_map = flux3_to_diffusers(config or diffusers_flux3_facts(state, prefix), output_prefix)
    plain, transformed, slices = _group(state, key_map, prefix)
    if slices:  # no FLUX 3 tensor is fused
        raise Flux3KeyError(f"FLUX 3 (diffusers): unexpected sliced targets {sorted(slices)[:3]}")
    out = dict(plain)
    for target, (value, fn) in transformed.items():
        out[target] = fn(value)
    return out


def convert_bfl_state_dict_to_diffusers(state: Mapping[str, torch.Tensor], config: Any) -> dict[str, torch.Tensor]:
    """The diffusers-layout tensors of a bare BFL-named FLUX 3 state dict (for writing and tests)."""
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for key, target in flux3_to_diffusers(config).items():
        name = target if isinstance(target, str) else target[0]
        if name not in state:
            continue
        used.add(name)
        out[key] = state[name] if isinstance(target, str) else target[2](state[name])
    left = sorted(set(state) - used)
    if left:
        raise Flux3KeyError(f"FLUX 3: {len(left)} BFL tensors have no diffusers name: {', '.join(left[:5])}")
    return out


def lora_key_map(config: Any, names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> target for a FLUX 3 transformer whose state-dict names under
    `diffusion_model.` are `names`: ComfyUI's native and kohya names, diffusers / PEFT under
    `transformer.` and `diffusion_model.`, `lycoris_` / `lora_transformer_` underscored diffusers names."""
    from comfy_core.families.lora_keys import UNET_PREFIX, add_diffusers_names, native_key_map

    key_map = native_key_map(names)
    add_diffusers_names(key_map, flux3_to_diffusers(config, output_prefix=UNET_PREFIX), set(names),
                        ("transformer.", "diffusion_model."), ("lycoris_", "lora_transformer_"))
    return key_map

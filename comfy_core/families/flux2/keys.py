"""Flux.2 key layouts: diffusers' `Flux2Transformer2DModel` names against BFL's (ComfyUI's) names.

`flux2_to_diffusers(config, output_prefix)` maps each diffusers key to its BFL target in the form
Flux.1's map uses (comfy_core/families/flux/keys.py): a BFL key, a `(bfl_key, (dim, offset,
size))` slice of a fused tensor (diffusers splits the double blocks' `qkv` into `to_q/to_k/to_v`
and `add_{q,k,v}_proj`; the single blocks keep `linear1` fused as `attn.to_qkv_mlp_proj`), or
`(bfl_key, None, fn)` for the final adaLN linear, whose halves diffusers orders scale then shift
(BFL: shift then scale). The names are those diffusers' own single-file converter reads
(`convert_flux2_transformer_checkpoint_to_diffusers`); the LoRA key map reuses the table.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.checkpoint.keys import swap_scale_shift
from comfy_core.families.flux.keys import FluxKeyError, HeaderShape, Target, _group, _tile

_DOUBLE = {
    "attn.to_out.0": "img_attn.proj", "attn.to_add_out": "txt_attn.proj", "ff.linear_in": "img_mlp.0",
    "ff.linear_out": "img_mlp.2", "ff_context.linear_in": "txt_mlp.0", "ff_context.linear_out": "txt_mlp.2",
}
_DOUBLE_NORMS = {
    "attn.norm_q.weight": "img_attn.norm.query_norm.scale", "attn.norm_k.weight": "img_attn.norm.key_norm.scale",
    "attn.norm_added_q.weight": "txt_attn.norm.query_norm.scale",
    "attn.norm_added_k.weight": "txt_attn.norm.key_norm.scale",
}
_SINGLE = {"attn.to_qkv_mlp_proj": "linear1", "attn.to_out": "linear2"}
_SINGLE_NORMS = {"attn.norm_q.weight": "norm.query_norm.scale", "attn.norm_k.weight": "norm.key_norm.scale"}
_BASIC = {
    "x_embedder": "img_in", "context_embedder": "txt_in", "proj_out": "final_layer.linear",
    "time_guidance_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_guidance_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "time_guidance_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_guidance_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
    "double_stream_modulation_img.linear": "double_stream_modulation_img.lin",
    "double_stream_modulation_txt.linear": "double_stream_modulation_txt.lin",
    "single_stream_modulation.linear": "single_stream_modulation.lin",
}


class Flux2KeyError(FluxKeyError):
    """A diffusers-layout Flux.2 state dict with unknown, missing or inconsistent tensors."""


def _facts(config: Any) -> tuple[int, int, int]:
    get = config.get if isinstance(config, Mapping) else (lambda k, d=None: getattr(config, k, d))
    return int(get("depth", 0)), int(get("depth_single_blocks", 0)), int(get("hidden_size", 0))


def flux2_to_diffusers(config: Any, output_prefix: str = "") -> dict[str, Target]:
    """The diffusers -> BFL key map of a Flux.2 with `depth` double blocks, `depth_single_blocks`
    single blocks and width `hidden_size` (a `Flux2Config` or a mapping with those keys)."""
    depth, depth_single, hidden = _facts(config)
    key_map: dict[str, Target] = {}
    for i in range(depth):
        src, dst = f"transformer_blocks.{i}", f"{output_prefix}double_blocks.{i}"
        for names, stream in ((("to_q", "to_k", "to_v"), "img"), (("add_q_proj", "add_k_proj", "add_v_proj"), "txt")):
            for n, name in enumerate(names):
                key_map[f"{src}.attn.{name}.weight"] = (f"{dst}.{stream}_attn.qkv.weight", (0, n * hidden, hidden))
        for name, target in _DOUBLE.items():
            key_map[f"{src}.{name}.weight"] = f"{dst}.{target}.weight"
        for name, target in _DOUBLE_NORMS.items():
            key_map[f"{src}.{name}"] = f"{dst}.{target}"
    for i in range(depth_single):
        src, dst = f"single_transformer_blocks.{i}", f"{output_prefix}single_blocks.{i}"
        for name, target in _SINGLE.items():
            key_map[f"{src}.{name}.weight"] = f"{dst}.{target}.weight"
        for name, target in _SINGLE_NORMS.items():
            key_map[f"{src}.{name}"] = f"{dst}.{target}"
    for name, target in _BASIC.items():
        key_map[f"{name}.weight"] = f"{output_prefix}{target}.weight"
    key_map["norm_out.linear.weight"] = (f"{output_prefix}final_layer.adaLN_modulation.1.weight", None,
                                         swap_scale_shift)
    return key_map


def is_diffusers_flux2(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    """Whether the names under `prefix` are a diffusers `Flux2Transformer2DModel`."""
    return (prefix + "x_embedder.weight" in tensors
            and prefix + "double_stream_modulation_img.linear.weight" in tensors)


def diffusers_flux2_facts(tensors: Mapping[str, Any], prefix: str = "") -> dict[str, int]:
    """`{"depth", "depth_single_blocks", "hidden_size"}` of a diffusers-layout Flux.2."""
    from comfy_core.families.flux.keys import _count

    try:
        hidden = int(tensors[prefix + "x_embedder.weight"].shape[0])
    except KeyError:
        raise Flux2KeyError(f"Flux.2 (diffusers): {prefix}x_embedder.weight is missing") from None
    return {"depth": _count(tensors, prefix, "transformer_blocks"),
            "depth_single_blocks": _count(tensors, prefix, "single_transformer_blocks"), "hidden_size": hidden}


def convert_diffusers_state_dict(state: Mapping[str, torch.Tensor], config: Any = None, prefix: str = "",
                                 output_prefix: str = "") -> dict[str, torch.Tensor]:
    """BFL-named tensors (with `output_prefix`) from a diffusers `Flux2Transformer2DModel` state
    dict under `prefix` (q/k/v concatenated, the final adaLN halves swapped). Raises
    `FluxKeyError` for unknown tensors and fused tensors with missing slices."""
    key_map = flux2_to_diffusers(config or diffusers_flux2_facts(state, prefix), output_prefix)
    plain, transformed, slices = _group(state, key_map, prefix)
    out = dict(plain)
    for target, (value, fn) in transformed.items():
        out[target] = fn(value)
    for target, pieces in slices.items():
        dim, ordered = _tile(target, pieces)
        out[target] = torch.cat([value for _, _, _, value in ordered], dim=dim)
    return out


def diffusers_header_shapes(tensors: Mapping[str, Any], prefix: str = "") -> dict[str, HeaderShape]:
    """`convert_diffusers_state_dict` on shapes only (detection from a header)."""
    key_map = flux2_to_diffusers(diffusers_flux2_facts(tensors, prefix))
    plain, transformed, slices = _group(tensors, key_map, prefix)
    out = {name: HeaderShape(tuple(v.shape)) for name, v in plain.items()}
    out.update({name: HeaderShape(tuple(v.shape)) for name, (v, _) in transformed.items()})
    for target, pieces in slices.items():
        dim, ordered = _tile(target, pieces)
        first = list(ordered[0][3].shape)
        first[dim] = sum(size for _, size, _, _ in ordered)
        out[target] = HeaderShape(tuple(first))
    return out


def convert_bfl_state_dict_to_diffusers(state: Mapping[str, torch.Tensor], config: Any) -> dict[str, torch.Tensor]:
    """The diffusers-layout tensors of a bare BFL-named Flux.2 state dict (for writing and tests)."""
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for key, target in flux2_to_diffusers(config).items():
        name = target if isinstance(target, str) else target[0]
        if name not in state:
            continue
        used.add(name)
        if isinstance(target, str):
            out[key] = state[name]
        elif target[1] is None:
            out[key] = target[2](state[name])
        else:
            dim, offset, size = target[1]
            out[key] = state[name].narrow(dim, offset, size).contiguous()
    left = sorted(set(state) - used)
    if left:
        raise Flux2KeyError(f"Flux.2: {len(left)} BFL tensors have no diffusers name: {', '.join(left[:5])}")
    return out


def lora_key_map(config: Any, names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> target for a Flux.2 transformer whose state-dict names under
    `diffusion_model.` are `names`: ComfyUI's native and kohya names (`lora_unet_double_blocks_0_...`),
    diffusers / PEFT under `transformer.` and `diffusion_model.` (ai-toolkit), `lycoris_` /
    `lora_transformer_` underscored diffusers names."""
    from comfy_core.families.lora_keys import UNET_PREFIX, add_diffusers_names, native_key_map

    key_map = native_key_map(names)
    add_diffusers_names(key_map, flux2_to_diffusers(config, output_prefix=UNET_PREFIX), set(names),
                        ("transformer.", "diffusion_model."), ("lycoris_", "lora_transformer_"))
    return key_map

"""Flux.1 key layouts: diffusers' `FluxTransformer2DModel` names against BFL's (ComfyUI's) names.

`flux_to_diffusers(mmdit_config, output_prefix)` has the semantics of ComfyUI's
`comfy.utils.flux_to_diffusers`: `{diffusers_key: target}` where the target is a BFL key, a
`(bfl_key, (dim, offset, size))` slice of a fused BFL tensor (diffusers splits BFL's fused `qkv`
into `to_q/to_k/to_v` and, in the single blocks, `linear1` into `to_q/to_k/to_v/proj_mlp`), or
`(bfl_key, None, fn)` for a tensor transformed whole (the final adaLN's linear: diffusers'
`AdaLayerNormContinuous` orders its output scale then shift, BFL's `LastLayer` shift then scale;
`fn` is `swap_scale_shift`). The LoRA key maps reuse it.

`convert_diffusers_state_dict` builds BFL-named tensors from a diffusers-layout state dict (the
fused tensors concatenated from their slices); `diffusers_header_shapes` does the same for shapes
only, so `FluxConfig.detect_from_weights` runs on a diffusers file's header;
`convert_bfl_state_dict_to_diffusers` goes the other way (for writing and for tests).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union

import torch

from comfy_core.checkpoint.keys import swap_scale_shift  # noqa: F401 -- re-exported (the adaLN halves' swap)

Target = Union[str, tuple]


class FluxKeyError(ValueError):
    """A diffusers-layout Flux state dict with unknown, missing or inconsistent tensors."""


_DOUBLE_BLOCK = {
    "attn.to_out.0": "img_attn.proj", "norm1.linear": "img_mod.lin", "norm1_context.linear": "txt_mod.lin",
    "attn.to_add_out": "txt_attn.proj", "ff.net.0.proj": "img_mlp.0", "ff.net.2": "img_mlp.2",
    "ff_context.net.0.proj": "txt_mlp.0", "ff_context.net.2": "txt_mlp.2",
}
_DOUBLE_NORMS = {
    "attn.norm_q.weight": "img_attn.norm.query_norm.scale", "attn.norm_k.weight": "img_attn.norm.key_norm.scale",
    "attn.norm_added_q.weight": "txt_attn.norm.query_norm.scale",
    "attn.norm_added_k.weight": "txt_attn.norm.key_norm.scale",
}
_SINGLE_BLOCK = {"norm.linear": "modulation.lin", "proj_out": "linear2"}
_SINGLE_NORMS = {"attn.norm_q.weight": "norm.query_norm.scale", "attn.norm_k.weight": "norm.key_norm.scale"}
_BASIC = {
    "proj_out": "final_layer.linear", "x_embedder": "img_in",
    "time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "context_embedder": "txt_in",
    "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
    "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
    "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
    "controlnet_x_embedder": "pos_embed_input",
}


def _facts(mmdit_config: Any) -> tuple[int, int, int, int]:
    get = mmdit_config.get if isinstance(mmdit_config, Mapping) else (lambda k, d=None: getattr(mmdit_config, k, d))
    hidden = int(get("hidden_size", 0))
    mlp_ratio = float(get("mlp_ratio", 4.0))
    return int(get("depth", 0)), int(get("depth_single_blocks", 0)), hidden, int(hidden * mlp_ratio)


def flux_to_diffusers(mmdit_config: Any, output_prefix: str = "") -> dict[str, Target]:
    """The diffusers -> BFL key map for a Flux with `depth` double blocks, `depth_single_blocks`
    single blocks and `hidden_size` (a mapping such as ComfyUI's unet_config, or a `FluxConfig`;
    `mlp_ratio` defaults to Flux's 4). BFL keys get `output_prefix`."""
    depth, depth_single, hidden, mlp_hidden = _facts(mmdit_config)
    key_map: dict[str, Target] = {}
    for index in range(depth):
        src, dst = f"transformer_blocks.{index}", f"{output_prefix}double_blocks.{index}"
        for end in ("weight", "bias"):
            for names, stream in ((("to_q", "to_k", "to_v"), "img"), (("add_q_proj", "add_k_proj", "add_v_proj"), "txt")):
                for n, name in enumerate(names):
                    key_map[f"{src}.attn.{name}.{end}"] = (f"{dst}.{stream}_attn.qkv.{end}", (0, n * hidden, hidden))
            for name, target in _DOUBLE_BLOCK.items():
                key_map[f"{src}.{name}.{end}"] = f"{dst}.{target}.{end}"
        for name, target in _DOUBLE_NORMS.items():
            key_map[f"{src}.{name}"] = f"{dst}.{target}"
    for index in range(depth_single):
        src, dst = f"single_transformer_blocks.{index}", f"{output_prefix}single_blocks.{index}"
        for end in ("weight", "bias"):
            fused = f"{dst}.linear1.{end}"
            for n, name in enumerate(("to_q", "to_k", "to_v")):
                key_map[f"{src}.attn.{name}.{end}"] = (fused, (0, n * hidden, hidden))
            key_map[f"{src}.proj_mlp.{end}"] = (fused, (0, 3 * hidden, mlp_hidden))
            for name, target in _SINGLE_BLOCK.items():
                key_map[f"{src}.{name}.{end}"] = f"{dst}.{target}.{end}"
        for name, target in _SINGLE_NORMS.items():
            key_map[f"{src}.{name}"] = f"{dst}.{target}"
    for end in ("weight", "bias"):
        for name, target in _BASIC.items():
            key_map[f"{name}.{end}"] = f"{output_prefix}{target}.{end}"
        key_map[f"norm_out.linear.{end}"] = (f"{output_prefix}final_layer.adaLN_modulation.1.{end}", None,
                                             swap_scale_shift)
    return key_map


def _count(tensors: Mapping[str, Any], prefix: str, group: str) -> int:
    pattern = re.compile(re.escape(prefix + group) + r"\.(\d+)\.")
    indices = {int(m.group(1)) for m in map(pattern.match, tensors) if m}
    if indices and indices != set(range(len(indices))):
        raise FluxKeyError(f"Flux (diffusers): {prefix}{group} blocks are not numbered 0..{max(indices)} without gaps")
    return len(indices)


def is_diffusers_flux(tensors: Mapping[str, Any], prefix: str = "") -> bool:
    """Whether the names under `prefix` are a diffusers `FluxTransformer2DModel` (not SD3's
    `SD3Transformer2DModel`, which has `pos_embed.proj`, nor a Flux without pooled text input)."""
    return (prefix + "x_embedder.weight" in tensors and prefix + "time_text_embed.text_embedder.linear_1.weight" in tensors
            and prefix + "pos_embed.proj.weight" not in tensors
            and (prefix + "transformer_blocks.0.attn.add_q_proj.weight" in tensors
                 or prefix + "single_transformer_blocks.0.proj_mlp.weight" in tensors))


def diffusers_flux_facts(tensors: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"depth", "depth_single_blocks", "hidden_size", "mlp_ratio"}` of a diffusers-layout Flux,
    from names and shapes (what `flux_to_diffusers` needs)."""
    try:
        hidden = int(tensors[prefix + "x_embedder.weight"].shape[0])
    except KeyError:
        raise FluxKeyError(f"Flux (diffusers): {prefix}x_embedder.weight is missing") from None
    depth = _count(tensors, prefix, "transformer_blocks")
    depth_single = _count(tensors, prefix, "single_transformer_blocks")
    mlp_key = (f"{prefix}transformer_blocks.0.ff.net.0.proj.weight" if depth
               else f"{prefix}single_transformer_blocks.0.proj_mlp.weight")
    mlp_ratio = tensors[mlp_key].shape[0] / hidden if mlp_key in tensors else 4.0
    return {"depth": depth, "depth_single_blocks": depth_single, "hidden_size": hidden, "mlp_ratio": mlp_ratio}


def _config_facts(config: Any, state: Mapping[str, Any], prefix: str) -> Any:
    return diffusers_flux_facts(state, prefix) if config is None else config


def _group(state: Mapping[str, Any], key_map: Mapping[str, Target], prefix: str) -> tuple[dict, dict, dict]:
    """Split `state`'s keys by map entry kind: plain, transformed, and slices per fused target."""
    plain: dict[str, Any] = {}
    transformed: dict[str, tuple[Any, Callable]] = {}
    slices: dict[str, list[tuple[int, int, int, str, Any]]] = {}
    unknown = []
    for key, value in state.items():
        name = key[len(prefix):] if key.startswith(prefix) else None
        target = key_map.get(name) if name is not None else None
        if target is None:
            unknown.append(key)
        elif isinstance(target, str):
            plain[target] = value
        elif target[1] is None:
            transformed[target[0]] = (value, target[2])
        else:
            dim, offset, size = target[1]
            slices.setdefault(target[0], []).append((dim, offset, size, key, value))
    if unknown:
        shown = ", ".join(sorted(unknown)[:5]) + (" ..." if len(unknown) > 5 else "")
        raise FluxKeyError(f"Flux (diffusers): {len(unknown)} tensors have no BFL name: {shown}")
    return plain, transformed, slices


def _tile(target: str, pieces: list[tuple[int, int, int, str, Any]]) -> tuple[int, list[tuple[int, int, str, Any]]]:
    """The pieces of one fused tensor in order along their axis; raises when they leave a gap,
    overlap, or do not have the sizes the map gives."""
    dims = {p[0] for p in pieces}
    if len(dims) != 1:
        raise FluxKeyError(f"Flux (diffusers): the slices of {target} are on several axes")
    dim = dims.pop()
    ordered = sorted(pieces, key=lambda p: p[1])
    end = 0
    for _, offset, size, key, value in ordered:
        if offset != end:
            raise FluxKeyError(f"Flux (diffusers): {target} is missing its slice at {end} (next: {key})")
        if value.shape[dim] != size:
            raise FluxKeyError(f"Flux (diffusers): {key} has {value.shape[dim]} rows, expected {size}")
        end += size
    return dim, [(p[1], p[2], p[3], p[4]) for p in ordered]


def convert_diffusers_state_dict(state: Mapping[str, torch.Tensor], config: Any = None, prefix: str = "",
                                 output_prefix: str = "") -> dict[str, torch.Tensor]:
    """BFL-named tensors (with `output_prefix`) from a diffusers `FluxTransformer2DModel` state
    dict whose keys start with `prefix`. `config` is a `FluxConfig` or a mapping with `depth`,
    `depth_single_blocks`, `hidden_size` (and `mlp_ratio`); None reads them from the keys.
    Raises `FluxKeyError` for tensors the map does not know and fused tensors with missing slices."""
    key_map = flux_to_diffusers(_config_facts(config, state, prefix), output_prefix=output_prefix)
    plain, transformed, slices = _group(state, key_map, prefix)
    out = dict(plain)
    for target, (value, fn) in transformed.items():
        out[target] = fn(value)
    for target, pieces in slices.items():
        dim, ordered = _tile(target, pieces)
        out[target] = torch.cat([value for _, _, _, value in ordered], dim=dim)
    return out


@dataclass(frozen=True)
class HeaderShape:
    """A name's shape without data, as a safetensors header entry (`.shape` only)."""

    shape: tuple[int, ...]


def diffusers_header_shapes(tensors: Mapping[str, Any], config: Any = None, prefix: str = "",
                            output_prefix: str = "") -> dict[str, HeaderShape]:
    """`convert_diffusers_state_dict` on shapes only: the BFL names a diffusers-layout file would
    load as, each with its shape (`.shape`), for detection from a header."""
    key_map = flux_to_diffusers(_config_facts(config, tensors, prefix), output_prefix=output_prefix)
    plain, transformed, slices = _group(tensors, key_map, prefix)
    out = {name: HeaderShape(tuple(v.shape)) for name, v in plain.items()}
    out.update({name: HeaderShape(tuple(v.shape)) for name, (v, _) in transformed.items()})
    for target, pieces in slices.items():
        dim, ordered = _tile(target, pieces)
        first = list(ordered[0][3].shape)
        first[dim] = sum(size for _, size, _, _ in ordered)
        out[target] = HeaderShape(tuple(first))
    return out


def convert_bfl_state_dict_to_diffusers(state: Mapping[str, torch.Tensor], config: Any, prefix: str = "",
                                        output_prefix: str = "") -> dict[str, torch.Tensor]:
    """The diffusers-layout tensors (with `output_prefix`) of a BFL-named state dict under
    `prefix`: slices of the fused tensors (contiguous copies), the final adaLN halves swapped.
    Raises `FluxKeyError` for BFL tensors the map does not reach."""
    key_map = flux_to_diffusers(config, output_prefix=prefix)
    used: set[str] = set()
    out: dict[str, torch.Tensor] = {}
    for diffusers_key, target in key_map.items():
        name = target if isinstance(target, str) else target[0]
        if name not in state:
            continue
        used.add(name)
        value = state[name]
        if isinstance(target, str):
            out[output_prefix + diffusers_key] = value
        elif target[1] is None:
            out[output_prefix + diffusers_key] = target[2](value)
        else:
            dim, offset, size = target[1]
            out[output_prefix + diffusers_key] = value.narrow(dim, offset, size).contiguous()
    left = sorted(k for k in state if k.startswith(prefix) and k not in used)
    if left:
        raise FluxKeyError(f"Flux: {len(left)} BFL tensors have no diffusers name: {', '.join(left[:5])}")
    return out


def lora_key_map(config: Any, names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> target for a Flux transformer (`config` its `FluxConfig`) whose state-dict
    names under `diffusion_model.` are `names` (`comfy_core.lora.dit_keymap`: native, kohya,
    diffusers / PEFT under `transformer.`, OneTrainer, LyCORIS, and `single_blocks.N.linear1_qkv`)."""
    from comfy_core.families.lora_keys import UNET_PREFIX, add_diffusers_names, native_key_map

    present = set(names)
    key_map = native_key_map(names)
    add_diffusers_names(key_map, flux_to_diffusers(config, output_prefix=UNET_PREFIX), present,
                        ("transformer.",), ("lycoris_", "lora_transformer_"))
    for name in names:
        if name.endswith(".linear1.weight"):
            # The attention rows of a single block's fused linear1 ([3h + mlp, h]): q, k, v.
            key_map[name[: -len(".linear1.weight")] + ".linear1_qkv"] = (name, (0, 0, 3 * config.hidden_size))
    return key_map

"""diffusers' `SD3Transformer2DModel` / `SD3ControlNetModel` names -> SAI's MMDiT names.

The map has the semantics of ComfyUI's `comfy.utils.mmdit_to_diffusers(mmdit_config,
output_prefix)` (the contract packs use): `{diffusers_key: sai_key}` for a plain rename,
`{diffusers_key: (sai_key, (dim, offset, size))}` for a slice of a fused tensor (diffusers' separate
`to_q` / `to_k` / `to_v` and `add_{q,k,v}_proj` are the three thirds of SAI's `attn.qkv`), and
`{diffusers_key: (sai_key, None, fn)}` where the tensor is transformed: diffusers'
`AdaLayerNormContinuous` (`norm_out`, and the last block's pre-only `norm1_context`) emits
(scale, shift) where SAI's adaLN emits (shift, scale), so the two halves are swapped.

`convert_diffusers_state_dict(state, config)` applies it to tensors; `sai_shapes_from_diffusers`
applies it to shapes only (safetensors header entries), so `MMDiTConfig.detect_from_weights` can
read a diffusers-layout file without touching its data.
"""
from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Union

import torch

from comfy_core.checkpoint.keys import swap_scale_shift  # noqa: F401 -- re-exported (the adaLN halves' swap)
KeyTarget = Union[str, tuple]

HEAD_DIM = 64  # SAI's MMDiT: width = 64 * depth, one 64-wide head per unit of depth


class MMDiTConfigError(ValueError):
    """MMDiT weights that are incomplete or inconsistent (names and shapes that no MMDiT has)."""


# (SAI name, diffusers name[, transform]) outside the blocks.
_BASIC: tuple[tuple, ...] = (
    ("context_embedder.bias", "context_embedder.bias"),
    ("context_embedder.weight", "context_embedder.weight"),
    ("t_embedder.mlp.0.bias", "time_text_embed.timestep_embedder.linear_1.bias"),
    ("t_embedder.mlp.0.weight", "time_text_embed.timestep_embedder.linear_1.weight"),
    ("t_embedder.mlp.2.bias", "time_text_embed.timestep_embedder.linear_2.bias"),
    ("t_embedder.mlp.2.weight", "time_text_embed.timestep_embedder.linear_2.weight"),
    ("x_embedder.proj.bias", "pos_embed.proj.bias"),
    ("x_embedder.proj.weight", "pos_embed.proj.weight"),
    ("y_embedder.mlp.0.bias", "time_text_embed.text_embedder.linear_1.bias"),
    ("y_embedder.mlp.0.weight", "time_text_embed.text_embedder.linear_1.weight"),
    ("y_embedder.mlp.2.bias", "time_text_embed.text_embedder.linear_2.bias"),
    ("y_embedder.mlp.2.weight", "time_text_embed.text_embedder.linear_2.weight"),
    ("pos_embed", "pos_embed.pos_embed"),
    ("final_layer.adaLN_modulation.1.bias", "norm_out.linear.bias", swap_scale_shift),
    ("final_layer.adaLN_modulation.1.weight", "norm_out.linear.weight", swap_scale_shift),
    ("final_layer.linear.bias", "proj_out.bias"),
    ("final_layer.linear.weight", "proj_out.weight"),
)

# (SAI name under joint_blocks.N, diffusers name under transformer_blocks.N): plain renames.
_BLOCK: tuple[tuple[str, str], ...] = (
    ("context_block.adaLN_modulation.1.bias", "norm1_context.linear.bias"),
    ("context_block.adaLN_modulation.1.weight", "norm1_context.linear.weight"),
    ("context_block.attn.proj.bias", "attn.to_add_out.bias"),
    ("context_block.attn.proj.weight", "attn.to_add_out.weight"),
    ("context_block.mlp.fc1.bias", "ff_context.net.0.proj.bias"),
    ("context_block.mlp.fc1.weight", "ff_context.net.0.proj.weight"),
    ("context_block.mlp.fc2.bias", "ff_context.net.2.bias"),
    ("context_block.mlp.fc2.weight", "ff_context.net.2.weight"),
    ("context_block.attn.ln_q.weight", "attn.norm_added_q.weight"),
    ("context_block.attn.ln_k.weight", "attn.norm_added_k.weight"),
    ("x_block.adaLN_modulation.1.bias", "norm1.linear.bias"),
    ("x_block.adaLN_modulation.1.weight", "norm1.linear.weight"),
    ("x_block.attn.proj.bias", "attn.to_out.0.bias"),
    ("x_block.attn.proj.weight", "attn.to_out.0.weight"),
    ("x_block.attn.ln_q.weight", "attn.norm_q.weight"),
    ("x_block.attn.ln_k.weight", "attn.norm_k.weight"),
    ("x_block.attn2.proj.bias", "attn2.to_out.0.bias"),
    ("x_block.attn2.proj.weight", "attn2.to_out.0.weight"),
    ("x_block.attn2.ln_q.weight", "attn2.norm_q.weight"),
    ("x_block.attn2.ln_k.weight", "attn2.norm_k.weight"),
    ("x_block.mlp.fc1.bias", "ff.net.0.proj.bias"),
    ("x_block.mlp.fc1.weight", "ff.net.0.proj.weight"),
    ("x_block.mlp.fc2.bias", "ff.net.2.bias"),
    ("x_block.mlp.fc2.weight", "ff.net.2.weight"),
)

# diffusers attention projection prefix -> (SAI fused qkv under joint_blocks.N, [q, k, v] names).
_FUSED: tuple[tuple[str, str, tuple[str, str, str]], ...] = (
    ("attn.", "x_block.attn.qkv", ("to_q", "to_k", "to_v")),
    ("attn.", "context_block.attn.qkv", ("add_q_proj", "add_k_proj", "add_v_proj")),
    ("attn2.", "x_block.attn2.qkv", ("to_q", "to_k", "to_v")),
)


def _depth_and_blocks(mmdit_config: Any) -> tuple[int, int]:
    if not isinstance(mmdit_config, Mapping):  # an MMDiTConfig
        return mmdit_config.depth, mmdit_config.num_blocks
    depth = int(mmdit_config.get("depth", 0))
    return depth, int(mmdit_config.get("num_blocks", depth))


def mmdit_to_diffusers(mmdit_config: Any, output_prefix: str = "") -> dict[str, KeyTarget]:
    """`{diffusers_key: sai_key | (sai_key, (dim, offset, size)) | (sai_key, None, fn)}` for an
    MMDiT of `depth` (width 64 * depth) with `num_blocks` joint blocks (default `depth`);
    `mmdit_config` is an `MMDiTConfig` or ComfyUI's dict (`{"depth": .., "num_blocks": ..}`).
    SAI names get `output_prefix`."""
    depth, num_blocks = _depth_and_blocks(mmdit_config)
    width = depth * HEAD_DIM
    key_map: dict[str, KeyTarget] = {}
    for i in range(num_blocks):
        source, target = f"transformer_blocks.{i}.", f"{output_prefix}joint_blocks.{i}."
        for end in ("weight", "bias"):
            for attn, fused, names in _FUSED:
                for third, name in enumerate(names):
                    key_map[f"{source}{attn}{name}.{end}"] = (f"{target}{fused}.{end}", (0, third * width, width))
        for sai, diffusers in _BLOCK:
            key_map[source + diffusers] = target + sai
    # The last block of the full model: its context stream is pre-only, an AdaLayerNormContinuous
    # in diffusers (ComfyUI keys this on depth - 1, so ControlNets with fewer blocks are untouched).
    last = depth - 1
    basic = _BASIC + (
        (f"joint_blocks.{last}.context_block.adaLN_modulation.1.bias",
         f"transformer_blocks.{last}.norm1_context.linear.bias", swap_scale_shift),
        (f"joint_blocks.{last}.context_block.adaLN_modulation.1.weight",
         f"transformer_blocks.{last}.norm1_context.linear.weight", swap_scale_shift),
    )
    for entry in basic:
        if len(entry) > 2:
            key_map[entry[1]] = (output_prefix + entry[0], None, entry[2])
        else:
            key_map[entry[1]] = output_prefix + entry[0]
    return key_map


def is_diffusers_mmdit(names: Any, prefix: str = "") -> bool:
    """Whether `names` (a mapping or a set of tensor names) hold a diffusers SD3 transformer or
    ControlNet under `prefix` (ComfyUI's test: joint-attention `add_q_proj` plus `pos_embed.proj`)."""
    return (f"{prefix}transformer_blocks.0.attn.add_q_proj.weight" in names
            and f"{prefix}pos_embed.proj.weight" in names)


def diffusers_depth_and_blocks(tensors: Mapping[str, Any], prefix: str = "") -> tuple[int, int]:
    """(depth, joint blocks) of a diffusers-layout MMDiT, from shapes: depth = width / 64."""
    try:
        width = tuple(tensors[prefix + "pos_embed.proj.weight"].shape)[0]
    except KeyError:
        raise MMDiTConfigError(f"diffusers MMDiT key {prefix}pos_embed.proj.weight is missing") from None
    pattern = re.compile(re.escape(prefix + "transformer_blocks.") + r"(\d+)\.")
    indices = {int(m.group(1)) for name in tensors if (m := pattern.match(name))}
    if not indices:
        raise MMDiTConfigError(f"diffusers MMDiT under {prefix!r} has no transformer_blocks")
    return width // HEAD_DIM, max(indices) + 1


def _resolve(state: Mapping[str, Any], key_map: Mapping[str, KeyTarget], prefix: str,
             join: Callable[[list], Any], transform: Callable[[Callable, Any], Any]) -> tuple[dict[str, Any], set[str]]:
    """Apply `key_map` to `state` (values tensors or shapes); returns (converted, used source keys)."""
    out: dict[str, Any] = {}
    used: set[str] = set()
    fused: dict[str, list[tuple[int, int, int, str]]] = {}
    for source, target in key_map.items():
        if prefix + source not in state:
            continue
        used.add(prefix + source)
        if isinstance(target, str):
            out[target] = state[prefix + source]
        elif target[1] is not None:
            dim, offset, size = target[1]
            fused.setdefault(target[0], []).append((offset, size, dim, prefix + source))
        else:
            out[target[0]] = transform(target[2], state[prefix + source])
    for target, parts in fused.items():
        parts.sort()
        expected = 0
        for offset, size, _, source in parts:
            if offset != expected:
                raise MMDiTConfigError(f"diffusers MMDiT: {target} lacks the slice at offset {expected} "
                                       f"(found {[p[3] for p in parts]})")
            expected = offset + size
        if len(parts) != 3:
            raise MMDiTConfigError(f"diffusers MMDiT: {target} needs q, k and v, found {[p[3] for p in parts]}")
        out[target] = join([state[p[3]] for p in parts])
    return out, used


def convert_diffusers_state_dict(state: Mapping[str, torch.Tensor], config: Any = None,
                                 prefix: str = "", output_prefix: str = "",
                                 keep_unmapped: bool = False) -> dict[str, torch.Tensor]:
    """A diffusers-layout MMDiT state dict (names under `prefix`) in SAI's names (under
    `output_prefix`): q/k/v concatenated into `qkv`, adaLN-continuous halves swapped.

    `config` gives depth and block count (an `MMDiTConfig` or `{"depth", "num_blocks"}`), read
    from the shapes when None. Names the map does not know are dropped, or with `keep_unmapped`
    passed through unchanged (a ControlNet's `pos_embed_input.*`, `controlnet_blocks.*`, as
    ComfyUI's `load_controlnet_mmdit` keeps them)."""
    if config is None:
        depth, num_blocks = diffusers_depth_and_blocks(state, prefix)
        config = {"depth": depth, "num_blocks": num_blocks}
    key_map = mmdit_to_diffusers(config, output_prefix)
    out, used = _resolve(state, key_map, prefix, lambda parts: torch.cat(parts, dim=0), lambda fn, t: fn(t))
    if keep_unmapped:
        for name, tensor in state.items():
            if name not in used and name.startswith(prefix):
                out.setdefault(output_prefix + name[len(prefix):], tensor)
    return out


def sai_shapes_from_diffusers(tensors: Mapping[str, Any], prefix: str = "", output_prefix: str = "",
                              keep_unmapped: bool = True) -> dict[str, SimpleNamespace]:
    """The SAI names and shapes a diffusers-layout file converts to (`{name: obj with .shape}`),
    from shapes only: for `MMDiTConfig.detect_from_weights` on a header."""
    depth, num_blocks = diffusers_depth_and_blocks(tensors, prefix)
    key_map = mmdit_to_diffusers({"depth": depth, "num_blocks": num_blocks}, output_prefix)
    shapes = {name: tuple(value.shape) for name, value in tensors.items()}

    def join(parts: list[tuple[int, ...]]) -> tuple[int, ...]:
        return (sum(p[0] for p in parts),) + tuple(parts[0][1:])

    out, used = _resolve(shapes, key_map, prefix, join, lambda fn, s: s)
    if keep_unmapped:
        for name, shape in shapes.items():
            if name not in used and name.startswith(prefix):
                out.setdefault(output_prefix + name[len(prefix):], shape)
    return {name: SimpleNamespace(shape=shape) for name, shape in out.items()}


def lora_key_map(config: Any, names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> target for an MMDiT whose state-dict names under `diffusion_model.` are
    `names` (`comfy_core.lora.dit_keymap`: native, kohya, diffusers / PEFT under `transformer.` and
    `base_model.model.`, OneTrainer, LyCORIS); `config` an `MMDiTConfig` or `{depth, num_blocks}`."""
    from comfy_core.families.lora_keys import UNET_PREFIX, add_diffusers_names, native_key_map

    key_map = native_key_map(names)
    add_diffusers_names(key_map, mmdit_to_diffusers(config, output_prefix=UNET_PREFIX), set(names),
                        ("transformer.", "base_model.model."), ("lora_transformer_", "lycoris_"))
    return key_map


__all__ = ["convert_diffusers_state_dict", "lora_key_map", "diffusers_depth_and_blocks", "is_diffusers_mmdit",
           "mmdit_to_diffusers", "sai_shapes_from_diffusers", "swap_scale_shift"]

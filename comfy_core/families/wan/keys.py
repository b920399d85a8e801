"""diffusers' `WanTransformer3DModel` / `WanVACETransformer3DModel` state-dict names <-> the
original Wan (and ComfyUI) names.

The two layouts hold the same tensors under other names (no fused weights): `attn1`/`attn2` are
`self_attn`/`cross_attn`, `to_q/to_k/to_v/to_out.0` are `q/k/v/o`, `add_k_proj/add_v_proj/
norm_added_k` are `k_img/v_img/norm_k_img`, the block's `scale_shift_table` is `modulation`,
`ffn.net.0.proj`/`ffn.net.2` are `ffn.0`/`ffn.2`, `condition_embedder.*` hold the time, text and
image embeddings, `proj_out`/`scale_shift_table` at the top are the head's, and diffusers'
`norm2` (the cross-attention LayerNorm, the only block norm with weights) is the original `norm3`.
VACE blocks' `proj_in`/`proj_out` are `before_proj`/`after_proj`. The table mirrors the one
diffusers' `convert_wan_transformer_to_diffusers` (loaders/single_file_utils.py) applies in the
other direction; written here.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

class WanLayoutError(ValueError):
    """A tensor name of neither Wan layout (another network, or a truncated conversion)."""


# (diffusers name, original name) for the top-level modules; matched on whole dotted prefixes.
_TOP = (
    ("condition_embedder.time_embedder.linear_1.", "time_embedding.0."),
    ("condition_embedder.time_embedder.linear_2.", "time_embedding.2."),
    ("condition_embedder.text_embedder.linear_1.", "text_embedding.0."),
    ("condition_embedder.text_embedder.linear_2.", "text_embedding.2."),
    ("condition_embedder.time_proj.", "time_projection.1."),
    ("condition_embedder.image_embedder.norm1.", "img_emb.proj.0."),
    ("condition_embedder.image_embedder.ff.net.0.proj.", "img_emb.proj.1."),
    ("condition_embedder.image_embedder.ff.net.2.", "img_emb.proj.3."),
    ("condition_embedder.image_embedder.norm2.", "img_emb.proj.4."),
    ("proj_out.", "head.head."),
)
_TOP_EXACT = (("scale_shift_table", "head.modulation"),
              ("condition_embedder.image_embedder.pos_embed", "img_emb.emb_pos"))
# Inside `blocks.N.` / `vace_blocks.N.`.
_BLOCK = (
    ("attn1.to_q.", "self_attn.q."), ("attn1.to_k.", "self_attn.k."), ("attn1.to_v.", "self_attn.v."),
    ("attn1.to_out.0.", "self_attn.o."), ("attn1.norm_q.", "self_attn.norm_q."), ("attn1.norm_k.", "self_attn.norm_k."),
    ("attn2.to_q.", "cross_attn.q."), ("attn2.to_k.", "cross_attn.k."), ("attn2.to_v.", "cross_attn.v."),
    ("attn2.to_out.0.", "cross_attn.o."), ("attn2.norm_q.", "cross_attn.norm_q."),
    ("attn2.norm_k.", "cross_attn.norm_k."), ("attn2.add_k_proj.", "cross_attn.k_img."),
    ("attn2.add_v_proj.", "cross_attn.v_img."), ("attn2.norm_added_k.", "cross_attn.norm_k_img."),
    ("ffn.net.0.proj.", "ffn.0."), ("ffn.net.2.", "ffn.2."), ("norm2.", "norm3."),
    ("proj_in.", "before_proj."), ("proj_out.", "after_proj."),
)
_BLOCK_EXACT = (("scale_shift_table", "modulation"),)
_BLOCK_NAME = re.compile(r"^((?:vace_)?blocks\.\d+\.)(.*)$")
# diffusers' attention modules may carry a norm of the added queries that Wan has no use for
# (`_keys_to_ignore_on_load_unexpected`).
_IGNORED = re.compile(r"\.attn2\.norm_added_q\.")


def is_diffusers_wan(names: Any) -> bool:
    """Whether the names are diffusers' Wan transformer (its time embedder and block attentions)."""
    names = set(names)
    return ("condition_embedder.time_embedder.linear_1.weight" in names
            and "blocks.0.attn1.to_q.weight" in names and "scale_shift_table" in names)


def _rename(name: str, pairs: tuple[tuple[str, str], ...], exact: tuple[tuple[str, str], ...], to_original: bool) -> str | None:
    for diffusers, original in exact:
        src, dst = (diffusers, original) if to_original else (original, diffusers)
        if name == src:
            return dst
    for diffusers, original in pairs:
        src, dst = (diffusers, original) if to_original else (original, diffusers)
        if name.startswith(src):
            return dst + name[len(src):]
    return None


def diffusers_to_original_name(name: str) -> str | None:
    """The original / ComfyUI name of one diffusers Wan tensor, None for names with no counterpart."""
    if _IGNORED.search(name):
        return None
    block = _BLOCK_NAME.match(name)
    if block:
        rest = _rename(block.group(2), _BLOCK, _BLOCK_EXACT, True)
        return None if rest is None else block.group(1) + rest
    if name.startswith(("patch_embedding.", "vace_patch_embedding.")):
        return name
    return _rename(name, _TOP, _TOP_EXACT, True)


def original_to_diffusers_name(name: str) -> str | None:
    """The diffusers name of one original Wan tensor (the inverse of `diffusers_to_original_name`)."""
    block = _BLOCK_NAME.match(name)
    if block:
        rest = _rename(block.group(2), _BLOCK, _BLOCK_EXACT, False)
        return None if rest is None else block.group(1) + rest
    if name.startswith(("patch_embedding.", "vace_patch_embedding.")):
        return name
    return _rename(name, _TOP, _TOP_EXACT, False)


def convert_diffusers_state_dict(state: Mapping[str, Any]) -> dict[str, Any]:
    """A diffusers Wan state dict in the original names (the same tensor objects). A name with no
    counterpart is a `WanLayoutError` naming it, so a different network is not loaded half-way."""
    out: dict[str, Any] = {}
    for name, tensor in state.items():
        if _IGNORED.search(name):
            continue
        original = diffusers_to_original_name(name)
        if original is None:
            raise WanLayoutError(f"Wan: diffusers tensor {name!r} has no counterpart in the Wan layout")
        out[original] = tensor
    return out


def convert_original_state_dict(state: Mapping[str, Any]) -> dict[str, Any]:
    """An original / ComfyUI Wan state dict in diffusers' names (for tests and exports)."""
    out: dict[str, Any] = {}
    for name, tensor in state.items():
        converted = original_to_diffusers_name(name)
        if converted is None:
            raise WanLayoutError(f"Wan: tensor {name!r} has no counterpart in diffusers' layout")
        out[converted] = tensor
    return out


def lora_key_map(names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> target for a Wan DiT whose state-dict names under `diffusion_model.` are
    `names` (`comfy_core.lora.dit_keymap`): the native names, musubi-tuner's kohya style,
    diffusion-pipe's / VideoX-Fun's `lora_unet__`, SimpleTuner's `lycoris_`, `transformer.` and the
    diffusers names; every target a whole parameter."""
    from comfy_core.families.lora_keys import UNET_PREFIX, native_key_map

    key_map = native_key_map(names)
    for name in names:
        if not name.endswith(".weight"):
            continue
        layer = name[len(UNET_PREFIX):-len(".weight")]
        underscored = layer.replace(".", "_")
        key_map["lora_unet__" + underscored] = name  # diffusion-pipe / VideoX-Fun
        key_map["lycoris_" + underscored] = name  # SimpleTuner's LyCORIS
        key_map["transformer." + layer] = name
        diffusers = original_to_diffusers_name(layer + ".weight")
        if diffusers is not None:
            diffusers_layer = diffusers[: -len(".weight")]
            key_map["transformer." + diffusers_layer] = name
            key_map["diffusion_model." + diffusers_layer] = name
            key_map["lora_transformer_" + diffusers_layer.replace(".", "_")] = name
    return key_map

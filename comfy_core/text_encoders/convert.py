"""Checkpoint keys -> transformers' `CLIPTextModelWithProjection` keys (transformers 5.x layout).

Target names: `text_model.embeddings.{token,position}_embedding.weight`,
`text_model.encoder.layers.N.{layer_norm1,self_attn.{q,k,v,out}_proj,layer_norm2,mlp.fc1,mlp.fc2}.*`,
`text_model.final_layer_norm.*`, `text_projection.weight`.

OpenCLIP -> transformers mapping (verified numerically in dependencies.md §3.5, and by our parity
test against a direct forward on the raw open_clip weights):
- `attn.in_proj_weight` [3W, W] / `in_proj_bias` [3W] split in three along dim 0 into q, k, v;
- `ln_1`/`ln_2` -> `layer_norm1`/`layer_norm2`; `mlp.c_fc`/`mlp.c_proj` -> `mlp.fc1`/`mlp.fc2`;
- `ln_final` -> `final_layer_norm`; `positional_embedding` [T, W] -> `position_embedding.weight`;
- `text_projection` [W, P] (used as `x @ P`) -> `text_projection.weight` = its transpose [P, W].

Every key under the prefix must be understood: an unknown one is a `TextEncoderKeyError`, never
dropped silently. The few keys that carry nothing a forward pass needs are listed in `_IGNORED`.
"""
from __future__ import annotations

import logging
import re
from typing import Mapping

import torch

from comfy_core.text_encoders.config import LAYOUT_HF, ClipTextConfig, hf_projection_key
from comfy_core.text_encoders.errors import TextEncoderKeyError

# position_ids: transformers 5.x recomputes it (non-persistent buffer), and some SD1 files carry
# a corrupted float copy. logit_scale: CLIP's contrastive temperature, unused for conditioning.
# attn_mask: OpenCLIP's causal mask buffer, rebuilt at run time.
_IGNORED = ("embeddings.position_ids", "logit_scale", "attn_mask")
# A full OpenCLIP model saved under the prefix also carries its image tower; it is not ours to load.
_IGNORED_SUBTREES = ("visual.",)

log = logging.getLogger(__name__)

_OPEN_CLIP_BLOCK = re.compile(r"transformer\.resblocks\.(\d+)\.(.+)")
_OPEN_CLIP_BLOCK_NAMES = {
    "ln_1.weight": "layer_norm1.weight", "ln_1.bias": "layer_norm1.bias",
    "ln_2.weight": "layer_norm2.weight", "ln_2.bias": "layer_norm2.bias",
    "attn.out_proj.weight": "self_attn.out_proj.weight", "attn.out_proj.bias": "self_attn.out_proj.bias",
    "mlp.c_fc.weight": "mlp.fc1.weight", "mlp.c_fc.bias": "mlp.fc1.bias",
    "mlp.c_proj.weight": "mlp.fc2.weight", "mlp.c_proj.bias": "mlp.fc2.bias",
}
_OPEN_CLIP_TOP = {
    "token_embedding.weight": "text_model.embeddings.token_embedding.weight",
    "positional_embedding": "text_model.embeddings.position_embedding.weight",
    "ln_final.weight": "text_model.final_layer_norm.weight",
    "ln_final.bias": "text_model.final_layer_norm.bias",
}


def convert_state_dict(config: ClipTextConfig, state_dict: Mapping[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, str]]:
    """Model key -> (tensor, checkpoint key it came from) for the tower `config` describes.

    Reads only the keys under `config.prefix` (plus a sibling `text_projection.weight` in the hf
    layout). Tensors are returned as views where possible (no copy), except the transposed
    OpenCLIP projection, which is made contiguous.
    """
    if config.layout == LAYOUT_HF:
        return _convert_hf(config, state_dict)
    return _convert_open_clip(config, state_dict)


def _under(prefix: str, state_dict: Mapping[str, torch.Tensor]) -> list[str]:
    return [k for k in state_dict if k.startswith(prefix)]


def _is_ignored(rest: str) -> bool:
    return rest in _IGNORED


def _convert_hf(config: ClipTextConfig, state_dict: Mapping[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, str]]:
    out: dict[str, tuple[torch.Tensor, str]] = {}
    projection_key = hf_projection_key(config.prefix)
    for key in _under(config.prefix, state_dict):
        rest = key[len(config.prefix):]
        if _is_ignored(rest) or key == projection_key:
            continue
        if not rest.startswith(("embeddings.", "encoder.layers.", "final_layer_norm.")):
            raise TextEncoderKeyError(f"unexpected text encoder key {key!r} (prefix {config.prefix!r}, hf layout)")
        out[f"text_model.{rest}"] = (state_dict[key], key)
    if projection_key in state_dict:
        out["text_projection.weight"] = (state_dict[projection_key], projection_key)
    return out


def _convert_open_clip(config: ClipTextConfig, state_dict: Mapping[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, str]]:
    out: dict[str, tuple[torch.Tensor, str]] = {}
    width = config.width
    skipped = 0
    for key in _under(config.prefix, state_dict):
        rest = key[len(config.prefix):]
        if rest.startswith(_IGNORED_SUBTREES):
            skipped += 1
            continue
        tensor = state_dict[key]
        if _is_ignored(rest):
            continue
        if rest in _OPEN_CLIP_TOP:
            out[_OPEN_CLIP_TOP[rest]] = (tensor, key)
            continue
        if rest == "text_projection":
            _check_shape(key, tensor, (width, config.projection_dim))
            out["text_projection.weight"] = (tensor.t().contiguous(), key)
            continue
        match = _OPEN_CLIP_BLOCK.fullmatch(rest)
        if match is None:
            raise TextEncoderKeyError(f"unexpected text encoder key {key!r} (prefix {config.prefix!r}, open_clip layout)")
        layer, name = match.group(1), match.group(2)
        base = f"text_model.encoder.layers.{layer}."
        if name in _OPEN_CLIP_BLOCK_NAMES:
            out[base + _OPEN_CLIP_BLOCK_NAMES[name]] = (tensor, key)
        elif name in ("attn.in_proj_weight", "attn.in_proj_bias"):
            expected = (3 * width, width) if name.endswith("weight") else (3 * width,)
            _check_shape(key, tensor, expected)
            suffix = "weight" if name.endswith("weight") else "bias"
            # in_proj stacks [q; k; v] along dim 0 (torch.nn.MultiheadAttention's packing).
            for part, piece in zip(("q_proj", "k_proj", "v_proj"), tensor.chunk(3, dim=0)):
                out[f"{base}self_attn.{part}.{suffix}"] = (piece, key)
        else:
            raise TextEncoderKeyError(f"unexpected text encoder key {key!r} (prefix {config.prefix!r}, open_clip layout)")
    if skipped:
        log.info("%s: skipped %d image-tower keys (%svisual.*), not used for text", config.slot, skipped, config.prefix)
    return out


def _check_shape(key: str, tensor: torch.Tensor, expected: tuple[int, ...]) -> None:
    if tuple(tensor.shape) != expected:
        raise TextEncoderKeyError(f"text encoder key {key!r}: expected shape {expected}, got {tuple(tensor.shape)}")


def to_open_clip_layout(model_state: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Inverse mapping: a `CLIPTextModelWithProjection` state dict -> OpenCLIP checkpoint keys.

    Used to save/export and by tests (round trips); `text_projection` is transposed back and
    q/k/v are stacked into `in_proj`.
    """
    inverse_top = {v: k for k, v in _OPEN_CLIP_TOP.items()}
    inverse_block = {v: k for k, v in _OPEN_CLIP_BLOCK_NAMES.items()}
    out: dict[str, torch.Tensor] = {}
    layer_re = re.compile(r"text_model\.encoder\.layers\.(\d+)\.(.+)")
    pending: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    for key, tensor in model_state.items():
        if key in inverse_top:
            out[prefix + inverse_top[key]] = tensor
        elif key == "text_projection.weight":
            out[prefix + "text_projection"] = tensor.t().contiguous()
        elif key == "text_model.embeddings.position_ids":
            continue
        elif (m := layer_re.fullmatch(key)) is not None:
            layer, name = m.groups()
            if name in inverse_block:
                out[f"{prefix}transformer.resblocks.{layer}.{inverse_block[name]}"] = tensor
            elif name.startswith("self_attn.") and name.split(".")[1] in ("q_proj", "k_proj", "v_proj"):
                part, suffix = name.split(".")[1], name.split(".")[2]
                pending.setdefault((layer, suffix), {})[part] = tensor
            else:
                raise TextEncoderKeyError(f"cannot map model key {key!r} to the open_clip layout")
        else:
            raise TextEncoderKeyError(f"cannot map model key {key!r} to the open_clip layout")
    for (layer, suffix), parts in pending.items():
        name = "in_proj_weight" if suffix == "weight" else "in_proj_bias"
        out[f"{prefix}transformer.resblocks.{layer}.attn.{name}"] = torch.cat(
            [parts["q_proj"], parts["k_proj"], parts["v_proj"]], dim=0)
    return out


def to_checkpoint_layout(config: ClipTextConfig, model_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A `CLIPTextModelWithProjection` state dict -> the checkpoint keys `config` was read from.

    The identity projection given to a tower that had none is not exported.
    """
    if config.layout != LAYOUT_HF:
        return to_open_clip_layout(model_state, config.prefix)
    out: dict[str, torch.Tensor] = {}
    for key, tensor in model_state.items():
        if key == "text_projection.weight":
            if config.has_projection:
                out[hf_projection_key(config.prefix)] = tensor
        elif key.startswith("text_model.") and key != "text_model.embeddings.position_ids":
            out[config.prefix + key[len("text_model."):]] = tensor
        elif key != "text_model.embeddings.position_ids":
            raise TextEncoderKeyError(f"cannot map model key {key!r} to the checkpoint layout of {config.prefix!r}")
    return out

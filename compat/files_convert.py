"""ComfyUI's `comfy/diffusers_convert.py` for packs: diffusers state dicts -> the LDM names, over
comfy_core/checkpoint/diffusers_keys.py (the tables our diffusers loaders use).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    import torch


def convert_unet_state_dict(unet_state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A diffusers `UNet2DConditionModel` state dict under the LDM (openaimodel) names."""
    from comfy_core.checkpoint.diffusers_keys import unet_names

    return {ours: unet_state_dict[theirs] for ours, theirs in unet_names(unet_state_dict).items()}


def convert_vae_state_dict(vae_state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A diffusers `AutoencoderKL` state dict under the LDM names; the mid-block attention
    projections (linear in diffusers) become the LDM 1x1 convolutions."""
    from comfy_core.checkpoint.diffusers_keys import vae_names

    out = {}
    for ours, theirs in vae_names(vae_state_dict).items():
        tensor = vae_state_dict[theirs]
        if ".mid.attn_1." in ours and ours.endswith(".weight") and tensor.dim() == 2:
            tensor = tensor.reshape(*tensor.shape, 1, 1)
        out[ours] = tensor
    return out


def convert_text_enc_state_dict(text_enc_dict: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    """CLIP-L: diffusers and the LDM checkpoints use the same transformers names (unchanged)."""
    return text_enc_dict


def convert_text_enc_state_dict_v20(text_enc_dict: Mapping[str, torch.Tensor], prefix: str = "") -> dict:
    """An OpenCLIP text tower in transformers' names (diffusers' SD2 `text_encoder`) -> OpenCLIP's
    (`transformer.resblocks.N.attn.in_proj_weight`, ...), q/k/v fused back."""
    import torch

    from compat.files_utils import _OPEN_CLIP_BLOCK, _OPEN_CLIP_TOP

    source = {k[len(prefix):]: v for k, v in text_enc_dict.items() if k.startswith(prefix)}
    out: dict[str, torch.Tensor] = {}
    fused: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    top = {f"text_model.{new}": old for old, new in _OPEN_CLIP_TOP}
    block_parts = {new: old for old, new in _OPEN_CLIP_BLOCK}
    for key, tensor in source.items():
        if key in top:
            out[top[key]] = tensor
            continue
        if key.startswith("text_model.encoder.layers."):
            rest = key[len("text_model.encoder.layers."):]
            index, _, name = rest.partition(".")
            module, _, kind = name.rpartition(".")
            if module in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
                fused.setdefault((index, kind), {})[module[-6]] = tensor
                continue
            if module in block_parts:
                out[f"transformer.resblocks.{index}.{block_parts[module]}.{kind}"] = tensor
                continue
        if key == "text_projection.weight":
            out["text_projection"] = tensor.transpose(0, 1).contiguous()
            continue
        if key.endswith("position_ids"):
            continue
        raise KeyError(f"convert_text_enc_state_dict_v20: no OpenCLIP name for {key!r}")
    for (index, kind), parts in fused.items():
        missing = sorted({"q", "k", "v"} - set(parts))
        if missing:
            raise KeyError(f"convert_text_enc_state_dict_v20: layer {index} lacks the {missing} projection {kind}")
        out[f"transformer.resblocks.{index}.attn.in_proj_{kind}"] = torch.cat([parts["q"], parts["k"], parts["v"]])
    return out

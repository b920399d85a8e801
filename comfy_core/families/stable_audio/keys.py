"""Stable Audio DiT key names: diffusers' `StableAudioDiTModel` layout -> ComfyUI's (the released
single file's `model.model.` names, `dit.py`).

diffusers splits what ComfyUI fuses: self-attention `to_q` / `to_k` / `to_v` become `to_qkv`
(stacked in that order), cross-attention `to_k` / `to_v` become `to_kv`; its LayerNorm biases
(zeros in the released weights, which ComfyUI drops) are dropped; the Fourier feature vector
`time_proj.weight` `[F]` becomes `timestep_features.weight` `[F, 1]`; diffusers computes the RoPE
frequencies in its pipeline, so `transformer.rotary_pos_emb.inv_freq` is written as that pipeline
computes them (`1 / 10000^(2i / r)`, r = head width / 2, at least 32 as stable-audio-tools has it).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch

from comfy_core.families.stable_audio.dit import NUM_HEADS

_RENAMES = (("time_proj.", "timestep_features."), ("timestep_proj.", "to_timestep_embed."),
            ("global_proj.", "to_global_embed."), ("cross_attention_proj.", "to_cond_embed."),
            ("proj_in.", "transformer.project_in."), ("proj_out.", "transformer.project_out."))
_BLOCK = {"norm1.weight": "pre_norm.gamma", "norm2.weight": "cross_attend_norm.gamma",
          "norm3.weight": "ff_norm.gamma", "attn1.to_out.0.weight": "self_attn.to_out.weight",
          "attn2.to_q.weight": "cross_attn.to_q.weight", "attn2.to_out.0.weight": "cross_attn.to_out.weight",
          "ff.net.0.proj.weight": "ff.ff.0.proj.weight", "ff.net.0.proj.bias": "ff.ff.0.proj.bias",
          "ff.net.2.weight": "ff.ff.2.weight", "ff.net.2.bias": "ff.ff.2.bias"}
_DROPPED = ("norm1.bias", "norm2.bias", "norm3.bias")


def is_diffusers_stable_audio(names: Iterable[str]) -> bool:
    names = set(names)
    return "time_proj.weight" in names and any(n.startswith("transformer_blocks.0.attn2.") for n in names)


def rotary_inv_freq(head_dim: int) -> torch.Tensor:
    """The RoPE frequencies of heads `head_dim` wide (stable-audio-tools' rule)."""
    rot = max(head_dim // 2, 32)
    return 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))


def convert_diffusers_state_dict(state: Mapping[str, torch.Tensor], num_heads: int = NUM_HEADS) -> dict[str, Any]:
    """diffusers' names -> ComfyUI's (no prefix); `num_heads` gives the head width of the RoPE table."""
    out: dict[str, Any] = {}
    fused: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for name, value in state.items():
        if name.startswith("transformer_blocks."):
            _, index, rest = name.split(".", 2)
            block = f"transformer.layers.{index}."
            if rest in _DROPPED:
                continue
            if rest in _BLOCK:
                out[block + _BLOCK[rest]] = value
            elif rest in ("attn1.to_q.weight", "attn1.to_k.weight", "attn1.to_v.weight"):
                fused.setdefault((int(index), "self_attn.to_qkv.weight"), {})[rest.split(".")[1][-1]] = value
            elif rest in ("attn2.to_k.weight", "attn2.to_v.weight"):
                fused.setdefault((int(index), "cross_attn.to_kv.weight"), {})[rest.split(".")[1][-1]] = value
            else:
                raise KeyError(f"Stable Audio DiT: unknown diffusers key {name!r}")
            continue
        for old, new in _RENAMES:
            if name.startswith(old):
                name = new + name[len(old):]
                break
        if name == "timestep_features.weight":
            value = value.reshape(-1, 1)
        out[name] = value
    for (index, target), parts in fused.items():
        order = "qkv" if target.startswith("self_attn") else "kv"
        out[f"transformer.layers.{index}.{target}"] = torch.cat([parts[p] for p in order], dim=0)
    width = out["transformer.project_in.weight"].shape[0]
    out["transformer.rotary_pos_emb.inv_freq"] = rotary_inv_freq(width // num_heads)
    return out

"""diffusers' `LTX2VideoTransformer3DModel` (and `LTX2TextConnectors`' connectors) state-dict names
<-> ComfyUI's (Lightricks' original LTX-2) names.

The layouts hold the same tensors (nothing fused); only module names differ: the input
projections (`proj_in` / `patchify_proj`), the adaLN networks (`time_embed` / `adaln_single`,
`av_cross_attn_video_a2v_gate` / `av_ca_a2v_gate_adaln_single`, ...), the attention q/k norms
(`norm_q` / `q_norm`), the cross-modal tables and the connectors' block lists
(`transformer_blocks` / `transformer_1d_blocks`).
"""
from __future__ import annotations

from typing import Any, Mapping

DIFFUSERS_MARKERS = ("audio_proj_in.weight", "audio_time_embed.linear.weight")
_TOP = (
    ("proj_in.", "patchify_proj."), ("audio_proj_in.", "audio_patchify_proj."),
    ("time_embed.", "adaln_single."), ("audio_time_embed.", "audio_adaln_single."),
    ("prompt_adaln.", "prompt_adaln_single."), ("audio_prompt_adaln.", "audio_prompt_adaln_single."),
    ("av_cross_attn_video_scale_shift.", "av_ca_video_scale_shift_adaln_single."),
    ("av_cross_attn_video_a2v_gate.", "av_ca_a2v_gate_adaln_single."),
    ("av_cross_attn_audio_scale_shift.", "av_ca_audio_scale_shift_adaln_single."),
    ("av_cross_attn_audio_v2a_gate.", "av_ca_v2a_gate_adaln_single."),
    ("video_connector.transformer_blocks.", "video_embeddings_connector.transformer_1d_blocks."),
    ("audio_connector.transformer_blocks.", "audio_embeddings_connector.transformer_1d_blocks."),
    ("video_connector.", "video_embeddings_connector."), ("audio_connector.", "audio_embeddings_connector."),
)
_BLOCK = ((".norm_q.", ".q_norm."), (".norm_k.", ".k_norm."),
          (".audio_a2v_cross_attn_scale_shift_table", ".scale_shift_table_a2v_ca_audio"),
          (".video_a2v_cross_attn_scale_shift_table", ".scale_shift_table_a2v_ca_video"))


def is_diffusers_ltx2(names: Any) -> bool:
    """Whether the names (no prefix) are diffusers' LTX-2 transformer."""
    return all(marker in names for marker in DIFFUSERS_MARKERS) and "audio_patchify_proj.weight" not in names


def diffusers_to_comfy_name(name: str) -> str:
    for old, new in _TOP:
        if name.startswith(old):
            name = new + name[len(old):]
            break
    for old, new in _BLOCK:
        name = name.replace(old, new)
    return name


def comfy_to_diffusers_name(name: str) -> str:
    for new, old in _TOP:
        if name.startswith(old):
            name = new + name[len(old):]
            break
    for new, old in _BLOCK:
        name = name.replace(old, new)
    return name


def convert_diffusers_state_dict(state: Mapping[str, Any]) -> dict[str, Any]:
    """diffusers-named tensors -> ComfyUI's names (the same tensors)."""
    return {diffusers_to_comfy_name(k): v for k, v in state.items()}

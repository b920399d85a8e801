"""What the ACE-Step 1 network receives besides the noisy latent and the text states: ComfyUI's
`comfy/model_base.py` `ACEStep.extra_conds` (written here from that behaviour):

- `lyric_token_idx`: `conditioning_lyrics` (TextEncodeAceStepAudio's lyric token ids), when the
  conditioning has text states;
- `speaker_embeds`: zeros `[B, 512]` in the noise's dtype (ACE-Step's speaker input is unused);
- `lyrics_strength`: the conditioning's value, 1.0 by default (a constant across the batch).
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.models.model_conditions import ModelConditions

SPEAKER_DIM = 512


class AceStepConditions(ModelConditions):
    name = "ace"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        noise = kwargs["noise"]
        if kwargs.get("cross_attn") is not None and kwargs.get("conditioning_lyrics") is not None:
            out["lyric_token_idx"] = kwargs["conditioning_lyrics"]
        out["speaker_embeds"] = torch.zeros(noise.shape[0], SPEAKER_DIM, device=noise.device, dtype=noise.dtype)
        out["lyrics_strength"] = float(kwargs.get("lyrics_strength", 1.0))
        return out

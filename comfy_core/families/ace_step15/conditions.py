"""What the ACE-Step 1.5 network receives besides the noisy latent and the text states: ComfyUI's
`comfy/model_base.py` `ACEStep15.extra_conds`, from the conditioning keys its nodes set (written
here from that behaviour):

- `c_crossattn`: the text states; an all-zero one (ConditioningZeroOut's negative) also sets
  `replace_with_null_embeds` (the network's learned null embedding stands in for the encoder states);
- `lyric_embed`: `conditioning_lyrics` (TextEncodeAceStepAudio1.5's lyric token embeddings);
- `refer_audio`: the timbre reference: the last `reference_audio_timbre_latents` entry
  (ReferenceTimbreAudio), cut to the latent's length, with `is_covers` True; without one, the
  silence latent of the latent's length, and then the LM's `audio_codes` when the conditioning has
  them (the reference cut to its first 750 frames, 30 s), else `is_covers` False; a reference
  shorter than the latent is completed with the silence latent's frames from there on.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.ace_step15.silence import silence_latent
from comfy_core.models.model_conditions import ModelConditions

TIMBRE_FRAMES_WITH_CODES = 750


class AceStep15Conditions(ModelConditions):
    name = "ace1.5"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        noise = kwargs["noise"]
        device = kwargs.get("device") or noise.device
        length = noise.shape[2]
        cross_attn = kwargs.get("cross_attn")
        if cross_attn is not None:
            if torch.count_nonzero(cross_attn) == 0:
                out["replace_with_null_embeds"] = True
            lyrics = kwargs.get("conditioning_lyrics")
            if lyrics is not None:
                out["lyric_embed"] = lyrics
        references = kwargs.get("reference_audio_timbre_latents")
        if references:
            refer = references[-1][:, :, :length]
            out["is_covers"] = True
        else:
            refer = silence_latent(length, device)
            codes = kwargs.get("audio_codes")
            if codes is not None:
                out["audio_codes"] = torch.tensor(codes, device=device)
                refer = refer[:, :, :TIMBRE_FRAMES_WITH_CODES]
            else:
                out["is_covers"] = False
        if refer.shape[2] < length:
            pad = silence_latent(length, device)
            refer = torch.cat([refer.to(pad), pad[:, :, refer.shape[2]:]], dim=2)
        out["refer_audio"] = refer
        return out

"""How Flux's text encoders combine (ComfyUI's `FluxClipModel.encode_token_weights`,
`comfy/text_encoders/flux.py`): the conditioning is T5-XXL's states, the pooled output CLIP-L's."""
from __future__ import annotations

from typing import Mapping

import torch

from comfy_core.text_encoders.encoder_set import CombineRule, EncoderSetSpec
from comfy_core.text_encoders.errors import TokenizeError


class FluxCombine(CombineRule):
    def __call__(self, spec: EncoderSetSpec, outputs: Mapping[str, torch.Tensor],
                 pooled: Mapping[str, torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
        t5 = next((o for o in spec.encoders if o.kind != "clip"), None)
        if t5 is None or t5.slot not in outputs:
            raise TokenizeError(f"encoder set {spec.name}: its T5 encoder is missing")
        return outputs[t5.slot], pooled.get(spec.pooled_from)

"""How SD3's text encoders combine (ComfyUI's `SD3ClipModel.encode_token_weights`,
`comfy/text_encoders/sd3_clip.py`): CLIP-L | CLIP-G along channels (cut to the shorter; an absent
one is zeros), zero-padded to T5's width, T5's tokens appended; pooled CLIP-L | CLIP-G (absent:
zeros). Widths are the present encoders' own, the nominal ones (768, 1280, 4096) for absent ones.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.text_encoders.encoder_set import CombineRule, EncoderSetSpec
from comfy_core.text_encoders.errors import TokenizeError


class SD3Combine(CombineRule):
    def skip_clips(self, spec: EncoderSetSpec, tokens: Mapping[str, Any]) -> bool:
        # No CLIP tokens at all (CLIPTextEncodeSD3's "none" padding of empty texts) means no CLIP
        # part, only T5's states and a zero pooled output.
        return all(len(tokens.get(o.token_key) or ()) == 0 for o in spec.encoders if o.kind == "clip")

    def __call__(self, spec: EncoderSetSpec, outputs: Mapping[str, torch.Tensor],
                 pooled: Mapping[str, torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
        clips = [o for o in spec.encoders if o.kind == "clip"]
        t5 = next((o for o in spec.encoders if o.kind != "clip"), None)
        width = _width(spec, t5.slot, outputs) if t5 is not None else 4096
        some = next((outputs[o.slot] for o in clips if o.slot in outputs), None)
        device = some.device if some is not None else next(iter(outputs.values())).device if outputs else None
        cond = None
        if some is not None:
            length = min(outputs[o.slot].shape[1] for o in clips if o.slot in outputs)
            parts = [outputs[o.slot][:, :length] if o.slot in outputs else
                     torch.zeros((some.shape[0], length, o.nominal_width), dtype=some.dtype, device=device)
                     for o in clips]
            if sum(p.shape[-1] for p in parts) > width:
                raise TokenizeError(f"encoder set {spec.name}: the CLIP states ({sum(p.shape[-1] for p in parts)} "
                                    f"wide) are wider than T5's {width}")
            cond = torch.cat(parts, dim=-1)
            cond = torch.nn.functional.pad(cond, (0, width - cond.shape[-1]))
        if t5 is not None and t5.slot in outputs:
            cond = outputs[t5.slot] if cond is None else torch.cat([cond, outputs[t5.slot]], dim=-2)
        if cond is None:
            cond = torch.zeros((1, 77, width))
        if some is None:  # no CLIP part: ComfyUI's zeros of CLIP-L's and CLIP-G's nominal widths
            return cond, torch.zeros((1, sum(o.nominal_width for o in clips)), device=device)
        pooled_parts = [pooled[o.slot] if pooled.get(o.slot) is not None else
                        torch.zeros((1, o.nominal_width), device=device) for o in clips]
        return cond, torch.cat(pooled_parts, dim=-1)


def _width(spec: EncoderSetSpec, slot: str, outputs: Mapping[str, torch.Tensor]) -> int:
    """A slot's output width: the encoder's own when present, else the nominal one."""
    source = outputs.get(slot)
    return int(source.shape[-1]) if source is not None else spec.options(slot).nominal_width

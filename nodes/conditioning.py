"""Conditioning nodes with ComfyUI's names, inputs, outputs and semantics:
CLIPTextEncode, CLIPSetLastLayer, ConditioningCombine, ConditioningSetArea.

CLIPTextEncode uses ComfyUI's own prompt weighting (`(word:1.2)`, interpolated from the empty
prompt); AUTOMATIC1111's syntax is `CLIPTextEncodeWeighted` (nodes/prompt.py).
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION, Float, Input, Int, Output, String, node
import nodes.checks as checks


@node("CLIPTextEncode", category="conditioning", display_name="CLIP Text Encode (Prompt)",
      description="Encodes a text prompt using a CLIP model into an embedding that can be used to guide "
                  "the diffusion model towards generating specific images.",
      inputs=[String("text", default=None, multiline=True, dynamicPrompts=True, tooltip="The text to be encoded."),
              Input("clip", "CLIP", tooltip="The CLIP model used for encoding the text.")],
      outputs=[Output("CONDITIONING", tooltip="A conditioning containing the embedded text used to guide "
                                               "the diffusion model.")])
def clip_text_encode(text: str, clip: Any) -> tuple:
    clip = checks.clip(clip)
    tokens = clip.tokenize(checks.text(text))
    if hasattr(clip, "encode_from_tokens_scheduled"):
        return (clip.encode_from_tokens_scheduled(tokens),)
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    return ([[cond, {"pooled_output": pooled}]],)


@node("CLIPSetLastLayer", category="conditioning", display_name="CLIP Set Last Layer",
      inputs=[Input("clip", "CLIP"),
              Int("stop_at_clip_layer", default=-1, min=-24, max=-1, step=1)],
      outputs=[Output("CLIP")])
def clip_set_last_layer(clip: Any, stop_at_clip_layer: int) -> tuple:
    clip = checks.clip(clip)
    stop_at_clip_layer = checks.integer(stop_at_clip_layer, "stop_at_clip_layer", -24, -1)
    clip = clip.clone()
    clip.clip_layer(stop_at_clip_layer)
    return (clip,)


@node("ConditioningCombine", category="conditioning", display_name="Conditioning (Combine)",
      inputs=[Input("conditioning_1", "CONDITIONING"), Input("conditioning_2", "CONDITIONING")],
      outputs=[Output("CONDITIONING")])
def conditioning_combine(conditioning_1: list, conditioning_2: list) -> tuple:
    from comfy_core.text_encoders.conditioning import combine

    return (combine(checks.conditioning(conditioning_1, "conditioning_1"),
                    checks.conditioning(conditioning_2, "conditioning_2")),)


@node("ConditioningSetArea", category="conditioning", display_name="Conditioning (Set Area)",
      inputs=[Input("conditioning", "CONDITIONING"),
              Int("width", default=64, min=64, max=MAX_RESOLUTION, step=8),
              Int("height", default=64, min=64, max=MAX_RESOLUTION, step=8),
              Int("x", default=0, min=0, max=MAX_RESOLUTION, step=8),
              Int("y", default=0, min=0, max=MAX_RESOLUTION, step=8),
              Float("strength", default=1.0, min=0.0, max=10.0, step=0.01)],
      outputs=[Output("CONDITIONING")])
def conditioning_set_area(conditioning: list, width: int, height: int, x: int, y: int, strength: float) -> tuple:
    from comfy_core.text_encoders.conditioning import area_in_latent, set_values

    checks.conditioning(conditioning)
    return (set_values(conditioning, {"area": area_in_latent(width, height, x, y), "strength": strength,
                                      "set_area_to_bounds": False}),)

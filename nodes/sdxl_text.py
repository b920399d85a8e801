"""SDXL text encoding with size conditioning: CLIPTextEncodeSDXL and CLIPTextEncodeSDXLRefiner.

Names, inputs (and their order), defaults and semantics are ComfyUI's
(`comfy_extras/nodes_clip_sdxl.py`); both sit in "advanced/conditioning" with no display name.

- CLIPTextEncodeSDXL encodes `text_g` with CLIP-G and `text_l` with CLIP-L. When the two texts
  take a different number of 77-token chunks, the shorter side is padded with chunks of the empty
  prompt, so both encoders give the same sequence length (the two hidden states are concatenated
  along the width). The options carry the original size, crop offsets and target size that the
  sampler turns into SDXL's size embedding (`DiffusionModel.encode_adm`).
- CLIPTextEncodeSDXLRefiner encodes `text` and carries the aesthetic score and size the refiner's
  label embedding uses.

Prompt weighting is ComfyUI's (`(word:1.2)`), as in CLIPTextEncode.
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION, Float, Input, Int, Output, String, node
import nodes.checks as checks
from nodes.errors import NodeInputError

# torch-free at import: the encoding runs through the CLIP object's methods.


def _checked_size(value: Any, input_name: str) -> int:
    return checks.integer(value, input_name, 0, MAX_RESOLUTION)


def _encode(clip: Any, tokens: dict, add: dict) -> list:
    """tokens -> CONDITIONING `[[cond, {"pooled_output": pooled, **add}]]`."""
    if hasattr(clip, "encode_from_tokens_scheduled"):
        return clip.encode_from_tokens_scheduled(tokens, add_dict=add)
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    return [[cond, {"pooled_output": pooled, **add}]]


def pad_to_same_chunks(tokens_l: list, tokens_g: list, empty_l: list, empty_g: list) -> tuple[list, list]:
    """Append empty-prompt chunks to the shorter token list until both have as many chunks."""
    tokens_l, tokens_g = list(tokens_l), list(tokens_g)  # never extend the tokenizer's lists
    while len(tokens_l) < len(tokens_g):
        tokens_l += empty_l
    while len(tokens_g) < len(tokens_l):
        tokens_g += empty_g
    return tokens_l, tokens_g


def _size(name: str, default: int) -> Any:
    return Int(name, default=default, min=0, max=MAX_RESOLUTION)


@node("CLIPTextEncodeSDXL", display_name=None, category="advanced/conditioning",
      python_module="comfy_extras.nodes_clip_sdxl",
      inputs=[Input("clip", "CLIP"),
              _size("width", 1024), _size("height", 1024),
              _size("crop_w", 0), _size("crop_h", 0),
              _size("target_width", 1024), _size("target_height", 1024),
              String("text_g", default=None, multiline=True, dynamicPrompts=True),
              String("text_l", default=None, multiline=True, dynamicPrompts=True)],
      outputs=[Output("CONDITIONING")])
def clip_text_encode_sdxl(clip: Any, width: int, height: int, crop_w: int, crop_h: int, target_width: int,
                          target_height: int, text_g: str, text_l: str) -> tuple[list]:
    clip = checks.clip(clip)
    text_g = checks.text(text_g, "text_g")
    text_l = checks.text(text_l, "text_l")
    sizes = {key: _checked_size(value, key) for key, value in
             (("width", width), ("height", height), ("crop_w", crop_w), ("crop_h", crop_h),
              ("target_width", target_width), ("target_height", target_height))}
    tokens = dict(clip.tokenize(text_g))
    if "g" not in tokens or "l" not in tokens:
        raise NodeInputError("clip", "an SDXL CLIP (CLIP-L and CLIP-G)", f"one that tokenizes for {sorted(tokens)}")
    tokens_l = clip.tokenize(text_l)["l"]
    tokens_g = tokens["g"]
    if len(tokens_l) != len(tokens_g):
        empty = clip.tokenize("")
        tokens_l, tokens_g = pad_to_same_chunks(tokens_l, tokens_g, empty["l"], empty["g"])
    tokens["l"], tokens["g"] = tokens_l, tokens_g
    return (_encode(clip, tokens, sizes),)


@node("CLIPTextEncodeSDXLRefiner", display_name=None, category="advanced/conditioning",
      python_module="comfy_extras.nodes_clip_sdxl",
      inputs=[Float("ascore", default=6.0, min=0.0, max=1000.0, step=0.01),
              _size("width", 1024), _size("height", 1024),
              String("text", default=None, multiline=True, dynamicPrompts=True),
              Input("clip", "CLIP")],
      outputs=[Output("CONDITIONING")])
def clip_text_encode_sdxl_refiner(clip: Any, ascore: float, width: int, height: int, text: str) -> tuple[list]:
    # ComfyUI's method order `encode(clip, ascore, width, height, text)`, not the sockets' order:
    # packs call `nodes.CLIPTextEncodeSDXLRefiner().encode(...)` positionally.
    clip = checks.clip(clip)
    text = checks.text(text)
    add = {"aesthetic_score": checks.number(ascore, "ascore", 0.0, 1000.0), "width": _checked_size(width, "width"),
           "height": _checked_size(height, "height")}
    return (_encode(clip, clip.tokenize(text), add),)

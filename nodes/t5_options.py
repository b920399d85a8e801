"""T5TokenizerOptions with ComfyUI 0.3.64's name, sockets and semantics (comfy_extras/nodes_cond.py):
a CLIP clone whose T5 tokenizers add `min_padding` pad tokens to every prompt and pad it to at
least `min_length` tokens (ComfyUI's `<t5 type>_min_padding` / `<t5 type>_min_length` tokenizer
options). They replace the tokenizer's own defaults, as in ComfyUI: 0 means none, so
`min_length` 0 also drops Flux's usual padding to 256 tokens. The input CLIP is never changed.
"""
from __future__ import annotations

from typing import Any

from graph.native import Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

# ComfyUI's T5 tokenizer kinds, by the embedding key their options are named after.
T5_TYPES = ("t5xxl", "pile_t5xl", "t5base", "mt5xl", "umt5xxl")


def t5_types_of(clip: Any) -> tuple[str, ...]:
    """The T5 kinds to set options for: those among this engine's CLIP's encoder slots (its
    `set_tokenizer_option` refuses names no tokenizer of it reads), every kind for another CLIP
    (ComfyUI's sets them all and its tokenizers ignore the kinds they are not)."""
    slots = getattr(getattr(clip, "tokenizer", None), "slots", None)
    if slots is None:
        return T5_TYPES
    return tuple(kind for kind in T5_TYPES if kind in slots)


@node("T5TokenizerOptions", display_name=None, category="_for_testing/conditioning",
      python_module="comfy_extras.nodes_cond", experimental=True,
      inputs=[Input("clip", "CLIP"),
              Int("min_padding", default=0, min=0, max=10000, step=1),
              Int("min_length", default=0, min=0, max=10000, step=1)],
      outputs=[Output("CLIP")])
def t5_tokenizer_options(clip: Any, min_padding: int, min_length: int) -> tuple[Any]:
    """A clone with `<t5 type>_min_padding` and `<t5 type>_min_length` set for its T5 tokenizers."""
    clip = checks.clip(clip)
    min_padding = checks.integer(min_padding, "min_padding", 0)
    min_length = checks.integer(min_length, "min_length", 0)
    if not (hasattr(clip, "clone") and hasattr(clip, "set_tokenizer_option")):
        raise NodeInputError("clip", "a CLIP that can be cloned and take tokenizer options", describe(clip))
    clip = clip.clone()
    for kind in t5_types_of(clip):
        clip.set_tokenizer_option(f"{kind}_min_padding", min_padding)
        clip.set_tokenizer_option(f"{kind}_min_length", min_length)
    return (clip,)

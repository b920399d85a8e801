"""StyleModelApply's maths, after ComfyUI's `nodes.py: StyleModelApply.apply_stylemodel`.

The style tokens of every image (`[B, n, ctx]`) are flattened into one sequence `[1, B*n, ctx]`
and appended to each conditioning entry's text tokens. `strength_type`:

- "multiply": the tokens are scaled by `strength`;
- "attn_bias": the tokens are kept and an attention bias `log(strength)` towards them is written
  into the entry's `attention_mask` (models that read it, Flux-style DiTs, add it to attention
  logits; the SD UNets ignore it, as in ComfyUI). The mask is `[B, N, N]` float16 over
  (text tokens, style tokens, reference-image tokens `attention_mask_img_shape` h*w, default 1x1):
  an existing mask (boolean ones become 0 / -inf biases) is kept in its quadrants, the new
  columns get the bias in the text and reference rows, and the style tokens' own rows stay 0.
  An entry that already has a mask gets the enlarged one for either type (with bias log(1) = 0
  under "multiply"); with "attn_bias" at strength 1 and no mask, none is made.
"""
from __future__ import annotations

import torch

STRENGTH_TYPES = ["multiply", "attn_bias"]


def style_tokens(cond: torch.Tensor, strength: float, strength_type: str) -> torch.Tensor:
    """`[B, n, ctx]` style tokens -> the `[1, B*n, ctx]` sequence appended to each entry."""
    tokens = cond.flatten(start_dim=0, end_dim=1).unsqueeze(0)
    return tokens * strength if strength_type == "multiply" else tokens


def extended_mask(mask: torch.Tensor | None, batch: int, n_txt: int, n_style: int, n_ref: int,
                  bias: torch.Tensor) -> torch.Tensor:
    """The float16 attention mask `[B, n_txt + n_style + n_ref, same]` with the style tokens'
    columns inserted after the text tokens (see the module docstring)."""
    if mask is None:
        mask = torch.zeros((batch, n_txt + n_ref, n_txt + n_ref), dtype=torch.float16)
    if mask.dtype == torch.bool:
        mask = torch.log(mask.to(dtype=torch.float16))  # True -> 0, False -> -inf
    mask = mask.to("cpu")
    total = n_txt + n_style + n_ref
    new = torch.zeros((batch, total, total), dtype=torch.float16)
    after = n_txt + n_style
    new[:, :n_txt, :n_txt] = mask[:, :n_txt, :n_txt]
    new[:, :n_txt, after:] = mask[:, :n_txt, n_txt:]
    new[:, after:, :n_txt] = mask[:, n_txt:, :n_txt]
    new[:, after:, after:] = mask[:, n_txt:, n_txt:]
    new[:, :n_txt, n_txt:after] = bias
    new[:, after:, n_txt:after] = bias
    return new


def apply_style(conditioning: list, cond: torch.Tensor, strength: float, strength_type: str) -> list:
    """New CONDITIONING: each entry's tokens with the style tokens appended (inputs unchanged)."""
    if strength_type not in STRENGTH_TYPES:
        raise ValueError(f"strength_type must be one of {STRENGTH_TYPES}, got {strength_type!r}")
    tokens = style_tokens(cond, strength, strength_type)
    n_style = tokens.shape[1]
    # A float32 log as ComfyUI takes it (then stored in float16); log(0) = -inf: no attention
    # to the style tokens at all.
    bias = torch.log(torch.tensor([strength if strength_type == "attn_bias" else 1.0], dtype=torch.float32))
    out = []
    for text, options in conditioning:
        options = dict(options)
        if "attention_mask" in options or (strength_type == "attn_bias" and strength != 1.0):
            ref = options.get("attention_mask_img_shape", (1, 1))
            mask = extended_mask(options.get("attention_mask"), text.shape[0], text.shape[1], n_style,
                                 ref[0] * ref[1], bias)
            options["attention_mask"] = mask.to(text.device)
            options["attention_mask_img_shape"] = ref
        out.append([torch.cat((text, tokens.to(text.device)), dim=1), options])
    return out

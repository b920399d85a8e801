"""ComfyUI's token weighting: interpolate each weighted token from the empty prompt's encoding.

Re-implemented from ComfyUI's `comfy/sd1_clip.py: ClipTokenWeightEncoder.encode_token_weights`:
all chunks are encoded in one batch, plus (only when some weight differs from 1) one "empty"
chunk: BOS, EOS, then the encoder's pad token up to the longest chunk. For a token of weight w,

    z' = z_empty + (z - z_empty) * w          (position by position; w == 1 leaves z untouched)

Chunks are concatenated along the token axis; the pooled output is the first chunk's.
This is not A1111's emphasis (multiply, then restore the mean); see `comfy_core/prompt/`.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

BOS_ID = 49406
EOS_ID = 49407

EncodeFn = Callable[[list[list[Any]]], tuple[torch.Tensor, torch.Tensor | None]]


def empty_tokens(length: int, pad_token: int, bos: int = BOS_ID, eos: int = EOS_ID) -> list[int]:
    """BOS, EOS, then `pad_token` up to `length` (ComfyUI's `gen_empty_tokens`)."""
    return [bos, eos] + [pad_token] * max(0, length - 2)


def interpolate_from_empty(z: torch.Tensor, z_empty: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """z [T, W], z_empty [T, W], weights [T] -> z_empty + (z - z_empty) * w where w != 1, else z.

    As ComfyUI, weight j goes to `z[j]`, the first axis of one prompt's output: the tokens of a
    [T, W] state. A tower that returns several states, [S, T, W] (HiDream's Llama, layer "all"),
    gets state j of every token moved by token j's weight, for j < min(S, T) (ComfyUI's loop over
    `len(z[i])`; today's ComfyUI still does this)."""
    n = min(z.shape[0], weights.shape[0])
    w = weights[:n].reshape(n, *([1] * (z.dim() - 1)))  # [n, 1, ...]
    head = torch.where(w != 1.0, (z[:n] - z_empty[:n]) * w.to(z.dtype) + z_empty[:n], z[:n])
    return torch.cat([head, z[n:]]) if n < z.shape[0] else head


def encode_token_weights(encode: EncodeFn, chunks: Sequence[Sequence[Any]],
                         pad_token: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(token, weight) chunks -> (cond [1, n*T, W], pooled [1, P] of the first chunk, or None)."""
    token_rows = [[pair[0] for pair in chunk] for chunk in chunks]
    weight_rows = [[float(pair[1]) for pair in chunk] for chunk in chunks]
    has_weights = any(w != 1.0 for row in weight_rows for w in row)
    longest = max((len(r) for r in token_rows), default=0)
    to_encode = list(token_rows)
    if has_weights or not to_encode:
        to_encode.append(empty_tokens(longest, pad_token))
    hidden, pooled = encode(to_encode)  # [N, T, W], [N, P]
    first_pooled = pooled[0:1] if pooled is not None else None
    if not token_rows:
        return hidden[-1:], first_pooled
    outputs = []
    for index, weights in enumerate(weight_rows):
        z = hidden[index]
        if has_weights:
            z = interpolate_from_empty(z, hidden[-1], torch.tensor(weights, device=z.device))
        outputs.append(z[None])
    return torch.cat(outputs, dim=-2), first_pooled

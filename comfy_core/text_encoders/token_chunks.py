"""Token chunks to encoder inputs: ids and embedding overrides, and one tower's weighted encode.

Shared by the tower (`ClipTextEncoder.forward` / `encode_token_weights`, ComfyUI's
`SDClipModel` methods packs call) and the encoder set, so it imports neither: the encoder is
passed in (anything with `width` and `encode_ids`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.weighting import encode_token_weights

log = logging.getLogger("comfy_core.text_encoders.encoder_set")  # the messages' historical logger


@dataclass(frozen=True)
class EmbeddingOverride:
    """Replace the input embeddings of `row`, positions `position ... position+k-1`, by `vectors` [k, width]."""

    row: int
    position: int
    vectors: torch.Tensor


def encode_weighted_chunks(encoder: Any, chunks: Any, options: Any,
                           projected_pooled: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """One encoder's weighted token chunks -> (cond [1, T, width], pooled), ComfyUI's weighting.
    `encoder` is a `ClipTextEncoder`, `options` its `EncoderOptions` (encoder_set.py)."""

    def encode_chunks(rows: list[list[Any]]) -> tuple[torch.Tensor, torch.Tensor]:
        ids, overrides = chunks_to_ids(rows, encoder.width, mismatch_pad=options.pad_token)
        out = encoder.encode_ids(ids, overrides, layer_idx=options.layer_idx,
                                 layer_norm_hidden=options.layer_norm_hidden,
                                 projected=projected_pooled and options.projected_pooled)
        return out.hidden, out.pooled

    return encode_token_weights(encode_chunks, chunks, options.pad_token)


def chunks_to_ids(chunks: Sequence[Sequence[Any]], width: int,
                  mismatch_pad: int | None = None) -> tuple[torch.Tensor, list[EmbeddingOverride]]:
    """Token chunks (ints, or embedding vectors [width]) -> ids [B, T] and embedding overrides.

    An embedding vector takes one position; its id is the placeholder 0 (as in A1111).
    A vector of another width is an error, unless `mismatch_pad` is given: then, as ComfyUI's
    `SDClipModel.process_tokens`, it is left out with a warning and the row gets one
    `mismatch_pad` token at its end instead (the later tokens move one place left; the prompt
    weights stay with the positions, as there).
    """
    lengths = {len(c) for c in chunks}
    if len(lengths) != 1:
        raise TokenizeError(f"token chunks must all have the same length, got lengths {sorted(lengths)}")
    rows: list[list[int]] = []
    overrides: list[EmbeddingOverride] = []
    for row, chunk in enumerate(chunks):
        ids: list[int] = []
        dropped = 0
        for token in chunk:
            position = len(ids)
            if isinstance(token, torch.Tensor):
                vector = token.reshape(-1) if token.dim() == 2 and token.shape[0] == 1 else token
                if vector.dim() == 1 and vector.shape[0] != width and mismatch_pad is not None:
                    log.warning("embedding vector of width %d does not fit this %d-wide text encoder; "
                                "it is ignored", vector.shape[0], width)
                    dropped += 1
                    continue
                if vector.dim() != 1 or vector.shape[0] != width:
                    raise TokenizeError(f"embedding token at chunk {row}, position {position} has shape "
                                        f"{tuple(token.shape)}; this encoder expects vectors of width {width}")
                overrides.append(EmbeddingOverride(row, position, vector[None]))
                ids.append(0)
            else:
                try:
                    ids.append(int(token))
                except (TypeError, ValueError):
                    raise TokenizeError(f"token at chunk {row}, position {position} is neither an id nor an "
                                        f"embedding vector: {token!r}") from None
        rows.append(ids + [int(mismatch_pad)] * dropped if dropped else ids)
    return torch.tensor(rows, dtype=torch.long), overrides

"""LTX-2's text feature extractor: every Gemma 3 hidden state (the embeddings and each block's
output, `num_layers + 1` of them) normalized per sample and per layer over the valid tokens, laid
side by side and projected to the caption width by `text_embedding_projection.aggregate_embed`
(no bias; a tensor of the LTX-2 checkpoint, read by LTXAVTextEncoderLoader with the Gemma file).

After Lightricks' LTX-2 (`ltx_core/text_encoders/gemma`, "GemmaFeaturesExtractorProjLinear" and
its masked mean / range normalization; diffusers' `per_layer_masked_mean_norm`); written here:
for layer l of sample b, over the valid tokens t and channels d,
`x' = scale * (x - mean) / (max - min + eps)` (scale 8, eps 1e-6), padded tokens set to zero; the
features are `[B, T, D * L]` with channel d of layer l at `d * L + l`.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import nn

FEATURE_SCALE = 8.0
FEATURE_EPS = 1e-6
PROJECTION_PREFIX = "text_embedding_projection."


def masked_layer_norm(states: Sequence[torch.Tensor] | torch.Tensor, mask: torch.Tensor,
                      scale: float = FEATURE_SCALE, eps: float = FEATURE_EPS) -> torch.Tensor:
    """Hidden states (L tensors `[B, T, D]`, or `[B, T, D, L]`) and the token mask `[B, T]` (1 valid)
    -> normalized features `[B, T, D * L]` (see the module doc)."""
    stacked = torch.stack(list(states), dim=-1) if not isinstance(states, torch.Tensor) else states
    if stacked.ndim != 4 or mask.shape != stacked.shape[:2]:
        raise ValueError(f"LTX-2 text features: states {tuple(stacked.shape)} and mask {tuple(mask.shape)} do not fit")
    dtype = stacked.dtype
    b, t, d, layers = stacked.shape
    valid = (mask != 0)[:, :, None, None]  # [B, T, 1, 1]
    count = (valid.sum(dim=1, keepdim=True) * d).to(stacked.dtype)  # [B, 1, 1, 1]
    mean = stacked.masked_fill(~valid, 0.0).sum(dim=(1, 2), keepdim=True) / (count + eps)
    low = stacked.masked_fill(~valid, float("inf")).amin(dim=(1, 2), keepdim=True)
    high = stacked.masked_fill(~valid, float("-inf")).amax(dim=(1, 2), keepdim=True)
    normed = (stacked - mean) / (high - low + eps) * scale
    return normed.flatten(2).masked_fill(~valid[:, :, :, 0], 0.0).to(dtype)


class TextEmbeddingProjection(nn.Module):
    """`aggregate_embed`: `[B, T, D * L] -> [B, T, D]` (the checkpoint's `text_embedding_projection.`)."""

    def __init__(self, width: int, layers: int, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.width, self.layers = width, layers
        self.aggregate_embed = nn.Linear(width * layers, width, bias=False, dtype=dtype, device=device)

    @classmethod
    def from_weights(cls, tensors: Any, prefix: str = PROJECTION_PREFIX, width: int | None = None) -> "TextEmbeddingProjection":
        """Sized from `prefix + "aggregate_embed.weight"` `[D, D * L]`."""
        key = prefix + "aggregate_embed.weight"
        if key not in tensors:
            raise KeyError(f"LTX-2: {key!r} (the text feature projection) is not in the file")
        out_width, flat = tuple(tensors[key].shape)
        if flat % out_width or (width is not None and out_width != width):
            raise ValueError(f"LTX-2: {key} is {(out_width, flat)}, not [D, D * layers] for a {width}-wide Gemma")
        module = cls(out_width, flat // out_width, device="meta")
        module.load_state_dict({"aggregate_embed.weight": tensors[key]}, assign=True)
        return module

    def forward(self, states: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        if len(states) != self.layers:
            raise ValueError(f"LTX-2: {len(states)} hidden states for a projection of {self.layers} layers")
        features = masked_layer_norm(states, mask)
        weight = self.aggregate_embed.weight
        return self.aggregate_embed(features.to(weight.dtype)).to(features.dtype)


# --- LTX-2.3: per-token RMS features, one projection per stream ---

def per_token_rms_features(states: Sequence[torch.Tensor] | torch.Tensor, mask: torch.Tensor,
                           eps: float = FEATURE_EPS) -> torch.Tensor:
    """LTX-2.3's feature normalization: hidden states (L tensors `[B, T, D]`, or `[B, T, D, L]`) and
    the token mask `[B, T]` -> `[B, T, D * L]`, each token of each layer divided by its RMS over the
    D channels, `x / sqrt(mean_d(x^2) + eps)`, channel d of layer l at `d * L + l`, padded tokens 0.

    After Lightricks' LTX-2 (`ltx_core/text_encoders/gemma`, the V2 feature extractor's per-token
    RMS norm) as ComfyUI's `DualLinearProjection` runs it; written here."""
    stacked = torch.stack(list(states), dim=-1) if not isinstance(states, torch.Tensor) else states
    if stacked.ndim != 4 or mask.shape != stacked.shape[:2]:
        raise ValueError(f"LTX-2.3 text features: states {tuple(stacked.shape)} and mask {tuple(mask.shape)} do not fit")
    variance = stacked.float().pow(2).mean(dim=2, keepdim=True)  # [B, T, 1, L]
    normed = (stacked.float() * torch.rsqrt(variance + eps)).flatten(2)  # [B, T, D * L]
    return normed.masked_fill(mask[:, :, None] == 0, 0.0).to(stacked.dtype)


class DualTextEmbeddingProjection(nn.Module):
    """LTX-2.3's `text_embedding_projection` (ComfyUI's `DualLinearProjection`): the per-token RMS
    features `f` `[B, T, D * L]` projected once per stream, each after a rescale by the square root
    of its output width over the Gemma width D:
    `video = video_aggregate_embed(f * sqrt(Wv / D))`, `audio = audio_aggregate_embed(f * sqrt(Wa / D))`
    (both linears with bias); the output is `[B, T, Wv + Wa]`, video first (the DiT splits it at its
    `cross_attention_dim` before its connectors)."""

    def __init__(self, width: int, layers: int, video_width: int, audio_width: int, dtype: Any = None,
                 device: Any = None) -> None:
        super().__init__()
        self.width, self.layers = width, layers
        self.video_aggregate_embed = nn.Linear(width * layers, video_width, bias=True, dtype=dtype, device=device)
        self.audio_aggregate_embed = nn.Linear(width * layers, audio_width, bias=True, dtype=dtype, device=device)

    @classmethod
    def from_weights(cls, tensors: Any, width: int, prefix: str = PROJECTION_PREFIX) -> "DualTextEmbeddingProjection":
        """Sized from `prefix + "video_aggregate_embed.weight"` `[Wv, D * L]` and the audio one `[Wa, D * L]`."""
        names = [prefix + f"{side}_aggregate_embed.{part}" for side in ("video", "audio") for part in ("weight", "bias")]
        missing = [name for name in names if name not in tensors]
        if missing:
            raise KeyError(f"LTX-2.3: the text projection lacks {missing}")
        video_width, flat = tuple(tensors[names[0]].shape)
        audio_width, audio_flat = tuple(tensors[names[2]].shape)
        if flat != audio_flat or flat % width:
            raise ValueError(f"LTX-2.3: text projections of {flat} / {audio_flat} inputs are not [*, D * layers] "
                             f"for a {width}-wide Gemma")
        if tuple(tensors[names[1]].shape) != (video_width,) or tuple(tensors[names[3]].shape) != (audio_width,):
            raise ValueError("LTX-2.3: a text projection's bias does not match its weight")
        module = cls(width, flat // width, video_width, audio_width, device="meta")
        state = {name[len(prefix):]: tensors[name] for name in names}
        module.load_state_dict(state, assign=True)
        return module

    def forward(self, states: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        if len(states) != self.layers:
            raise ValueError(f"LTX-2.3: {len(states)} hidden states for a projection of {self.layers} layers")
        features = per_token_rms_features(states, mask)
        dtype = self.video_aggregate_embed.weight.dtype
        outs = []
        for linear in (self.video_aggregate_embed, self.audio_aggregate_embed):
            scale = math.sqrt(linear.out_features / self.width)
            outs.append(linear((features * scale).to(dtype)))
        return torch.cat(outs, dim=-1).to(features.dtype)

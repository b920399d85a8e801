"""ComfyUI's `comfy.sd1_clip.ClipTokenWeightEncoder`: the base-less mix-in text-encoder packs
subclass next to `torch.nn.Module` (`class SDLongClipModel(torch.nn.Module, ClipTokenWeightEncoder)`,
SeaArtLab/ComfyUI-Long-CLIP; ComfyUI's own `SDClipModel` has the same bases).

Behaviour of ComfyUI's `comfy/sd1_clip.py: ClipTokenWeightEncoder.encode_token_weights`, written
here. The engine's own encoders (comfy_core.text_encoders.encoder) keep their own class and their own
prompt-weighting; this mix-in is what a pack's encoder inherits, over the pack's `encode(tokens)`.

Prompt weighting ("A1111-style" emphasis as ComfyUI computes it): every section (one row of up to
77 tokens) is encoded together with one extra row of empty-prompt tokens (`gen_empty_tokens`, as long
as the longest section) whenever some weight is not 1; each token vector `z[j]` of weight `w != 1` then
becomes `(z[j] - z_empty[j]) * w + z_empty[j]`, i.e. it is moved away from (or towards) the empty
prompt's vector at the same position. Sections are concatenated along the token axis (dim -2); the
pooled output is the first row's.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from compat import files_clip


def _intermediate_device() -> torch.device:
    from compat.devices import intermediate_device

    return intermediate_device()


def _weighted(z: torch.Tensor, z_empty: torch.Tensor, weights: Sequence[float]) -> torch.Tensor:
    """`z` [1, L, D] with each position j whose weight w != 1 replaced by
    `(z[j] - z_empty[j]) * w + z_empty[j]` (`z_empty` [L, D]); positions of weight 1 are unchanged."""
    length = z.shape[-2]
    if len(weights) < length:
        # ComfyUI indexes the section's pairs by every output position: too few pairs is an IndexError there
        raise IndexError(f"encode_token_weights: the encoder returned {length} positions for a section of "
                         f"{len(weights)} (token, weight) pairs")
    w = torch.tensor([float(x) for x in weights[:length]], dtype=torch.float64)
    changed = (w != 1.0).to(z.device)  # [L]
    if not bool(changed.any()):
        return z
    scale = w.to(device=z.device, dtype=z.dtype)[:, None]  # [L, 1]
    moved = (z - z_empty) * scale + z_empty  # [1, L, D]
    return torch.where(changed[:, None], moved, z)


class ClipTokenWeightEncoder:
    """ComfyUI's mix-in (no base class): a subclass provides `encode(list_of_token_id_lists)`
    returning `(out [N, L, D], pooled [N, P] or None[, extra dict])` and `special_tokens`
    (`{"start": .., "end": .., "pad": ..}`); optionally its own `gen_empty_tokens(special_tokens, length)`."""

    def encode_token_weights(self, token_weight_pairs: Sequence[Sequence[tuple[Any, float]]]) -> tuple:
        """`token_weight_pairs`: one list of `(token, weight)` per section. Returns
        `(cond [1, sections * L, D], pooled [1, P] or None)` on the intermediate device, plus a dict
        when `encode` returned a third item (its `attention_mask` flattened over the sections to
        `[1, sections * L]`, other entries as they are)."""
        to_encode = []
        max_token_len = 0
        has_weights = False
        for section in token_weight_pairs:
            tokens = [pair[0] for pair in section]
            max_token_len = max(len(tokens), max_token_len)
            has_weights = has_weights or not all(pair[1] == 1.0 for pair in section)
            to_encode.append(tokens)

        sections = len(to_encode)
        if has_weights or sections == 0:
            # the empty-prompt baseline row (the pack's own generator when it has one, as ComfyUI)
            make_empty = getattr(self, "gen_empty_tokens", None) or files_clip.gen_empty_tokens
            to_encode.append(make_empty(self.special_tokens, max_token_len))

        encoded = self.encode(to_encode)
        out, pooled = encoded[:2]
        device = _intermediate_device()
        first_pooled = pooled[0:1].to(device=device) if pooled is not None else None

        output = []
        for k in range(sections):
            z = out[k:k + 1]  # [1, L, D]
            if has_weights:
                z = _weighted(z, out[-1], [pair[1] for pair in token_weight_pairs[k]])
            output.append(z)

        if not output:
            result: tuple = (out[-1:].to(device=device), first_pooled)
        else:
            result = (torch.cat(output, dim=-2).to(device=device), first_pooled)

        if len(encoded) > 2:
            extra = {}
            for key, value in encoded[2].items():
                if key == "attention_mask":
                    value = value[:sections].flatten().unsqueeze(dim=0).to(device=device)
                extra[key] = value
            result = result + (extra,)
        return result

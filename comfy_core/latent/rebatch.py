"""Regrouping a list of LATENTs into batches of a given size, after ComfyUI's RebatchLatents
(comfy_extras/nodes_rebatch.py, 0.3.64), written here from its behaviour.

Consecutive inputs whose samples have the same shape (apart from the batch) form one run; each
run is concatenated and cut into batches of `batch_size`, the last one possibly smaller (a
shape change always starts a new batch). Each output is `{"samples", "noise_mask",
"batch_index"}` only (other keys are dropped, as ComfyUI):

- `noise_mask`: the input's mask ([b, H, W] or [b, 1, H, W]), tiled to the input's batch, or all
  ones at 8x the latent size where the input has none; left out of an output whose mask is all
  ones (mean exactly 1).
- `batch_index`: the input's own, or, where it has none, the positions counted across all the
  inputs before it, so each latent keeps the noise it would get in one big batch.

ComfyUI keeps a mask longer than its latent's batch whole, which shifts the masks of every later
input; it is cut to the batch here.
"""
from __future__ import annotations

import math
from typing import Any

import torch

# ComfyUI's noise masks are in pixels: 8 per latent pixel for every family.
MASK_SCALE = 8


class RebatchError(ValueError):
    """Noise masks of different sizes would have to share one output batch."""


def _input_batch(latent: dict, offset: int) -> tuple[torch.Tensor, torch.Tensor, list[Any]]:
    samples = latent["samples"]
    batch = samples.shape[0]
    mask = latent.get("noise_mask")
    if mask is None:
        mask = torch.ones((batch, 1, samples.shape[-2] * MASK_SCALE, samples.shape[-1] * MASK_SCALE))
    else:
        mask = mask.reshape(-1, 1, mask.shape[-2], mask.shape[-1])  # [b, 1, H, W]
        if mask.shape[0] < batch:
            mask = mask.repeat(math.ceil(batch / mask.shape[0]), 1, 1, 1)
        mask = mask[:batch]
    if "batch_index" in latent:
        indices = list(latent["batch_index"])
    else:
        indices = [offset + i for i in range(batch)]
    return samples, mask, indices


def _chunks(samples: torch.Tensor, masks: torch.Tensor, indices: list, batch_size: int) -> list[dict]:
    out = []
    for start in range(0, samples.shape[0], batch_size):
        mask = masks[start:start + batch_size]
        entry = {"samples": samples[start:start + batch_size], "noise_mask": mask,
                 "batch_index": indices[start:start + batch_size]}
        if mask.mean() == 1.0:
            del entry["noise_mask"]
        out.append(entry)
    return out


def rebatch_latents(latents: list[dict], batch_size: int) -> list[dict]:
    """The latents of `latents` regrouped into batches of `batch_size` (see the module docstring).
    Raises `RebatchError` when noise masks of different sizes fall into one run."""
    out: list[dict] = []
    run: list[tuple[torch.Tensor, torch.Tensor, list]] = []
    offset = 0

    def flush() -> None:
        if not run:
            return
        mask_sizes = {tuple(mask.shape[-2:]) for _, mask, _ in run}
        if len(mask_sizes) > 1:
            raise RebatchError(f"noise masks of one size for latents of one size, got sizes {sorted(mask_sizes)}")
        samples = torch.cat([s for s, _, _ in run])
        masks = torch.cat([m.to(run[0][1].device) for _, m, _ in run])
        indices = [i for _, _, batch_indices in run for i in batch_indices]
        out.extend(_chunks(samples, masks, indices, batch_size))
        run.clear()

    for latent in latents:
        samples, mask, indices = _input_batch(latent, offset)
        offset += len(indices)
        if run and samples.shape[1:] != run[0][0].shape[1:]:
            flush()
        run.append((samples, mask, indices))
    flush()
    return out

"""Emphasis modes: how per-token multipliers are applied to an encoded chunk.

AUTOMATIC1111's `modules/sd_emphasis.py` (webui 1.10), written here from
`shared/reference/a1111-prompt.md` section 3.6. For one chunk index across the batch encoded
together, `z` is `[B, 77, C]` and `m` the `[B, 77]` multipliers:

- "Original": `z1 = z * m`, then `z1 * (mean(z) / mean(z1))`, both means over all B*77*C values
  of the batch, a row that occurs twice in it counting twice (`batch_mean`);
- "No norm": `z * m`;
- "Ignore": brackets are parsed (and removed) but `z` is left unchanged;
- "None": brackets are not parsed at all (they are tokens); `z` unchanged.
"""
from __future__ import annotations

import torch

# The names live in a torch-free module (the node layer's combos); re-exported here.
from comfy_core.prompt.emphasis_modes import DEFAULT_EMPHASIS, EMPHASIS_MODES  # noqa: F401


def check_emphasis_mode(mode: str) -> str:
    if mode not in EMPHASIS_MODES:
        raise ValueError(f"emphasis mode must be one of {list(EMPHASIS_MODES)}, got {mode!r}")
    return mode


def parses_brackets(mode: str) -> bool:
    """Whether the prompt goes through `parse_prompt_attention` in this mode."""
    return check_emphasis_mode(mode) != "None"


def batch_mean(x: torch.Tensor, repeats: torch.Tensor | None = None) -> torch.Tensor:
    """The mean over all values of a batch `x` [B, T, C] in which row b stands for `repeats[b]` rows.

    webui encodes every row of a schedule, repeats included, so "Original"'s mean counts a
    repeated row as often as it occurs; encoding each distinct row once and weighting its mean
    gives the same value (every row holds T*C values) without the repeated encoder work.
    """
    if repeats is None:
        return x.mean()
    per_row = x.float().mean(dim=(1, 2))  # [B]; float32 so a half-precision sum loses nothing
    weights = repeats.to(device=per_row.device, dtype=per_row.dtype)
    return ((per_row * weights).sum() / weights.sum()).to(x.dtype)


def apply_emphasis(z: torch.Tensor, multipliers: torch.Tensor, mode: str,
                   repeats: torch.Tensor | None = None) -> torch.Tensor:
    """Apply `multipliers` [B, T] to `z` [B, T, C] in `mode`; returns a new tensor (or `z` itself).

    `repeats` [B]: how many rows of webui's batch each row stands for (None: one each); only
    "Original" depends on it.
    """
    check_emphasis_mode(mode)
    if mode in ("Ignore", "None"):
        return z
    if multipliers.shape != z.shape[:2]:
        raise ValueError(f"multipliers of shape {tuple(multipliers.shape)} do not match "
                         f"encoded chunk of shape {tuple(z.shape)}")
    weighted = z * multipliers.to(z.dtype)[..., None]  # [B, T, C]
    if mode == "No norm":
        return weighted
    # Restore the chunk's overall mean so emphasis changes direction, not overall scale.
    return weighted * (batch_mean(z, repeats) / batch_mean(weighted, repeats))

"""Flux Redux's image encoder (Black Forest Labs, FLUX.1 Redux), after ComfyUI's
`comfy/ldm/flux/redux.py`: SigLIP image tokens `[B, T, dim]` -> `redux_down(silu(redux_up(x)))`
`[B, T, txt]` in the T5 context width (the released model: dim 1152, txt 4096). The widths are
read from the weights."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ReduxConfig:
    redux_dim: int
    txt_dim: int

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any]) -> "ReduxConfig":
        up_out, redux_dim = tuple(tensors["redux_up.weight"].shape)
        txt_dim, down_in = tuple(tensors["redux_down.weight"].shape)
        if down_in != up_out or up_out != 3 * txt_dim:
            raise ValueError(f"Redux model: redux_up {[up_out, redux_dim]} and redux_down {[txt_dim, down_in]} "
                             "are not [3 txt, dim] and [txt, 3 txt]")
        return cls(redux_dim=redux_dim, txt_dim=txt_dim)


class ReduxImageEncoder(nn.Module):
    def __init__(self, config: ReduxConfig) -> None:
        super().__init__()
        self.config = config
        self.redux_up = nn.Linear(config.redux_dim, 3 * config.txt_dim)
        self.redux_down = nn.Linear(3 * config.txt_dim, config.txt_dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # [B, T, dim] -> [B, T, txt]
        return self.redux_down(F.silu(self.redux_up(tokens)))

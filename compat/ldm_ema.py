"""ComfyUI's `comfy.ldm.modules.ema.LitEma` (from CompVis latent-diffusion), written here: an
exponential moving average of a model's trainable parameters, kept as buffers (training code in
packs, e.g. CCSR's copy of latent-diffusion, builds one).

- `LitEma(model, decay=0.9999, use_num_upates=True)`: a buffer per trainable parameter, named
  without dots (`a.b.weight` -> `abweight`), plus `decay` (float32) and `num_updates` (int32; -1
  when not counting);
- `forward(model)`: `shadow -= (1 - d) (shadow - param)` with `d = min(decay, (1 + n) / (10 + n))`
  after counting the update (just `decay` when not counting);
- `copy_to(model)`, `store(parameters)`, `restore(parameters)`, `reset_num_updates()`.
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn


class LitEma(nn.Module):
    def __init__(self, model: nn.Module, decay: float = 0.9999, use_num_upates: bool = True) -> None:
        super().__init__()
        if decay < 0.0 or decay > 1.0:
            raise ValueError("Decay must be between 0 and 1")
        self.m_name2s_name: dict[str, str] = {}
        self.register_buffer("decay", torch.tensor(decay, dtype=torch.float32))
        self.register_buffer("num_updates", torch.tensor(0 if use_num_upates else -1, dtype=torch.int))
        for name, p in model.named_parameters():
            if p.requires_grad:
                shadow = name.replace(".", "")  # a buffer name may not contain dots
                self.m_name2s_name[name] = shadow
                self.register_buffer(shadow, p.clone().detach().data)
        self.collected_params: list[torch.Tensor] = []

    def reset_num_updates(self) -> None:
        del self.num_updates
        self.register_buffer("num_updates", torch.tensor(0, dtype=torch.int))

    def forward(self, model: nn.Module) -> None:
        decay = self.decay
        if self.num_updates >= 0:
            self.num_updates += 1
            decay = min(self.decay, (1 + self.num_updates) / (10 + self.num_updates))
        one_minus = 1.0 - decay
        with torch.no_grad():
            params = dict(model.named_parameters())
            shadows = dict(self.named_buffers())
            for key, param in params.items():
                if param.requires_grad:
                    name = self.m_name2s_name[key]
                    shadows[name] = shadows[name].type_as(param)
                    shadows[name].sub_(one_minus * (shadows[name] - param))
                elif key in self.m_name2s_name:
                    raise AssertionError(f"LitEma: {key} is frozen now but was tracked")

    def copy_to(self, model: nn.Module) -> None:
        """Write the averages into `model`'s trainable parameters."""
        shadows = dict(self.named_buffers())
        for key, param in model.named_parameters():
            if param.requires_grad:
                param.data.copy_(shadows[self.m_name2s_name[key]].data)
            elif key in self.m_name2s_name:
                raise AssertionError(f"LitEma: {key} is frozen now but was tracked")

    def store(self, parameters: Iterable[torch.Tensor]) -> None:
        """Keep copies of `parameters` to put back with `restore` (after evaluating with the EMA)."""
        self.collected_params = [param.clone() for param in parameters]

    def restore(self, parameters: Iterable[torch.Tensor]) -> None:
        for stored, param in zip(self.collected_params, parameters):
            param.data.copy_(stored.data)

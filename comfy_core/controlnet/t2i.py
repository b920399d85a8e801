"""`T2IAdapter`: a T2I-Adapter applied to one conditioning (the CONTROL_NET wire value).

After ComfyUI's `comfy/controlnet.py: T2IAdapter`: the adapter's output depends on the hint only,
so it runs once per latent size (hint resized to the latent's pixel size rounded up to the
unshuffle factor, averaged to one channel for single-channel adapters), and each step gets a
copy of its residuals, scaled and merged like a ControlNet's, in the sampler's dtype. The
percent range and chaining behave as for ControlNets.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from comfy_core.controlnet.base import ControlBase, Residuals
from comfy_core.controlnet.hint import broadcast_image_to, resize_hint


class T2IAdapter(ControlBase):
    def __init__(self, t2i_model: nn.Module, channels_in: int, compression_ratio: int = 8,
                 upscale_algorithm: str = "nearest-exact", device: Any = None) -> None:
        super().__init__()
        self.t2i_model = t2i_model
        self.channels_in = channels_in
        self.control_input: Residuals | None = None
        self.compression_ratio = compression_ratio
        self.upscale_algorithm = upscale_algorithm
        self.device = device

    def scale_image_to(self, width: int, height: int) -> tuple[int, int]:
        unshuffle = self.t2i_model.config.unshuffle
        return math.ceil(width / unshuffle) * unshuffle, math.ceil(height / unshuffle) * unshuffle

    def get_control(self, x_noisy: torch.Tensor, t: torch.Tensor, cond: dict, batched_number: int,
                    transformer_options: dict) -> Residuals | None:
        control_prev = None
        if self.previous_controlnet is not None:
            control_prev = self.previous_controlnet.get_control(x_noisy, t, cond, batched_number, transformer_options)
        if not self.in_range(t):
            return control_prev
        ratio = self.compression_ratio
        device = self.device if self.device is not None else x_noisy.device
        if (self.cond_hint is None or x_noisy.shape[2] * ratio != self.cond_hint.shape[2]
                or x_noisy.shape[3] * ratio != self.cond_hint.shape[3]):
            self.control_input = None
            width, height = self.scale_image_to(x_noisy.shape[3] * ratio, x_noisy.shape[2] * ratio)
            hint = resize_hint(self.cond_hint_original, width, height, self.upscale_algorithm).float().to(device)
            if self.channels_in == 1 and hint.shape[1] > 1:
                hint = hint.mean(dim=1, keepdim=True)
            self.cond_hint = hint
        if x_noisy.shape[0] != self.cond_hint.shape[0]:
            self.cond_hint = broadcast_image_to(self.cond_hint, x_noisy.shape[0], batched_number)
        if self.control_input is None:
            weight = next(self.t2i_model.parameters())
            if weight.device != torch.device(device):
                self.t2i_model.to(device)
            with torch.no_grad():
                self.control_input = self.t2i_model(self.cond_hint.to(weight.dtype))
        copied = {k: [None if a is None else a.clone() for a in v] for k, v in self.control_input.items()}
        return self.control_merge(copied, control_prev, x_noisy.dtype)

    def cleanup(self) -> None:
        self.control_input = None
        super().cleanup()

    def copy(self) -> "T2IAdapter":
        c = T2IAdapter(self.t2i_model, self.channels_in, self.compression_ratio, self.upscale_algorithm, self.device)
        self.copy_to(c)
        return c

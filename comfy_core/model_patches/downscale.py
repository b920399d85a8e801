"""Kohya's "Deep Shrink" (the hires-fix alternative of kohya-ss/sd-scripts) as ComfyUI's
comfy_extras/nodes_model_downscale.py applies it: while sigma is inside
[sigma(end_percent), sigma(start_percent)], the features after input block `block_number` are
resized by `1 / downscale_factor`, so the deep blocks see a smaller image; on the way up, an
output block's input is resized back to its skip connection's size whenever they differ.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def resize(x: torch.Tensor, width: int, height: int, method: str) -> torch.Tensor:
    """`[B, C, H, W] -> [B, C, height, width]` by ComfyUI's `common_upscale` method (no crop)."""
    if method == "bislerp":
        from comfy_core.models.latent_resize import bislerp

        return bislerp(x, width, height)
    from comfy_core.image.resize import upscale_samples

    return upscale_samples(x, width, height, method, "disabled")


@dataclass(frozen=True)
class DownscaleInput:
    """`input_block_patch` (or `input_block_patch_after_skip`): shrink after block `block_number`
    for sigmas in `[sigma_end, sigma_start]`."""

    block_number: int
    downscale_factor: float
    sigma_start: float
    sigma_end: float
    method: str

    def __call__(self, h: torch.Tensor, transformer_options: dict) -> torch.Tensor:
        if transformer_options["block"][1] != self.block_number:
            return h
        sigma = transformer_options["sigmas"][0].item()
        if not (self.sigma_end <= sigma <= self.sigma_start):
            return h
        scale = 1.0 / self.downscale_factor
        return resize(h, round(h.shape[-1] * scale), round(h.shape[-2] * scale), self.method)

    def cache_signature(self) -> tuple:
        return ("DownscaleInput", self.block_number, self.downscale_factor, self.sigma_start,
                self.sigma_end, self.method)


@dataclass(frozen=True)
class UpscaleOutput:
    """`output_block_patch`: bring the backbone features back to the skip's size."""

    method: str

    def __call__(self, h: torch.Tensor, skip: torch.Tensor, transformer_options: dict) -> tuple[torch.Tensor, torch.Tensor]:
        if h.shape[2] != skip.shape[2]:
            h = resize(h, skip.shape[-1], skip.shape[-2], self.method)
        return h, skip

    def cache_signature(self) -> tuple:
        return ("UpscaleOutput", self.method)

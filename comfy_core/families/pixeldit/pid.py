"""PiD's latent branch and network (ComfyUI's `comfy/ldm/pixeldit/pid.py`, behaviour read, code written
here): PixelDiT (`dit.py`) plus `lq_proj`, which aligns a latent diffusion model's latent to the patch
grid, runs it through convolutions and ResNet blocks and adds one head's features per gated patch
block through a sigma-aware gate (v1.5: one more into `s` before the pixel blocks); RoPE NTK-aware
against the reference grid `rope_ref / P`. See `dit.py`'s docstring for the equations."""
from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.pixeldit.dit import PixelDiT, PixelDiTConfig, PixelDiTConfigError, PixelDiTInputError
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default


class ResBlock(nn.Module):
    """Pre-activation ResNet block: x + conv(silu(gn(conv(silu(gn(x))))))."""

    def __init__(self, channels: int, padding_mode: str, ops: Any, factory: dict) -> None:
        super().__init__()
        self.block = nn.Sequential(
            ops.GroupNorm(4, channels, **factory), nn.SiLU(),
            ops.Conv2d(channels, channels, 3, padding=1, padding_mode=padding_mode, **factory),
            ops.GroupNorm(4, channels, **factory), nn.SiLU(),
            ops.Conv2d(channels, channels, 3, padding=1, padding_mode=padding_mode, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


class SigmaAwareGate(nn.Module):
    """`x + sigmoid(content_proj([x, lq]) - exp(log_alpha) * sigma) * lq` (per channel, or per
    token with a 1-wide projection)."""

    def __init__(self, dim: int, per_token: bool, ops: Any, factory: dict) -> None:
        super().__init__()
        self.content_proj = ops.Linear(2 * dim, 1 if per_token else dim, **factory)
        self.log_alpha = nn.Parameter(torch.empty((), **factory))

    def forward(self, x: torch.Tensor, lq: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        logit = self.content_proj(torch.cat([x, lq], dim=-1))
        offset = -self.log_alpha.to(device=x.device, dtype=torch.float32).exp() * sigma.float().view(-1, 1, 1)
        return x + (torch.sigmoid(logit + offset) * lq).to(x.dtype)


class LQProjection(nn.Module):
    """PiD's latent branch: the latent aligned to the patch grid, convolutions and ResNet blocks,
    one linear head per gated block (plus the pixel-stage head in v1.5)."""

    def __init__(self, config: PixelDiTConfig, ops: Any, factory: dict) -> None:
        super().__init__()
        pid = config.pid
        assert pid is not None
        f = pid.lq_latent_unpatchify_factor
        self.latent_channels = pid.lq_latent_channels
        self.unpatchify = f
        ratio = pid.sr_scale * (pid.latent_spatial_down_factor // f) / config.patch_size
        self.fold = 0 if ratio >= 1 else int(round(1 / ratio))
        if self.fold and self.fold * ratio != 1.0:
            raise PixelDiTConfigError(f"PiD: latent-to-patch ratio {ratio} is not 1 / an integer")
        in_ch = (pid.lq_latent_channels // (f * f)) * max(self.fold, 1) ** 2
        mode, hidden = pid.lq_conv_padding_mode, pid.lq_hidden_dim
        self.latent_proj = nn.Sequential(
            ops.Conv2d(in_ch, hidden, 3, padding=1, padding_mode=mode, **factory), nn.SiLU(),
            ops.Conv2d(hidden, hidden, 3, padding=1, padding_mode=mode, **factory),
            *(ResBlock(hidden, mode, ops, factory) for _ in range(pid.lq_num_res_blocks)))
        dim = config.hidden_size
        self.output_heads = nn.ModuleList(ops.Linear(hidden, dim, **factory) for _ in range(pid.lq_num_outputs))
        self.pit_head = ops.Linear(hidden, dim, **factory) if pid.pit_lq_inject else None
        self.gate_modules = nn.ModuleList(SigmaAwareGate(dim, pid.lq_gate_per_token, ops, factory)
                                          for _ in range(pid.lq_num_outputs))

    def forward(self, latent: torch.Tensor, rows: int, cols: int) -> list[torch.Tensor]:
        f = self.unpatchify
        if f > 1:  # Flux.2's 128 channels back to 32 at twice the size
            b, c, h, w = latent.shape
            latent = latent.reshape(b, c // (f * f), f, f, h, w).permute(0, 1, 4, 2, 5, 3)
            latent = latent.reshape(b, c // (f * f), h * f, w * f)
        b, c = latent.shape[:2]
        if self.fold == 0:
            if tuple(latent.shape[2:]) != (rows, cols):
                latent = F.interpolate(latent, size=(rows, cols), mode="nearest")
        else:
            k = self.fold
            if tuple(latent.shape[2:]) != (rows * k, cols * k):
                latent = F.interpolate(latent, size=(rows * k, cols * k), mode="nearest")
            latent = latent.reshape(b, c, rows, k, cols, k).permute(0, 1, 3, 5, 2, 4).reshape(b, c * k * k, rows, cols)
        tokens = self.latent_proj(latent).flatten(2).transpose(1, 2)  # [B, L, hidden]
        outputs = [head(tokens) for head in self.output_heads]
        if self.pit_head is not None:
            outputs.append(self.pit_head(tokens))
        return outputs


@comfyui_name("PidNet")
class PiDNet(PixelDiT):
    """PiD: PixelDiT plus the gated latent branch (`lq_latent`, `degrade_sigma` inputs)."""

    def __init__(self, config: PixelDiTConfig, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__(config, dtype=dtype, device=device, operations=operations)
        pid = config.pid
        assert pid is not None
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.lq_proj = LQProjection(config, ops, factory)
        self.pit_lq_gate = (SigmaAwareGate(config.hidden_size, pid.lq_gate_per_token, ops, factory)
                            if pid.pit_lq_inject else None)

    def rope_ref_grid(self) -> tuple[int, int] | None:
        pid = self.config.pid
        return pid.rope_ref_h // self.patch_size, pid.rope_ref_w // self.patch_size

    def prepare(self, x: torch.Tensor, rows: int, cols: int, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        latent, sigma = kwargs.get("lq_latent"), kwargs.get("degrade_sigma")
        if latent is None:
            raise PixelDiTInputError("PiD needs lq_latent: attach the latent with PiDConditioning")
        if latent.shape[1] != self.lq_proj.latent_channels:
            raise PixelDiTInputError(f"PiD: the input latent has {latent.shape[1]} channels, this model expects "
                                     f"{self.lq_proj.latent_channels} (Flux.1 / SD3 / Z-Image 16, Flux.2 128)")
        b = x.shape[0]
        sigma = torch.zeros(1) if sigma is None else torch.as_tensor(sigma)
        sigma = sigma.to(device=x.device, dtype=torch.float32).reshape(-1)
        if sigma.numel() == 1 and b > 1:
            sigma = sigma.expand(b).contiguous()
        features = self.lq_proj(latent.to(x), rows, cols)
        pit = features.pop() if self.pit_lq_gate is not None else None
        return {"features": features, "pit": pit, "sigma": sigma}

    def before_patch_block(self, s: torch.Tensor, index: int, state: Mapping[str, Any]) -> torch.Tensor:
        interval = self.config.pid.lq_interval
        if index % interval or index // interval >= len(state["features"]):
            return s
        return self.lq_proj.gate_modules[index // interval](s, state["features"][index // interval], state["sigma"])

    def before_pixel_blocks(self, s: torch.Tensor, state: Mapping[str, Any]) -> torch.Tensor:
        if state["pit"] is None:
            return s
        return self.pit_lq_gate(s, state["pit"], state["sigma"])


def build_network(config: PixelDiTConfig, **kwargs: Any) -> PixelDiT:
    """PixelDiT, or PiD when `config.pid` is set."""
    return (PiDNet if config.pid is not None else PixelDiT)(config, **kwargs)


__all__ = ["LQProjection", "PiDNet", "ResBlock", "SigmaAwareGate", "build_network"]

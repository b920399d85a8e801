"""Optical-flow-warped Gaussian noise (Burgert et al. 2025, "Go-with-the-Flow: Motion-Controllable
Video Diffusion Models Using Real-Time Warped Noise", its noise-warping algorithm), as VOID's pass 2
uses it (ComfyUI's `comfy_extras/void_noise_warp.py`, from Ryan Burgert's CommonSource
`noise_warp.py`, MIT; behaviour learnt there, written here).

A noise state `[3 + C, H, W]` holds per pixel an offset (dx, dy; kept 0 here), a weight w and C noise
channels. Each flow step moves it along the flow two ways at once:
- expansion: every target pixel pulls the source pixel `-flow` away (nearest neighbour);
- shrink: every source pixel is pushed `+flow` (rounded) and the pushes landing on one target are
  summed, weighted by w (noise divided by the root of the summed squared weights);
pixels a push reaches take the shrink result, the rest the expansion one. Source pixels copied to
several targets are re-Gaussianised together (each copy gets zero-mean fresh noise of its group and
is divided by the root of the group size), so every frame's noise stays unit Gaussian while following
the motion. Weights are renormalised to mean 1 (then `+ 1e-5`, `** 0.9999`).

`warped_noise(frames, flow_model, ...)`: uint8 frames `[T, H, W, 3]` -> noise `[T, H', W', C]`: frames
area-resized by `resize_frames`, the state kept at `resize_flow` x that size, flow from RAFT between
consecutive frames, each frame's noise area-pooled by `downscale_factor` and multiplied by it (unit
variance again). Random draws use `generator` (None: torch's global generator, as ComfyUI).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

XY, W = 2, 2  # state[:XY] = (dx, dy); state[W] = the weight; state[3:] = the noise


def _resize(image: torch.Tensor, size: tuple[int, int] | float, mode: str) -> torch.Tensor:
    """`[C, H, W]` resized to `size` ((h, w), or a factor: `int(side * factor)`, at least 1)."""
    h, w = image.shape[-2:]
    if isinstance(size, (int, float)):
        size = (max(1, int(h * size)), max(1, int(w * size)))
    if tuple(size) == (h, w):
        return image
    extra = {"align_corners": False} if mode == "bilinear" else {}
    return F.interpolate(image[None], size=tuple(size), mode=mode, **extra)[0]


def _pull_nearest(image: torch.Tensor, dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """out[:, y, x] = image[:, y + dy, x + dx] (nearest), zeros outside."""
    _, h, w = image.shape
    xs = dx + torch.arange(w, device=dx.device, dtype=dx.dtype)
    ys = dy + torch.arange(h, device=dy.device, dtype=dy.dtype)[:, None]
    grid = torch.stack([xs / (w - 1) * 2 - 1, ys / (h - 1) * 2 - 1], dim=-1)[None].to(image.dtype)
    return F.grid_sample(image[None], grid, mode="nearest", align_corners=True, padding_mode="zeros")[0]


def _push_add(image: torch.Tensor, dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """out[:, y + dy, x + dx] += image[:, y, x] (integer offsets), pushes leaving the frame dropped."""
    c, h, w = image.shape
    xs = dx.long() + torch.arange(w, device=dx.device)
    ys = dy.long() + torch.arange(h, device=dy.device)[:, None]
    inside = ((ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)).reshape(-1)
    out = torch.zeros(h * w, c, dtype=image.dtype, device=image.device)
    out.index_add_(0, (ys * w + xs).reshape(-1)[inside], image.reshape(c, -1).t()[inside])
    return out.t().reshape(c, h, w)


def regaussianize(noise: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`[C, H, W]` noise whose pixels repeat (groups of equal first-channel values) -> unit-Gaussian
    noise again: each pixel divided by the root of its group's size plus fresh noise made zero-mean
    within the group; and the group sizes `[1, H, W]`."""
    c, h, w = noise.shape
    _, group, counts = torch.unique(noise[0].reshape(-1), return_inverse=True, return_counts=True)
    fresh = torch.randn(noise.shape, generator=generator, device=noise.device, dtype=noise.dtype)
    sums = torch.zeros(int(counts.shape[0]), c, dtype=noise.dtype, device=noise.device)
    sums.index_add_(0, group, fresh.reshape(c, -1).t())
    means = (sums / counts[:, None].to(noise.dtype))[group].t().reshape(c, h, w)
    sizes = counts.to(noise.dtype)[group].reshape(1, h, w)
    return noise / sizes ** 0.5 + (fresh - means), sizes


def warp_state(state: torch.Tensor, flow: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One step of the noise state `[3 + C, H, W]` along `flow` `[2, H, W]` (module docstring)."""
    channels, h, w = state.shape
    c = channels - 3
    if c <= 0 or flow.shape != (2, h, w):
        raise ValueError(f"noise warp: a state [3 + C, H, W] and a flow [2, H, W], got {tuple(state.shape)} "
                         f"and {tuple(flow.shape)}")
    blank = torch.zeros_like(state)
    blank[W] = 1
    # expansion: pull from -flow
    expand = torch.cat([_pull_nearest(state[:XY], -flow[0], -flow[1]),
                        _pull_nearest(state[XY:], -flow[0], -flow[1])])
    expand[W][expand[W] == 0] = 1
    # shrink: push by +flow, rounded
    shrink_in = state.clone()
    shrink_in[:XY] += flow
    ys, xs = torch.meshgrid(torch.arange(h, device=state.device, dtype=state.dtype),
                            torch.arange(w, device=state.device, dtype=state.dtype), indexing="ij")
    target = (torch.stack([xs, ys]) + shrink_in[:XY]).round()
    inside = (target[0] >= 0) & (target[0] < w) & (target[1] >= 0) & (target[1] < h)
    shrink_in = torch.where(inside[None], shrink_in, blank)
    push = shrink_in[:XY].round()
    shrink_in[:XY] = 0  # offsets are not carried (the original's xy_mode "none")
    reached = _push_add(torch.ones(1, h, w, dtype=state.dtype, device=state.device), push[0], push[1]) > 0
    expand = torch.where(reached, blank, expand)
    # both halves re-Gaussianised together, so a source copied into both counts once per copy
    both = torch.cat([shrink_in, expand], dim=2)
    both[3:], sizes = regaussianize(both[3:], generator)
    both[W] = (both[W] / sizes[0]).nan_to_num()
    shrink_in, expand = both.chunk(2, dim=2)
    weight = shrink_in[W][None]
    shrink = torch.empty_like(shrink_in)
    shrink[W] = _push_add(weight, push[0], push[1])[0]
    shrink[:XY] = _push_add(shrink_in[:XY] * weight, push[0], push[1]) / shrink[W][None]
    shrink[3:] = _push_add(shrink_in[3:] * weight, push[0], push[1]) / _push_add(weight ** 2, push[0], push[1]).sqrt()
    out = torch.where(reached, shrink, expand)
    out[W] = out[W] / out[W].mean()
    out[W] += 1e-5
    out[W] **= 0.9999
    return out


class NoiseWarper:
    """The warpable noise state of `c` channels at `h x w` (module docstring)."""

    def __init__(self, c: int, h: int, w: int, device: Any = "cpu", generator: torch.Generator | None = None) -> None:
        if min(c, h, w) <= 0:
            raise ValueError(f"noise warp: channels and size must be positive, got {c}, {h}x{w}")
        self.h, self.w, self.generator = h, w, generator
        noise = torch.randn((c, h, w), generator=generator, device=device)
        self.state = torch.cat([torch.zeros(2, h, w, device=device), torch.ones(1, h, w, device=device), noise])

    @property
    def noise(self) -> torch.Tensor:
        weight = self.state[W:W + 1]
        return self.state[3:] * weight / (weight ** 2).sqrt()

    def step(self, dx: torch.Tensor, dy: torch.Tensor) -> None:
        """Move the state along the flow `(dx, dy)` given at any size (resized to the state's, scaled)."""
        flow = torch.stack([dx, dy]).to(self.state.device, self.state.dtype)
        oh, ow = flow.shape[-2:]
        flow = _resize(flow, (self.h, self.w), "bilinear").clone()
        flow[0] *= self.h / oh  # the original's scaling (rows for dx, columns for dy: equal for uniform resizes)
        flow[1] *= self.w / ow
        self.state = warp_state(self.state, flow, self.generator)


def warped_noise(frames: torch.Tensor, flow: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *,
                 noise_channels: int = 16, resize_frames: float = 0.5, resize_flow: int = 8,
                 downscale_factor: int = 32, device: Any = "cpu",
                 generator: torch.Generator | None = None,
                 on_frame: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """uint8 frames `[T, H, W, 3]` -> warped noise `[T, H', W', noise_channels]` (module docstring);
    `flow(a, b)` gives the flow `[2, h, w]` between frames `[3, h, w]` in 0..1."""
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != torch.uint8:
        raise ValueError(f"noise warp: uint8 frames [T, H, W, 3], got {frames.dtype} {tuple(frames.shape)}")
    if not isinstance(resize_flow, int) or resize_flow < 1:
        raise ValueError(f"noise warp: resize_flow must be a positive int, got {resize_flow!r}")
    video = frames.to(device).permute(0, 3, 1, 2).float() / 255.0
    if resize_frames != 1.0:
        size = (max(1, int(video.shape[2] * resize_frames)), max(1, int(video.shape[3] * resize_frames)))
        video = F.interpolate(video, size=size, mode="area")
    h, w = video.shape[-2:]
    with torch.no_grad():
        warper = NoiseWarper(noise_channels, resize_flow * h, resize_flow * w, device, generator)

        def pooled() -> torch.Tensor:
            return (_resize(warper.noise, 1.0 / downscale_factor, "area") * downscale_factor).permute(1, 2, 0)

        out = [pooled()]
        for i in range(1, video.shape[0]):
            step = flow(video[i - 1], video[i]).to(device)
            warper.step(step[0], step[1])
            out.append(pooled())
            if on_frame is not None:
                on_frame(i, video.shape[0] - 1)
    return torch.stack(out)

"""A loaded frame interpolation model (ComfyUI's INTERP_MODEL) and the frame loop of ComfyUI's
`comfy_extras/nodes_frame_interpolation.py` (FrameInterpolationModelLoader, FrameInterpolate),
written here from its behaviour:

- loading: a file with `extract.extract_sublevels.convs.0.0.conv.weight` is FILM, anything else is
  read as RIFE (raw names converted); the network runs in float16 on a CUDA device, else float32.
- `InterpolationModel.interpolate(images, multiplier)`: fewer than 2 frames (or a multiplier below
  2) come back unchanged; otherwise `(N - 1) * multiplier + 1` frames: each input frame exactly as
  given (at `k * multiplier`), and between frames i and i + 1 the model's frames at
  `t = 1 / multiplier, ..., (multiplier - 1) / multiplier`. Each frame's features are computed once
  (the second frame of a pair is the first of the next); FILM computes a pair's flows once for all
  times, RIFE runs the times as one batch. RIFE's frames are padded right / bottom to multiples of
  64 by reflection and the results cropped back. Beyond ComfyUI, which fails on them: FILM's
  frames under 64 pixels on a side (its 7-level pyramid pools them to nothing) are padded to 64
  the same way, and padding as large as the side repeats the edge instead of reflecting.
  Everything is clamped to 0..1 and returned float32 on the CPU.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.frame_interp.film import DETECT_KEY as FILM_KEY
from comfy_core.models.frame_interp.film import FilmConfig, FILMNet
from comfy_core.models.frame_interp.rife import IFNet, RifeConfig, convert_rife_keys
from comfy_core.models.resident import ResidentModel, load_exact


class FrameInterpolationWeightsError(ValueError):
    """A file that is not a FILM or RIFE model this engine builds (names what is wrong)."""


def network_from_state_dict(state: Mapping[str, torch.Tensor], name: str = "state dict",
                            dtype: torch.dtype = torch.float32) -> nn.Module:
    """FILMNet or IFNet for a state dict in ComfyUI's (or RIFE's raw) names, in eval mode on the CPU."""
    try:
        if FILM_KEY in state:
            tensors = dict(state)
            network: nn.Module = FILMNet(FilmConfig.detect_from_weights(tensors))
            what = "FILM"
        else:
            tensors = convert_rife_keys(state)
            network = IFNet(RifeConfig.detect_from_weights(tensors))
            what = "RIFE"
    except (KeyError, ValueError, IndexError) as exc:
        raise FrameInterpolationWeightsError(f"{name}: not a FILM or RIFE frame interpolation model "
                                             f"({type(exc).__name__}: {exc})") from None
    return load_exact(network, tensors, what=f"{name}: {what}", error=FrameInterpolationWeightsError, dtype=dtype)


def pad_frames(frames: torch.Tensor, align: int = 1, minimum: int = 1) -> torch.Tensor:
    """[B, C, H, W] padded right / bottom to multiples of `align` and at least `minimum` per side:
    by reflection (ComfyUI's `pad_to_patch_size(..., padding_mode="reflect")`) where the padding is
    smaller than the side, else by repeating the edge (sizes ComfyUI's reflection refuses)."""
    h, w = frames.shape[2], frames.shape[3]
    pad_h = max(h + (-h) % align, minimum + (-minimum) % align) - h
    pad_w = max(w + (-w) % align, minimum + (-minimum) % align) - w
    if not pad_h and not pad_w:
        return frames
    mode = "reflect" if pad_h < h and pad_w < w else "replicate"
    return F.pad(frames, (0, pad_w, 0, pad_h), mode=mode)


def pad_to_multiple(frames: torch.Tensor, align: int) -> torch.Tensor:
    """[B, C, H, W] padded right / bottom to multiples of `align` (`pad_frames`)."""
    return pad_frames(frames, align)


class InterpolationModel(ResidentModel):
    """ComfyUI's INTERP_MODEL: a FILMNet or an IFNet, the dtype it runs in, and where it runs."""

    def __init__(self, network: nn.Module, *, load_device: torch.device | str = "cpu",
                 offload_device: torch.device | str = "cpu") -> None:
        super().__init__(network, load_device=load_device, offload_device=offload_device)
        self.dtype = next(network.parameters()).dtype

    @property
    def kind(self) -> str:
        return "film" if isinstance(self.model, FILMNet) else "rife"

    @torch.no_grad()
    def interpolate(self, images: torch.Tensor, multiplier: int,
                    on_frame: Callable[[int, int], None] | None = None) -> torch.Tensor:
        """IMAGE [N, H, W, 3] -> [(N - 1) * multiplier + 1, H, W, 3] (module docstring);
        `on_frame(done, total)` after each interpolated frame."""
        count, height, width = images.shape[0], images.shape[1], images.shape[2]
        if count < 2 or multiplier < 2:
            return images
        net = self.model
        times = [k / multiplier for k in range(1, multiplier)]
        total = (count - 1) * len(times)
        out = torch.empty((count - 1) * multiplier + 1, 3, height, width, dtype=torch.float32)
        out[0] = images[0].movedim(-1, 0).float().cpu()
        align, minimum = getattr(net, "pad_align", 1), getattr(net, "min_size", 1)

        def frame(i: int) -> torch.Tensor:
            return pad_frames(images[i:i + 1].movedim(-1, 1).to(self.load_device, self.dtype), align, minimum)

        done = 0
        with self.loaded():
            img0 = frame(0)
            feat0 = net.extract_features(img0)
            for i in range(count - 1):
                img1 = frame(i + 1)
                feat1 = net.extract_features(img1)
                if isinstance(net, FILMNet):
                    mids = net.interpolate(feat0, feat1, times)
                else:
                    b = len(times)
                    t = torch.tensor(times, device=img0.device, dtype=self.dtype).view(b, 1, 1, 1)
                    t = t.expand(-1, 1, img0.shape[2], img0.shape[3])
                    mids = net.interpolate(feat0, feat1, img0.expand(b, -1, -1, -1), img1.expand(b, -1, -1, -1), t)
                base = i * multiplier + 1
                out[base:base + len(times)] = mids[:, :, :height, :width].float().cpu()
                out[base + len(times)] = images[i + 1].movedim(-1, 0).float().cpu()
                done += len(times)
                if on_frame is not None:
                    on_frame(done, total)
                img0, feat0 = img1, feat1
        return out.movedim(1, -1).clamp_(0.0, 1.0)


def load_frame_interpolation(path: str | Path, *, dtype: torch.dtype | None = None,
                             load_device: torch.device | str = "cpu",
                             offload_device: torch.device | str = "cpu") -> InterpolationModel:
    """The FILM or RIFE model in the file `path`; `dtype` None: float16 on a CUDA load device,
    else float32 (ComfyUI's choice by `should_use_fp16`)."""
    from comfy_core.checkpoint.errors import CheckpointError
    from comfy_core.checkpoint.reader import load_tensor_file

    path = Path(path)
    try:
        state, _metadata = load_tensor_file(path)
    except CheckpointError as exc:
        raise FrameInterpolationWeightsError(f"{path.name}: not a readable weights file ({exc})") from exc
    if dtype is None:
        dtype = torch.float16 if torch.device(load_device).type == "cuda" else torch.float32
    network = network_from_state_dict(state, path.name, dtype=dtype)
    return InterpolationModel(network, load_device=load_device, offload_device=offload_device)

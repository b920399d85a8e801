"""Seamless (periodic) tiling of generated images, as data on a clone.

Behaviour of today's ComfyUI `ModelPatchSeamlessTiling` and `VAEDecodeSeamlessTiling`
(comfy_extras/nodes_seamless_tiling.py, Comfy-Org/ComfyUI@1a0ab7134ac08b2d734e8ddca238c4d651419325),
written here. ComfyUI does not pad the network's convolutions circularly; it makes the
*prediction* periodic and decodes with periodic context:

* The model patch is a `model_function_wrapper` (`SeamlessTiling`): each model call runs on the
  latent as it is and on the latent rolled by half its width (and/or height), with the same roll
  applied to `c_concat`; each output is rolled back and the outputs are blended with weights that
  favour the rolled run near the image's borders (`seam_blend`: 1 at the borders, falling linearly
  to 0 over `context_size` latent pixels). At the borders the prediction therefore comes from a
  run in which the left and right (top and bottom) edges were neighbours in the middle of the
  input, so the result continues across the wrap. One axis costs two model calls, both axes
  four. A ControlNet's feature maps cannot be rolled with the latent, so a call carrying
  `control` is refused (as ComfyUI).
* The VAE decode pads the latent periodically by `context_size` latent pixels on each tiled side
  (`periodic_pad`: index arithmetic modulo the size, so it wraps more than once when the context
  is larger than the latent), decodes, and crops the decoded image back to the latent's own area
  (`decode_seamless`).

Nothing here touches a module: the wrapper lives in the clone's `model_options` (an earlier
wrapper keeps running inside it), so the unpatched MODEL is unchanged and its runs bit-identical.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from comfy_core.model_patches.errors import ModelPatchError

TILING_MODES = ("x", "y", "x and y")


def tiling_widths(mode: str, context_size: int) -> tuple[int, int]:
    """`(y, x)` context / blend widths for a tiling mode: 0 on an axis that does not tile."""
    if mode not in TILING_MODES:
        raise ValueError(f"tiling must be one of {list(TILING_MODES)}, got {mode!r}")
    return (context_size if mode != "x" else 0, context_size if mode != "y" else 0)


def periodic_pad(x: torch.Tensor, pad_y: int, pad_x: int) -> torch.Tensor:
    """`x` `[..., h, w]` (a 4-D image or 5-D video latent) extended by `pad_y` rows and `pad_x`
    columns on each side, taken periodically (the result's row `-pad_y + i` is row `i mod h`)."""
    if x.ndim not in (4, 5):
        raise ModelPatchError("Seamless tiling supports image (and video) latents [B, C, (t,) h, w] only, "
                              f"got a tensor of shape {tuple(x.shape)}")
    if pad_y:
        rows = torch.arange(-pad_y, x.shape[-2] + pad_y, device=x.device) % x.shape[-2]
        x = x.index_select(-2, rows)
    if pad_x:
        cols = torch.arange(-pad_x, x.shape[-1] + pad_x, device=x.device) % x.shape[-1]
        x = x.index_select(-1, cols)
    return x


def seam_blend(length: int, width: int, like: torch.Tensor) -> torch.Tensor:
    """`[length]` weights of the half-rolled run: 1 at both ends, down by `1/width` per pixel
    towards the middle, 0 from `width` pixels in (`1 - clamp(min(i, length-1-i) / width, max=1)`)."""
    positions = torch.arange(length, device=like.device, dtype=like.dtype)
    return 1.0 - positions.minimum(length - positions - 1).div(width).clamp(max=1)


@dataclass(frozen=True)
class SeamlessTiling:
    """`model_function_wrapper(apply_model, args)` blending the plain and the half-rolled
    predictions (see the module docstring). `blend_y` / `blend_x` are the blend widths in latent
    pixels (0: that axis does not tile); `inner` is the wrapper that was there before, run for
    each of the calls."""

    blend_y: int
    blend_x: int
    inner: Any = None

    def __call__(self, apply_model: Callable[..., torch.Tensor], args: dict) -> torch.Tensor:
        if args["c"].get("control") is not None:
            raise ModelPatchError("Seamless Tiling cannot be used with ControlNet because its feature maps "
                                  "cannot be shifted with the latent.")
        x = args["input"]  # [B, C, (t,) h, w]
        height, width = x.shape[-2:]
        zeros = x.new_zeros
        weight_rolled_y = seam_blend(height, self.blend_y, x) if self.blend_y else zeros(height)
        weight_rolled_x = seam_blend(width, self.blend_x, x) if self.blend_x else zeros(width)
        result = None
        for shift_y in ((0, height // 2) if self.blend_y else (0,)):
            weight_y = weight_rolled_y if shift_y else 1.0 - weight_rolled_y
            for shift_x in ((0, width // 2) if self.blend_x else (0,)):
                weight_x = weight_rolled_x if shift_x else 1.0 - weight_rolled_x
                output = self._rolled_call(apply_model, args, (shift_y, shift_x))
                weight = (weight_y[:, None] * weight_x[None, :]).reshape([1] * (output.ndim - 2) + [height, width])
                result = output * weight if result is None else result.addcmul_(output, weight)
        return result

    def _rolled_call(self, apply_model: Callable[..., torch.Tensor], args: dict,
                     shifts: tuple[int, int]) -> torch.Tensor:
        """One model call on the input (and `c_concat`) rolled by `shifts`, its output rolled back."""
        c = dict(args["c"])
        if c.get("c_concat") is not None:
            c["c_concat"] = torch.roll(c["c_concat"], shifts, dims=(-2, -1))
        rolled = torch.roll(args["input"], shifts, dims=(-2, -1))
        if self.inner is not None:
            output = self.inner(apply_model, {**args, "input": rolled, "c": c})
        else:
            output = apply_model(rolled, args["timestep"], **c)
        return torch.roll(output, (-shifts[0], -shifts[1]), dims=(-2, -1))

    def cache_signature(self) -> tuple | None:
        # A wrapped earlier wrapper has no identity we can vouch for: key on the producing node then.
        return ("SeamlessTiling", self.blend_y, self.blend_x) if self.inner is None else None


def decode_seamless(decode: Callable[[torch.Tensor], torch.Tensor], latent: torch.Tensor, pad_y: int,
                    pad_x: int) -> torch.Tensor:
    """Decode `latent` `[B, C, (t,) h, w]` with `pad_y` / `pad_x` latent pixels of periodic
    context on each side and crop the IMAGE back to the latent's own area; a video's frames come
    back as one batch `[B*t, H, W, C]`. `decode` is the VAE's (latent -> IMAGE `[..., H, W, C]`)."""
    height, width = latent.shape[-2:]
    padded = periodic_pad(latent, pad_y, pad_x)
    images = decode(padded)
    scale_y = images.shape[-3] / padded.shape[-2]
    scale_x = images.shape[-2] / padded.shape[-1]
    top, left = round(pad_y * scale_y), round(pad_x * scale_x)
    images = images[..., top:top + round(height * scale_y), left:left + round(width * scale_x), :]
    if images.ndim == 5:
        images = images.reshape(-1, *images.shape[-3:])
    return images

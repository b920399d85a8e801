"""VAE nodes beyond plain decode/encode: VAEDecodeTiled, VAEEncodeTiled, VAEEncodeForInpaint.

Names, inputs, categories and semantics are ComfyUI's (`nodes.py` at the reference snapshot):

- The tiled nodes take their sizes in pixels; the VAE works on overlapping tiles blended with
  linear feathering (`comfy_core.models.vae_tiling`). VAEDecodeTiled divides tile and overlap by
  the VAE's factor (8, 16 for Wan 2.2) for the latent and, as ComfyUI, lowers an overlap above a
  quarter of the tile to a quarter. `temporal_size`/`temporal_overlap` (frames) only matter to
  video VAEs (Wan): VAEDecodeTiled halves an overlap above half the size and divides both by the
  VAE's temporal compression (4) into latent frames (at least 2 per tile, overlap at least 1 and
  at most half a tile), and returns every video's frames as one IMAGE batch; VAEEncodeTiled hands
  them on in frames (the VAE converts them). An image VAE ignores them, as ComfyUI's do.
- VAEEncodeForInpaint crops pixels to a multiple of 8 (centred), resizes the mask to the image
  (bilinear), sets masked pixels to grey (0.5) before encoding, and returns the mask grown by
  `grow_mask_by` pixels (a box kernel of that size) as the LATENT's `noise_mask` [B, 1, H, W].
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from graph.native import Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

# The VAE factor the nodes fall back to when the VAE object does not say (every SD VAE is 8x).
DEFAULT_FACTOR = 8
TEMPORAL_DECODE_TIP = "Only used for video VAEs: Amount of frames to decode at a time."
TEMPORAL_ENCODE_TIP = "Only used for video VAEs: Amount of frames to encode at a time."
TEMPORAL_OVERLAP_TIP = "Only used for video VAEs: Amount of frames to overlap."


def _factor(vae: Any) -> int:
    return int(getattr(getattr(vae, "first_stage_model", None), "downscale_ratio", DEFAULT_FACTOR))


def _pixels(pixels: Any, factor: int) -> torch.Tensor:
    pixels = checks.image_batch(pixels, "pixels")
    if pixels.shape[-1] < 3:
        raise NodeInputError("pixels", "an IMAGE with 3 or 4 channels", describe(pixels))
    if pixels.shape[1] < factor or pixels.shape[2] < factor:
        raise NodeInputError("pixels", f"an image at least {factor}x{factor}", f"{pixels.shape[2]}x{pixels.shape[1]}")
    return pixels


def _progress():
    """A tile callback reporting to the running node (raises Interrupted to stop), or None."""
    from graph.context import current

    ctx = current()
    return None if ctx is None else (lambda done, total: ctx.progress(done, total))


@node("VAEDecodeTiled", category="_for_testing", display_name="VAE Decode (Tiled)",
      inputs=[Input("samples", "LATENT"), Input("vae", "VAE"),
              Int("tile_size", default=512, min=64, max=4096, step=32),
              Int("overlap", default=64, min=0, max=4096, step=32),
              Int("temporal_size", default=64, min=8, max=4096, step=4, tooltip=TEMPORAL_DECODE_TIP),
              Int("temporal_overlap", default=8, min=4, max=4096, step=4, tooltip=TEMPORAL_OVERLAP_TIP)],
      outputs=[Output("IMAGE")])
def vae_decode_tiled(samples: dict, vae: Any, tile_size: int = 512, overlap: int = 64, temporal_size: int = 64,
                     temporal_overlap: int = 8) -> tuple[torch.Tensor]:
    from comfy_core.models.vae_tiling import TilingError

    latent = checks.latent(samples, ndims=(4, 5))
    overlap = checks.integer(overlap, "overlap", 0)  # validation enforces min 0; a direct call gets the same
    if tile_size < overlap * 4:  # ComfyUI's rule: the overlap is at most a quarter of the tile
        overlap = tile_size // 4
    if temporal_size < temporal_overlap * 2:
        temporal_overlap = temporal_overlap // 2
    temporal = vae.temporal_compression_decode() if hasattr(vae, "temporal_compression_decode") else None
    if temporal is not None:  # a video VAE: frames to latent frames, as ComfyUI
        tile_t: int | None = max(2, temporal_size // temporal)
        overlap_t: int | None = max(1, min(tile_t // 2, temporal_overlap // temporal))
    else:
        tile_t = overlap_t = None
    if latent.ndim != (5 if temporal is not None else 4):
        kind = "a video latent [B, C, T, h, w]" if temporal is not None else "an image latent [B, C, h, w]"
        raise NodeInputError("samples", f"{kind} for this VAE", f"a latent of shape {list(latent.shape)}")
    factor = _factor(vae)
    try:
        images = vae.decode_tiled(latent, tile_x=tile_size // factor, tile_y=tile_size // factor,
                                  overlap=overlap // factor, tile_t=tile_t, overlap_t=overlap_t, progress=_progress())
    except TilingError as exc:
        # Only a tile_size far below the declared minimum (a latent tile under 2) gets here.
        raise NodeInputError("tile_size", f"at least {2 * factor} pixels", str(exc)) from None
    if images.ndim == 5:  # [B, T, H, W, 3] -> one IMAGE batch of all frames, as ComfyUI
        images = images.reshape(-1, *images.shape[-3:])
    return (images,)


@node("VAEEncodeTiled", category="_for_testing", display_name="VAE Encode (Tiled)",
      inputs=[Input("pixels", "IMAGE"), Input("vae", "VAE"),
              Int("tile_size", default=512, min=64, max=4096, step=64),
              Int("overlap", default=64, min=0, max=4096, step=32),
              Int("temporal_size", default=64, min=8, max=4096, step=4, tooltip=TEMPORAL_ENCODE_TIP),
              Int("temporal_overlap", default=8, min=4, max=4096, step=4, tooltip=TEMPORAL_OVERLAP_TIP)],
      outputs=[Output("LATENT")])
def vae_encode_tiled(pixels: torch.Tensor, vae: Any, tile_size: int = 512, overlap: int = 64, temporal_size: int = 64,
                     temporal_overlap: int = 8) -> tuple[dict]:
    from comfy_core.models.vae_tiling import TilingError

    pixels = _pixels(pixels, _factor(vae))
    overlap = checks.integer(overlap, "overlap", 0)
    try:
        latent = vae.encode_tiled(pixels[..., :3], tile_x=tile_size, tile_y=tile_size, overlap=overlap,
                                  tile_t=temporal_size, overlap_t=temporal_overlap, progress=_progress())
    except TilingError as exc:
        # ComfyUI has no guard here: a half-size tiling no larger than the overlap steps by zero
        # (an error) or backwards (no tiles, a NaN latent). Name the input instead.
        raise NodeInputError("overlap", "an overlap smaller than half the tile size", str(exc)) from None
    return ({"samples": latent},)


@node("VAEEncodeForInpaint", category="latent/inpaint", display_name="VAE Encode (for Inpainting)",
      inputs=[Input("pixels", "IMAGE"), Input("vae", "VAE"), Input("mask", "MASK"),
              Int("grow_mask_by", default=6, min=0, max=64, step=1)],
      outputs=[Output("LATENT")])
def vae_encode_for_inpaint(pixels: torch.Tensor, vae: Any, mask: torch.Tensor, grow_mask_by: int = 6) -> tuple[dict]:
    import torch
    import torch.nn.functional as F

    from comfy_core.models.vae_tiling import crop_to_multiple

    factor = _factor(vae)
    pixels = _pixels(pixels, factor)
    # ComfyUI reshapes any mask to [-1, 1, H, W], so [H, W] and [B, 1, H, W] masks work too.
    masks = checks.mask_batch(mask, ndims=(3, 2, 4)).unsqueeze(1).float()  # [Bm, 1, h, w]
    grow_mask_by = checks.integer(grow_mask_by, "grow_mask_by", 0)
    height, width = pixels.shape[1], pixels.shape[2]
    if masks.shape[0] not in (1, pixels.shape[0]):
        raise NodeInputError("mask", f"1 or {pixels.shape[0]} masks (one per image)", f"{masks.shape[0]} masks")
    masks = F.interpolate(masks.to(pixels.device), size=(height, width), mode="bilinear")  # [Bm, 1, H, W]

    # Crop image and mask alike (centred); the mask is cropped again after growing, from the top
    # left, because an even kernel grows it by one row and column more than it is high and wide.
    pixels = crop_to_multiple(pixels, factor)
    masks = crop_to_multiple(masks.movedim(1, -1), factor).movedim(-1, 1)
    crop_h, crop_w = pixels.shape[1], pixels.shape[2]

    binary = masks.round()
    if grow_mask_by == 0:
        grown = masks
    else:
        kernel = torch.ones(1, 1, grow_mask_by, grow_mask_by, device=binary.device)
        grown = F.conv2d(binary, kernel, padding=math.ceil((grow_mask_by - 1) / 2)).clamp(0.0, 1.0)

    # Masked pixels become mid grey, so the VAE does not encode what is to be repainted.
    keep = (1.0 - binary).squeeze(1).unsqueeze(-1)  # [Bm, H, W, 1]
    rgb = (pixels[..., :3] - 0.5) * keep + 0.5
    latent = vae.encode(rgb)
    return ({"samples": latent, "noise_mask": grown[:, :, :crop_h, :crop_w].round()},)

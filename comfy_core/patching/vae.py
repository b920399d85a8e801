"""`VaePatcher`: the VAE wire object, a patcher over `comfy_core.models.vae.AutoencoderKL`.

`encode`/`decode` run the module inside `applied()`, so the VAE's attention honours the
patcher's attention backend and any weight patches, and the module is restored afterwards.
`encode_tiled`/`decode_tiled` run their whole tile loop (`comfy_core.models.vae_tiling`) inside
one `applied()`, so patches are applied and restored once, not once per tile; their signatures
are ComfyUI's (`comfy/sd.py: VAE.decode_tiled / encode_tiled`) so node packs can call them.
"""
from __future__ import annotations

import torch

from comfy_core.models.vae import VAEConfigError
from comfy_core.models.vae_tiling import Progress, blended_tiles, crop_to_multiple
from comfy_core.patching.patcher import Patcher

# ComfyUI's defaults for a 2-D VAE: decode tiles in latent units, encode tiles in pixels.
DECODE_TILE, DECODE_OVERLAP = 64, 16
ENCODE_TILE, ENCODE_OVERLAP = 512, 64


class VaePatcher(Patcher):
    """Patcher for VAE. `model` is the AutoencoderKL (`encode(pixels)`, `decode(latent)`)."""

    @property
    def first_stage_model(self) -> torch.nn.Module:
        return self.model

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        """Pixels `[B, H, W, C]` in 0..1 to a latent `[B, c, h, w]` (the module's scaling)."""
        with torch.no_grad(), self.applied() as vae:
            return vae.encode(pixels.to(self.load_device)).to(self.offload_device)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """A latent `[B, c, h, w]` to pixels `[B, H, W, C]` in 0..1."""
        with torch.no_grad(), self.applied() as vae:
            return vae.decode(latent.to(self.load_device)).to(self.offload_device)

    def decode_tiled(self, samples: torch.Tensor, tile_x: int | None = None, tile_y: int | None = None,
                     overlap: int | None = None, tile_t: int | None = None, overlap_t: int | None = None,
                     *, progress: Progress | None = None) -> torch.Tensor:
        """A latent `[B, c, h, w]` to pixels `[B, H, W, 3]` in 0..1, decoded in overlapping tiles
        of `tile_x` x `tile_y` latent pixels blended over `overlap` (latent pixels).

        `tile_t`/`overlap_t` tile the time axis of video VAEs; an image VAE has none, so they are
        accepted and unused, as in ComfyUI."""
        model = self.model
        embed_dim = model.config.embed_dim
        if samples.ndim != 4 or samples.shape[1] != embed_dim:
            raise VAEConfigError(
                f"VAE.decode_tiled: expected a latent [B, {embed_dim}, h, w], got {tuple(samples.shape)}")
        tile_x = DECODE_TILE if tile_x is None else tile_x
        tile_y = DECODE_TILE if tile_y is None else tile_y
        overlap = DECODE_OVERLAP if overlap is None else overlap
        load = self.load_device
        with torch.no_grad(), self.applied() as vae:
            raw = blended_tiles(samples, lambda z: vae.decode_raw(z.to(load)).float(), tile_y, tile_x, overlap,
                                vae.downscale_ratio, vae.config.out_ch, self.offload_device, progress)
        # As the plain decode: -1..1 to 0..1, clamped, channels last.
        return ((raw + 1.0) / 2.0).clamp(0.0, 1.0).movedim(1, -1)

    def encode_tiled(self, pixels: torch.Tensor, tile_x: int | None = None, tile_y: int | None = None,
                     overlap: int | None = None, tile_t: int | None = None, overlap_t: int | None = None,
                     *, progress: Progress | None = None) -> torch.Tensor:
        """Pixels `[B, H, W, C]` in 0..1 to the latent mean `[B, c, H/8, W/8]`, encoded in
        overlapping tiles of `tile_x` x `tile_y` pixels blended over `overlap` pixels.

        As `encode`, sides are centre-cropped to a multiple of 8 and channels past the third
        dropped. `tile_t`/`overlap_t` are accepted and unused (no time axis)."""
        model = self.model
        factor = model.downscale_ratio
        if pixels.ndim != 4 or pixels.shape[-1] < 3:
            raise VAEConfigError(f"VAE.encode_tiled: expected pixels [B, H, W, C>=3], got {tuple(pixels.shape)}")
        if pixels.shape[1] < factor or pixels.shape[2] < factor:
            raise VAEConfigError(
                f"VAE.encode_tiled: image {pixels.shape[2]}x{pixels.shape[1]} is smaller than {factor}x{factor}")
        tile_x = ENCODE_TILE if tile_x is None else tile_x
        tile_y = ENCODE_TILE if tile_y is None else tile_y
        overlap = ENCODE_OVERLAP if overlap is None else overlap
        x = crop_to_multiple(pixels, factor)[..., :3].movedim(-1, 1) * 2.0 - 1.0  # [B, 3, H, W] in -1..1
        load = self.load_device
        with torch.no_grad(), self.applied() as vae:
            return blended_tiles(x, lambda t: vae.encode_moments(t.to(load))[0].float(), tile_y, tile_x, overlap,
                                 1.0 / factor, vae.latent_channels, self.offload_device, progress)

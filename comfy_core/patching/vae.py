"""`VaePatcher`: the VAE wire object, a patcher over `comfy_core.models.vae.AutoencoderKL`.

`encode`/`decode` run the module inside `applied()`, so the VAE's attention honours the
patcher's attention backend and any weight patches, and the module is restored afterwards.
`encode_tiled`/`decode_tiled` run their whole tile loop (`comfy_core.models.vae_tiling`) inside
one `applied()`, so patches are applied and restored once, not once per tile; their signatures
are ComfyUI's (`comfy/sd.py: VAE.decode_tiled / encode_tiled`) so node packs can call them.

It is also ComfyUI's `comfy.sd.VAE` for packs: constructible from a state dict (`VaePatcher(sd=...)`,
ComfyUI's `VAE(sd=...)`), with that class's attributes (`device`, `vae_dtype`, `output_device`,
`downscale_ratio`, `upscale_ratio`, `latent_channels`, `latent_dim`, `first_stage_model`, `patcher`,
`process_input`/`process_output`, `memory_used_encode/decode`, `spacial_compression_encode/decode`).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.models.vae import VAEConfigError
from comfy_core.models.vae_tiling import Progress, blended_tiles, crop_to_multiple
from comfy_core.patching.patcher import Patcher

# ComfyUI's defaults for a 2-D VAE: decode tiles in latent units, encode tiles in pixels.
DECODE_TILE, DECODE_OVERLAP = 64, 16
ENCODE_TILE, ENCODE_OVERLAP = 512, 64


class VaeConstructionError(TypeError):
    """`VaePatcher(...)` / ComfyUI's `comfy.sd.VAE(...)` called with arguments it cannot honour."""


class VaePatcher(Patcher):
    """Patcher for VAE. `model` is the AutoencoderKL (`encode(pixels)`, `decode(latent)`).

    `VaePatcher(module)` wraps a built module; `VaePatcher(sd=state_dict)` (or a state dict as
    the first argument) builds the module from it, as ComfyUI's `VAE(sd=..., device=..., dtype=...)`
    does. ComfyUI's `config=` (a VAE class chosen by a config dict) is not supported: the
    architecture is read from the weights."""

    def __init__(self, model: nn.Module | Mapping[str, torch.Tensor] | None = None,
                 load_device: torch.device | str | None = None, offload_device: torch.device | str | None = None,
                 *, sd: Mapping[str, torch.Tensor] | None = None, device: torch.device | str | None = None,
                 config: Any = None, dtype: torch.dtype | None = None, metadata: Mapping[str, str] | None = None,
                 cache_patched_weights: bool = True) -> None:
        if config is not None:
            raise VaeConstructionError("comfy.sd.VAE(config=...): VAE architectures chosen by a config dict are not "
                                       "supported; pass the state dict (sd=...) and the architecture is read from it")
        if isinstance(model, Mapping):
            model, sd = None, model
        if model is None:
            if sd is None:
                raise VaeConstructionError("comfy.sd.VAE: give the VAE's state dict (sd=...) or a built module")
            from comfy_core.patching.vae_build import vae_module_from

            model = vae_module_from(sd, dtype or torch.float32, metadata=metadata)
        elif sd is not None:
            raise VaeConstructionError("comfy.sd.VAE: give either a module or a state dict (sd=...), not both")
        super().__init__(model, load_device if load_device is not None else device,
                         offload_device, cache_patched_weights=cache_patched_weights)

    # --- ComfyUI's VAE attributes (comfy/sd.py: VAE) ---

    @property
    def first_stage_model(self) -> torch.nn.Module:
        return self.model

    @property
    def patcher(self) -> "VaePatcher":
        """ComfyUI keeps a ModelPatcher beside its VAE; here the VAE is its own patcher."""
        return self

    @property
    def device(self) -> torch.device:
        return self.load_device

    @property
    def output_device(self) -> torch.device:
        """Where results go (ComfyUI's intermediate device): the offload device."""
        return self.offload_device

    @property
    def vae_dtype(self) -> torch.dtype:
        for tensor in self.model.parameters():
            return tensor.dtype
        return torch.float32

    @property
    def downscale_ratio(self) -> int:
        return int(self.model.downscale_ratio)

    @property
    def upscale_ratio(self) -> int:
        return int(self.model.downscale_ratio)

    @property
    def latent_channels(self) -> int:
        return int(self.model.latent_channels)

    @property
    def latent_dim(self) -> int:
        """Spatial dimensions of the latent (2 for an image VAE)."""
        return 2

    def spacial_compression_decode(self) -> int:
        return self.upscale_ratio

    def spacial_compression_encode(self) -> int:
        return self.downscale_ratio

    def temporal_compression_decode(self) -> None:
        return None

    @staticmethod
    def process_input(image: torch.Tensor) -> torch.Tensor:
        """Pixels 0..1 -> the module's -1..1 input."""
        return image * 2.0 - 1.0

    @staticmethod
    def process_output(image: torch.Tensor) -> torch.Tensor:
        """The module's -1..1 output -> pixels 0..1, clamped."""
        return torch.clamp((image + 1.0) / 2.0, min=0.0, max=1.0)

    def memory_used_decode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        """Bytes a decode of a latent of `shape` [B, c, h, w] needs: our estimate, the decoder's
        full-resolution activation held about three times (input, normalised, output
        of a res block), plus the mid-block attention matrix at latent resolution."""
        batch, h, w = shape[0], shape[-2], shape[-1]
        ratio = self.upscale_ratio
        size = torch.empty((), dtype=dtype).element_size()
        widest = self._full_resolution_channels()
        return int(batch * (3 * widest * h * ratio * w * ratio + (h * w) ** 2) * size)

    def memory_used_encode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        """Bytes an encode of pixels of `shape` [B, H, W, C] needs (as `memory_used_decode`)."""
        batch, height, width = shape[0], shape[1], shape[2]
        ratio = self.downscale_ratio
        size = torch.empty((), dtype=dtype).element_size()
        widest = self._full_resolution_channels()
        return int(batch * (3 * widest * height * width + (height * width // ratio ** 2) ** 2) * size)

    def _full_resolution_channels(self) -> int:
        config = getattr(self.model, "config", None)
        ch = getattr(config, "ch", None)
        if ch is None:
            return 128
        return int(ch * getattr(config, "ch_mult", (1,))[0])

    def get_sd(self) -> dict[str, torch.Tensor]:
        """The VAE's state dict (original weights), in the LDM names ComfyUI saves."""
        return self.model_state_dict()

    def throw_exception_if_invalid(self) -> None:
        """ComfyUI's check that the VAE was built; ours always is (construction raises otherwise)."""

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

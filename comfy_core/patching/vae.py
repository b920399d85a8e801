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

A video VAE (Wan 2.1 / 2.2, `comfy_core.models.wan_vae.WanVAE`, `latent_dim` 3) answers as ComfyUI's
VAE object does for Wan: `encode(frames [T, H, W, C])` -> `[1, C, T', h, w]`, `decode(latent
[B, C, T', h, w])` -> `[B, T, H, W, 3]`, `downscale_ratio`/`upscale_ratio` as `(frames function, f,
f)` tuples, `temporal_compression_decode()` 4, and `decode_tiled`/`encode_tiled` tile time
(`tile_t`/`overlap_t`, in latent frames for decode, in frames for encode) and space in one tiling.
`decode` runs as many videos at once as the device's free memory holds (`memory_used_decode`
per video; the decoder itself streams one latent frame at a time) and, like ComfyUI, falls back
to a tiled decode (and `encode` to a tiled encode) when the device runs out of memory.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import nn

from comfy_core.memory import device_free_memory, is_out_of_memory
from comfy_core.models.vae import VAEConfigError
from comfy_core.models.vae_tiling import Axis, Progress, blended_tiles, crop_to_multiple, tiled_nd
from comfy_core.models.wan_vae import latent_frames, pixel_frames
from comfy_core.patching.patcher import Patcher

log = logging.getLogger(__name__)

# ComfyUI's defaults for a 2-D VAE: decode tiles in latent units, encode tiles in pixels.
DECODE_TILE, DECODE_OVERLAP = 64, 16
ENCODE_TILE, ENCODE_OVERLAP = 512, 64
# ComfyUI's defaults for a video VAE (`decode_tiled_3d` / `encode_tiled_3d`): space as above in
# latent / pixel units, time untiled unless asked, tiles overlapping by one (latent) frame.
VIDEO_DECODE_TILE, VIDEO_DECODE_OVERLAP, VIDEO_DECODE_TILE_T = 32, 8, 999
VIDEO_ENCODE_TILE_T = 9999
# The pixel size of the tiles ComfyUI falls back to when a video decode or encode runs out of memory.
VIDEO_FALLBACK_TILE = 256


class VaeConstructionError(TypeError):
    """`VaePatcher(...)` / ComfyUI's `comfy.sd.VAE(...)` called with arguments it cannot honour."""


# VaePatcher subclasses built from state dicts this module's VAEs do not read (LTX-2's audio VAE):
# (test of the tensor names, subclass); each registers itself where it is defined
# (comfy_core/patching/audio_vae.py), which the package imports.
STATE_DICT_KINDS: list[tuple[Callable[[Iterable[str]], bool], type]] = []


class VaePatcher(Patcher):
    """Patcher for VAE. `model` is the AutoencoderKL (`encode(pixels)`, `decode(latent)`).

    `VaePatcher(module)` wraps a built module; `VaePatcher(sd=state_dict)` (or a state dict as
    the first argument) builds the module from it, as ComfyUI's `VAE(sd=..., device=..., dtype=...)`
    does. ComfyUI's `config=` (a VAE class chosen by a config dict) is not supported: the
    architecture is read from the weights. A state dict of LTX-2's audio VAE (its vocoder's
    names, as ComfyUI detects it) makes an `AudioVaePatcher` (comfy_core/patching/audio_vae.py)."""

    def __new__(cls, model: nn.Module | Mapping[str, torch.Tensor] | None = None,  # __init__'s signature
                load_device: torch.device | str | None = None, offload_device: torch.device | str | None = None,
                *, sd: Mapping[str, torch.Tensor] | None = None, device: torch.device | str | None = None,
                config: Any = None, dtype: torch.dtype | None = None, metadata: Mapping[str, str] | None = None,
                cache_patched_weights: bool = True) -> "VaePatcher":
        state = model if isinstance(model, Mapping) else sd
        if cls is VaePatcher and isinstance(state, Mapping):
            for reads, subclass in STATE_DICT_KINDS:
                if reads(state.keys()):
                    return super().__new__(subclass)  # type: ignore[return-value]  # its __init__ builds it
        return super().__new__(cls)

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
    def is_video(self) -> bool:
        return self.latent_dim == 3

    @property
    def downscale_ratio(self) -> Any:
        """The spatial factor; for a video VAE ComfyUI's `(frames -> latent frames, f, f)`."""
        f = int(self.model.downscale_ratio)
        if self.is_video:
            return (functools.partial(latent_frames, ratio=int(self.model.temporal_ratio)), f, f)
        return f

    @property
    def upscale_ratio(self) -> Any:
        """The spatial factor; for a video VAE ComfyUI's `(latent frames -> frames, f, f)`."""
        f = int(self.model.downscale_ratio)
        if self.is_video:
            return (functools.partial(pixel_frames, ratio=int(self.model.temporal_ratio)), f, f)
        return f

    @property
    def downscale_index_formula(self) -> tuple[int, int, int] | None:
        """ComfyUI's `(frames, height, width)` factors of a video VAE (LTXV nodes read them); None
        for an image VAE."""
        if not self.is_video:
            return None
        f = int(self.model.downscale_ratio)
        return (int(self.model.temporal_ratio), f, f)

    @property
    def upscale_index_formula(self) -> tuple[int, int, int] | None:
        return self.downscale_index_formula

    @property
    def latent_channels(self) -> int:
        return int(self.model.latent_channels)

    @property
    def latent_dim(self) -> int:
        """Axes of the latent after the channels (2 for an image VAE, 3 for a video VAE)."""
        return int(getattr(self.model, "latent_dim", 2))

    def spacial_compression_decode(self) -> int:
        return int(self.model.downscale_ratio)

    def spacial_compression_encode(self) -> int:
        return int(self.model.downscale_ratio)

    def temporal_compression_decode(self) -> int | None:
        """Frames per latent frame (4 for Wan), None for an image VAE (as ComfyUI)."""
        return int(self.model.temporal_ratio) if self.is_video else None

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
        of a res block), plus the mid-block attention matrix at latent resolution. A video
        latent [B, c, T, h, w] needs the same for any T (`_video_chunk_bytes`)."""
        batch, h, w = shape[0], shape[-2], shape[-1]
        ratio = self.spacial_compression_decode()
        own = getattr(self.model, "working_bytes", None)  # a video VAE's own estimate (LTX-Video's)
        if self.is_video and own is not None:
            return batch * own(h * ratio * w * ratio, pixel_frames(shape[2], ratio=int(self.model.temporal_ratio)),
                               dtype)
        if self.is_video:
            return batch * self._video_chunk_bytes(h * ratio * w * ratio, dtype)
        size = torch.empty((), dtype=dtype).element_size()
        widest = self._full_resolution_channels()
        return int(batch * (3 * widest * h * ratio * w * ratio + (h * w) ** 2) * size)

    def memory_used_encode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        """Bytes an encode of pixels of `shape` [B, H, W, C] needs (as `memory_used_decode`)."""
        if self.is_video:  # [B, T, H, W, C] or frames [T, H, W, C]: one video
            batch = shape[0] if len(shape) == 5 else 1
            own = getattr(self.model, "working_bytes", None)
            if own is not None:
                return batch * own(shape[-3] * shape[-2], shape[-4], dtype)
            return batch * self._video_chunk_bytes(shape[-3] * shape[-2], dtype)
        batch, height, width = shape[0], shape[1], shape[2]
        ratio = self.downscale_ratio
        size = torch.empty((), dtype=dtype).element_size()
        widest = self._full_resolution_channels()
        return int(batch * (3 * widest * height * width + (height * width // ratio ** 2) ** 2) * size)

    def _video_chunk_bytes(self, pixels: int, dtype: torch.dtype) -> int:
        """Our estimate of a video VAE's working memory for frames of `pixels` pixels: it streams
        chunks of `temporal_ratio` frames, so the peak is one chunk's full-resolution activations
        whatever the video's length: the widest full-resolution level's residual block holds its
        input, the normalised copy, the causally padded copy (two more frames), oneDNN's
        reordered copy of that and the output; Wan 2.2's residual levels also hold their input for
        the duplicating shortcut and its copies. `bench/wan_vae.py` measured about 8 (Wan 2.1)
        and 11 (Wan 2.2) padded-chunk-sized tensors of that width (416x240, float32, CPU) and
        prints the measured peak beside this estimate."""
        config = self.model.config
        widest = max(config.dim, config.decoder_dim) * config.dim_mult[0]
        positions = pixels // config.patch_size ** 2  # Wan 2.2 works on 2x2 patches
        size = torch.empty((), dtype=dtype).element_size()
        frames = int(self.model.temporal_ratio) + 2  # a chunk plus the two frames carried over
        tensors = 11 if config.residual else 8
        return int(tensors * widest * frames * positions * size)

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
        """Pixels `[B, H, W, C]` in 0..1 to a latent `[B, c, h, w]` (the module's scaling); on a
        video VAE frames `[T, H, W, C]` (or videos `[B, T, H, W, C]`) to `[B, c, T', h, w]`."""
        if not self.is_video:
            with torch.no_grad(), self.applied() as vae:
                return vae.encode(pixels.to(self.load_device)).to(self.offload_device)
        out_of_memory = False
        try:
            with torch.no_grad(), self.applied() as vae:
                return vae.encode(pixels.to(self.load_device)).to(self.offload_device)
        except Exception as exc:  # noqa: BLE001 -- only out-of-memory is retried, the rest re-raised
            if not is_out_of_memory(exc):
                raise
            out_of_memory = True  # retried below, once the failed attempt's tensors are released
        assert out_of_memory
        log.warning("Ran out of memory when regular VAE encoding, retrying with tiled VAE encoding.")
        tile = VIDEO_FALLBACK_TILE
        return self.encode_tiled(pixels, tile_x=tile, tile_y=tile, overlap=tile // 4)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """A latent `[B, c, h, w]` to pixels `[B, H, W, C]` in 0..1; on a video VAE a latent
        `[B, c, T', h, w]` to videos `[B, T, H, W, 3]`."""
        if not self.is_video:
            with torch.no_grad(), self.applied() as vae:
                return vae.decode(latent.to(self.load_device)).to(self.offload_device)
        self._check_video_latent(latent, "decode")
        out_of_memory = False
        try:
            with torch.no_grad(), self.applied() as vae:
                return self._decode_videos(vae, latent)
        except Exception as exc:  # noqa: BLE001 -- only out-of-memory is retried, the rest re-raised
            if not is_out_of_memory(exc):
                raise
            out_of_memory = True
        assert out_of_memory
        log.warning("Ran out of memory when regular VAE decoding, retrying with tiled VAE decoding.")
        tile = VIDEO_FALLBACK_TILE // self.spacial_compression_decode()
        return self.decode_tiled(latent, tile_x=tile, tile_y=tile, overlap=tile // 4)

    def _check_video_latent(self, latent: torch.Tensor, what: str) -> None:
        channels = int(self.model.latent_channels)
        if latent.ndim != 5 or latent.shape[1] != channels:
            raise VAEConfigError(f"VAE.{what}: this video VAE expects a latent [B, {channels}, T, h, w], "
                                 f"got {tuple(latent.shape)}")

    def _decode_videos(self, vae: nn.Module, latent: torch.Tensor) -> torch.Tensor:
        """As many videos at a time as the device's free memory holds (all of them where the
        device does not report it, the CPU), each streamed one latent frame at a time."""
        free = device_free_memory(torch.device(self.load_device))
        per_video = self.memory_used_decode((1, *latent.shape[1:]), self.vae_dtype)
        step = latent.shape[0] if free is None else max(1, free // max(1, per_video))
        parts = []
        for start in range(0, latent.shape[0], step):
            raw = vae.decode_raw(latent[start:start + step].to(self.load_device), output_device=self.offload_device)
            # process_output in place on our own buffer (81 frames at 832x480 are 0.4 GB a copy),
            # then one channels-last copy, so VAEDecode's frame batch is a view of it.
            pixels = raw.float().add_(1.0).div_(2.0).clamp_(0.0, 1.0)
            parts.append(pixels.permute(0, 2, 3, 4, 1).contiguous())  # [b, T, H, W, 3]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def decode_tiled(self, samples: torch.Tensor, tile_x: int | None = None, tile_y: int | None = None,
                     overlap: int | None = None, tile_t: int | None = None, overlap_t: int | None = None,
                     *, progress: Progress | None = None) -> torch.Tensor:
        """A latent `[B, c, h, w]` to pixels `[B, H, W, 3]` in 0..1, decoded in overlapping tiles
        of `tile_x` x `tile_y` latent pixels blended over `overlap` (latent pixels).

        `tile_t`/`overlap_t` tile the time axis of video VAEs; an image VAE has none, so they are
        accepted and unused, as in ComfyUI. On a video VAE the latent is `[B, c, T', h, w]`, tiled
        over time in tiles of `tile_t` latent frames (at least 2) overlapping by `overlap_t`
        (at least 1), and the result is `[B, T, H, W, 3]`."""
        if self.is_video:
            return self._decode_video_tiled(samples, tile_x, tile_y, overlap, tile_t, overlap_t, progress)
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
        dropped. `tile_t`/`overlap_t` are accepted and unused (no time axis), except on a video
        VAE: frames `[T, H, W, C]` are then tiled over time too, `tile_t` and `overlap_t` in frames
        (converted to whole latent frames as ComfyUI does), and the result is `[1, c, T', h, w]`."""
        if self.is_video:
            return self._encode_video_tiled(pixels, tile_x, tile_y, overlap, tile_t, overlap_t, progress)
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

    # --- video VAEs: one tiling over time and space (ComfyUI's decode_tiled_3d / encode_tiled_3d) ---

    def _decode_video_tiled(self, samples: torch.Tensor, tile_x: int | None, tile_y: int | None, overlap: int | None,
                            tile_t: int | None, overlap_t: int | None, progress: Progress | None) -> torch.Tensor:
        self._check_video_latent(samples, "decode_tiled")
        f, ratio = self.spacial_compression_decode(), int(self.model.temporal_ratio)
        overlap = VIDEO_DECODE_OVERLAP if overlap is None else overlap
        frames = functools.partial(pixel_frames, ratio=ratio)
        axes = (Axis(VIDEO_DECODE_TILE_T if tile_t is None else max(2, tile_t),
                     1 if overlap_t is None else max(1, overlap_t), frames, lambda p: p * ratio),
                Axis(VIDEO_DECODE_TILE if tile_x is None else tile_x, overlap, lambda n: n * f, lambda p: p * f),
                Axis(VIDEO_DECODE_TILE if tile_y is None else tile_y, overlap, lambda n: n * f, lambda p: p * f))
        load = self.load_device
        with torch.no_grad(), self.applied() as vae:
            raw = tiled_nd(samples, lambda z: vae.decode_raw(z.to(load)).float(), axes, vae.out_channels,
                           self.offload_device, progress)
        return self.process_output(raw).permute(0, 2, 3, 4, 1)  # [B, T, H, W, 3]

    def _encode_video_tiled(self, pixels: torch.Tensor, tile_x: int | None, tile_y: int | None, overlap: int | None,
                            tile_t: int | None, overlap_t: int | None, progress: Progress | None) -> torch.Tensor:
        f, ratio = self.spacial_compression_encode(), int(self.model.temporal_ratio)
        if pixels.ndim not in (4, 5) or pixels.shape[-1] < 3:
            raise VAEConfigError(f"VAE.encode_tiled: expected frames [T, H, W, C>=3], got {tuple(pixels.shape)}")
        video = pixels if pixels.ndim == 5 else pixels.unsqueeze(0)  # [B, T, H, W, C]
        if video.shape[2] < f or video.shape[3] < f or video.shape[1] == 0:
            raise VAEConfigError(f"VAE.encode_tiled: frames {video.shape[3]}x{video.shape[2]} (x{video.shape[1]}) "
                                 f"are smaller than {f}x{f}")
        to_latent = functools.partial(latent_frames, ratio=ratio)
        to_pixels = functools.partial(pixel_frames, ratio=ratio)
        # ComfyUI's conversion: whole latent frames per tile (at least 2), the overlap at most half a tile.
        tile_latent = VIDEO_ENCODE_TILE_T if tile_t is None else max(2, to_latent(tile_t))
        overlap_frames = 1 if overlap_t is None else to_pixels(max(1, min(tile_latent // 2, to_latent(overlap_t))))
        overlap = ENCODE_OVERLAP if overlap is None else overlap
        used = to_pixels(to_latent(video.shape[1]))
        cropped = torch.stack([crop_to_multiple(v, f) for v in video[:, :used]])  # [B, T, H, W, C]
        x = cropped[..., :3].permute(0, 4, 1, 2, 3) * 2.0 - 1.0  # [B, 3, T, H, W] in -1..1
        axes = (Axis(to_pixels(tile_latent), overlap_frames, to_latent, lambda p: p / ratio),
                Axis(ENCODE_TILE if tile_x is None else tile_x, overlap, lambda n: n / f, lambda p: p / f),
                Axis(ENCODE_TILE if tile_y is None else tile_y, overlap, lambda n: n / f, lambda p: p / f))
        load = self.load_device
        with torch.no_grad(), self.applied() as vae:
            return tiled_nd(x, lambda t: vae.encode_raw(t.to(load)).float(), axes, vae.latent_channels,
                            self.offload_device, progress)

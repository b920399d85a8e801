"""ComfyUI's `comfy.sd.VAE` class for node packs, over our `VaePatcher` (comfy_core/patching/vae.py).

`comfy.sd.VAE(sd=...)` builds our VAE, exactly the object our loaders return (a `VaePatcher`, or
the kind a state dict names: LTX-2's audio VAE), and `isinstance(vae, comfy.sd.VAE)` holds for
every VAE of ours. What packs also do with the class is subclass it:

- calling `super().__init__(sd=...)`: the subclass is a `VaePatcher` and behaves as one;
- or, as spacepxl's ComfyUI-VAE-Utils' `CustomVAE` does, copying ComfyUI's `VAE.__init__`: never
  calling ours, the subclass sets ComfyUI's attributes itself (`first_stage_model`, `patcher` (a
  `comfy.model_patcher.ModelPatcher` of it), `device`, `vae_dtype`, `output_device`,
  `latent_channels`, `latent_dim`, `downscale_ratio`, `upscale_ratio`, the index formulas,
  `process_input` / `process_output`, `memory_used_encode` / `memory_used_decode`, ...).

In ComfyUI those are plain instance attributes. Here several are computed properties of our VAE;
on this class each is an attribute an instance may set (its own value then wins, as a plain
attribute set does in ComfyUI), read from our VAE otherwise. An instance built the second way
(our `VaePatcher.__init__` never ran: it holds no module of ours) is a ComfyUI VAE: `encode`,
`decode`, their tiled forms and the compression getters follow today's ComfyUI `comfy/sd.py: VAE`
over the attributes it set (the module's `encode(x)` / `decode(z)` on `[B, C, ...]` tensors in the
module's range, `process_input` / `process_output` around them, the memory estimate loading the
patcher with `comfy.model_management.load_models_gpu`, batches sized by the free memory, a tiled
retry when the device runs out of memory, ComfyUI's tilings through `comfy.utils.tiled_scale` /
`tiled_scale_multidim`); attributes it did not set have ComfyUI's defaults. Read there, written here.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import torch

from comfy_core.patching.vae import VaePatcher

log = logging.getLogger(__name__)

# VaePatcher's computed ComfyUI attributes: settable on instances of the class below.
_COMPUTED = ("first_stage_model", "patcher", "device", "output_device", "vae_dtype", "is_video", "downscale_ratio",
             "upscale_ratio", "downscale_index_formula", "upscale_index_formula", "latent_channels", "latent_dim")

# ComfyUI's `VAE.__init__` defaults, for an instance that sets ComfyUI's attributes itself.
_COMFY_DEFAULTS: dict[str, Any] = {
    "first_stage_model": None, "patcher": None, "device": None, "output_device": None, "vae_dtype": torch.float32,
    "downscale_ratio": 8, "upscale_ratio": 8, "downscale_index_formula": None, "upscale_index_formula": None,
    "latent_channels": 4, "latent_dim": 2,
}


def _comfy_built(vae: Any) -> bool:
    """Our `VaePatcher.__init__` never ran on `vae` (a pack's subclass set ComfyUI's attributes)."""
    return "_state" not in vars(vae)


def _comfy_only(vae: Any, name: str) -> None:
    if not _comfy_built(vae):
        raise NotImplementedError(f"comfy.sd.VAE.{name}: ComfyUI's tiling pass runs on a VAE that set ComfyUI's "
                                  "attributes itself; ours tiles through encode_tiled / decode_tiled")


class _Settable:
    """One of ComfyUI's VAE attributes that our VAE computes: the instance's own value when it set
    one (no `__set__`: the instance's dictionary wins), else ours, else ComfyUI's default for an
    instance that is a ComfyUI VAE."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.computed = VaePatcher.__dict__[name]
        self.__doc__ = self.computed.__doc__

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        if _comfy_built(obj):
            if self.name == "is_video":
                return obj.latent_dim == 3
            return _COMFY_DEFAULTS[self.name]
        return self.computed.__get__(obj, owner)


class _VAEType(type):
    """`isinstance(x, comfy.sd.VAE)` / `issubclass(X, comfy.sd.VAE)` also hold for our VAEs (what
    our loaders return and `comfy.sd.VAE(sd=...)` builds), as every ComfyUI VAE is one."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if cls is VAE:
            return isinstance(obj, VaePatcher)
        return type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub: Any) -> bool:
        if cls is VAE:
            return isinstance(sub, type) and issubclass(sub, VaePatcher)
        return type.__subclasscheck__(cls, sub)


def _ratio(value: Any, index: int) -> Any:
    """Element `index` of a `(frames function, h, w)` ratio, or the number itself."""
    try:
        return value[index]
    except TypeError:
        return value


class VAE(VaePatcher, metaclass=_VAEType):
    """ComfyUI's `comfy.sd.VAE(sd=None, device=None, config=None, dtype=None, metadata=None)` (see
    the module docstring)."""

    # ComfyUI's defaults of the attributes VAE.__init__ sets (an instance's own value wins).
    output_channels = 3
    pad_channel_value = None
    working_dtypes = (torch.bfloat16, torch.float32)
    disable_offload = False
    not_video = False
    size = None
    extra_1d_channel = None
    crop_input = True
    handles_tiling = False
    format_encoded = None

    def __new__(cls, sd: Any = None, device: Any = None, config: Any = None, dtype: Any = None, metadata: Any = None,
                *args: Any, **kwargs: Any) -> Any:  # ComfyUI's parameters; a subclass's own may follow
        if cls is VAE:  # ComfyUI's constructor: our VAE, of the kind the state dict names
            return VaePatcher(sd=sd, device=device, config=config, dtype=dtype, metadata=metadata, **kwargs)
        return super().__new__(cls, sd, device, **kwargs)

    def cache_signature(self) -> Any:
        """Ours: what our VAE says it is by value; a ComfyUI-built one has no such identity (the
        cache keys it by the node that made it)."""
        return None if _comfy_built(self) else super().cache_signature()

    def __repr__(self) -> str:
        if _comfy_built(self):
            return f"{type(self).__name__}({type(self.first_stage_model).__name__}, device={self.device})"
        return super().__repr__()

    # --- what ComfyUI's VAE computes from its attributes ---

    def throw_exception_if_invalid(self) -> None:
        if _comfy_built(self) and self.first_stage_model is None:
            raise RuntimeError("ERROR: VAE is invalid: None\n\nIf the VAE is from a checkpoint loader node your "
                               "checkpoint does not contain a valid VAE.")
        super().throw_exception_if_invalid()

    def spacial_compression_decode(self) -> int:
        if not _comfy_built(self):
            return super().spacial_compression_decode()
        return _ratio(self.upscale_ratio, -1)

    def spacial_compression_encode(self) -> int:
        if not _comfy_built(self):
            return super().spacial_compression_encode()
        return _ratio(self.downscale_ratio, -1)

    def temporal_compression_decode(self) -> int | None:
        if not _comfy_built(self):
            return super().temporal_compression_decode()
        frames = _ratio(self.upscale_ratio, 0)
        return round(frames(8192) / 8192) if callable(frames) else None

    def get_sd(self) -> dict[str, torch.Tensor]:
        if not _comfy_built(self):
            return super().get_sd()
        return self.first_stage_model.state_dict()

    def model_size(self) -> int:
        if self.size is None:
            self.size = sum(t.nelement() * t.element_size() for t in self.first_stage_model.state_dict().values())
        return self.size

    def vae_output_dtype(self) -> torch.dtype:
        from compat import devices

        return devices.intermediate_dtype()

    def memory_used_encode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:  # type: ignore[override]
        if not _comfy_built(self):
            return super().memory_used_encode(shape, dtype)
        # ComfyUI's default estimate (an AutoencoderKL's); its VAEs set their own
        return int(1767 * shape[2] * shape[3] * torch.empty((), dtype=dtype).element_size())

    def memory_used_decode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:  # type: ignore[override]
        if not _comfy_built(self):
            return super().memory_used_decode(shape, dtype)
        return int(2178 * shape[2] * shape[3] * 64 * torch.empty((), dtype=dtype).element_size())

    # --- ComfyUI's encode / decode over its attributes (a ComfyUI-built instance) ---

    def _load(self, memory: float) -> None:
        from compat.device_memory import load_models_gpu

        load_models_gpu([self.patcher], memory_required=int(memory), force_full_load=self.disable_offload)

    def _batch(self, memory: float) -> int:
        from compat.devices import get_free_memory

        return max(1, int(get_free_memory(self.device) / max(1, memory)))

    def vae_encode_crop_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        """Pixels `[B, ..., C]` cropped (centred) to whole latent cells, their channels cut or
        padded (`pad_channel_value`) to `output_channels`."""
        if self.crop_input:
            factor = self.spacial_compression_encode()
            for axis, size in enumerate(pixels.shape[1:-1], start=1):
                whole = (size // factor) * factor
                if whole != size:
                    pixels = pixels.narrow(axis, (size % factor) // 2, whole)
        channels = self.output_channels
        if pixels.shape[-1] > channels:
            pixels = pixels[..., :channels]
        elif pixels.shape[-1] < channels and self.pad_channel_value is not None:
            fill = self.pad_channel_value
            mode, value = (fill, None) if isinstance(fill, str) else ("constant", fill)
            pixels = torch.nn.functional.pad(pixels, (0, channels - pixels.shape[-1]), mode=mode, value=value)
        return pixels

    def _decode_fn(self) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda z: self.first_stage_model.decode(z.to(self.vae_dtype).to(self.device)).to(self.vae_output_dtype())

    def _encode_fn(self) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda x: self.first_stage_model.encode(self.process_input(x).to(self.vae_dtype).to(self.device)).to(
            self.vae_output_dtype())

    def decode_tiled_(self, samples: torch.Tensor, tile_x: int = 64, tile_y: int = 64, overlap: int = 16) -> torch.Tensor:
        """A 2-D latent decoded in three tilings (tall, wide, square tiles), averaged; `[B, C, H, W]`."""
        if not _comfy_built(self):  # ours: our tiled decode
            return super().decode_tiled(samples, tile_x, tile_y, overlap).movedim(-1, 1)
        import comfy.utils

        shapes = ((tile_x // 2, tile_y * 2), (tile_x * 2, tile_y // 2), (tile_x, tile_y))
        steps = sum(samples.shape[0] * comfy.utils.get_tiled_scale_steps(samples.shape[3], samples.shape[2], tx, ty,
                                                                          overlap) for tx, ty in shapes)
        bar = comfy.utils.ProgressBar(steps)
        total = sum(comfy.utils.tiled_scale(samples, self._decode_fn(), tx, ty, overlap, upscale_amount=self.upscale_ratio,
                                            out_channels=self.output_channels, output_device=self.output_device, pbar=bar)
                    for tx, ty in shapes)
        return self.process_output(total / 3.0)

    def decode_tiled_1d(self, samples: torch.Tensor, tile_x: int = 256, overlap: int = 32) -> torch.Tensor:
        _comfy_only(self, "decode_tiled_1d")
        import comfy.utils

        decode = self._decode_fn()
        if samples.ndim != 3:  # [B, C, extra, T]: the extra axis folded into the channels
            shape = samples.shape
            samples = samples.reshape((shape[0], shape[1] * shape[2], -1))
            inner = decode
            decode = lambda a: inner(a.reshape((-1, shape[1], shape[2], a.shape[-1])))  # noqa: E731
        return self.process_output(comfy.utils.tiled_scale_multidim(
            samples, decode, tile=(tile_x,), overlap=overlap, upscale_amount=self.upscale_ratio,
            out_channels=self.output_channels, output_device=self.output_device))

    def decode_tiled_3d(self, samples: torch.Tensor, tile_t: int = 999, tile_x: int = 32, tile_y: int = 32,
                        overlap: Any = (1, 8, 8)) -> torch.Tensor:
        if not _comfy_built(self):  # ours: our tiled video decode, back to [B, C, T, H, W]
            return super().decode_tiled(samples, tile_x, tile_y, overlap[1], tile_t=tile_t,
                                        overlap_t=overlap[0]).movedim(-1, 1)
        import comfy.utils

        return self.process_output(comfy.utils.tiled_scale_multidim(
            samples, self._decode_fn(), tile=(tile_t, tile_x, tile_y), overlap=overlap,
            upscale_amount=self.upscale_ratio, out_channels=self.output_channels,
            index_formulas=self.upscale_index_formula, output_device=self.output_device))

    def encode_tiled_(self, pixel_samples: torch.Tensor, tile_x: int = 512, tile_y: int = 512,
                      overlap: int = 64) -> torch.Tensor:
        if not _comfy_built(self):  # ours: pixels [B, C, H, W] through our tiled encode
            return super().encode_tiled(pixel_samples.movedim(1, -1), tile_x, tile_y, overlap)
        import comfy.utils

        shapes = ((tile_x, tile_y), (tile_x * 2, tile_y // 2), (tile_x // 2, tile_y * 2))
        steps = sum(pixel_samples.shape[0] * comfy.utils.get_tiled_scale_steps(
            pixel_samples.shape[3], pixel_samples.shape[2], tx, ty, overlap) for tx, ty in shapes)
        bar = comfy.utils.ProgressBar(steps)
        total = sum(comfy.utils.tiled_scale(pixel_samples, self._encode_fn(), tx, ty, overlap,
                                            upscale_amount=1 / self.downscale_ratio, out_channels=self.latent_channels,
                                            output_device=self.output_device, pbar=bar) for tx, ty in shapes)
        return total / 3.0

    def encode_tiled_1d(self, samples: torch.Tensor, tile_x: int = 256 * 2048, overlap: int = 64 * 2048) -> torch.Tensor:
        _comfy_only(self, "encode_tiled_1d")
        import comfy.utils

        if self.latent_dim == 1:
            out = comfy.utils.tiled_scale_multidim(samples, self._encode_fn(), tile=(tile_x,), overlap=overlap,
                                                   upscale_amount=1 / self.downscale_ratio,
                                                   out_channels=self.latent_channels, output_device=self.output_device)
            return out
        extra = self.extra_1d_channel
        channels = self.latent_channels * extra
        encode = self._encode_fn()
        out = comfy.utils.tiled_scale_multidim(samples, lambda a: encode(a).reshape(1, channels, -1),
                                               tile=(tile_x // extra,), overlap=overlap // extra,
                                               upscale_amount=1 / self.downscale_ratio, out_channels=channels,
                                               output_device=self.output_device)
        return out.reshape(samples.shape[0], self.latent_channels, extra, -1)

    def encode_tiled_3d(self, samples: torch.Tensor, tile_t: int = 9999, tile_x: int = 512, tile_y: int = 512,
                        overlap: Any = (1, 64, 64)) -> torch.Tensor:
        _comfy_only(self, "encode_tiled_3d")
        import comfy.utils

        return comfy.utils.tiled_scale_multidim(samples, self._encode_fn(), tile=(tile_t, tile_x, tile_y), overlap=overlap,
                                                upscale_amount=self.downscale_ratio, out_channels=self.latent_channels,
                                                downscale=True, index_formulas=self.downscale_index_formula,
                                                output_device=self.output_device)

    def decode(self, samples_in: torch.Tensor, vae_options: dict | None = None) -> torch.Tensor:  # type: ignore[override]
        """A latent `[B, C, ...]` to pixels `[B, ..., C]` (channels last)."""
        if not _comfy_built(self):
            return super().decode(samples_in)
        from comfy_core.memory import is_out_of_memory

        self.throw_exception_if_invalid()
        if self.latent_dim == 2 and samples_in.ndim == 5:
            samples_in = samples_in[:, :, 0]
        pixels = None
        out_of_memory = False
        try:
            memory = self.memory_used_decode(samples_in.shape, self.vae_dtype)
            self._load(memory)
            batch = self._batch(memory)
            with torch.no_grad():
                for start in range(0, samples_in.shape[0], batch):
                    part = samples_in[start:start + batch].to(device=self.device, dtype=self.vae_dtype)
                    out = self.first_stage_model.decode(part, **(vae_options or {}))
                    out = self.process_output(out.to(device=self.output_device, dtype=self.vae_output_dtype()))
                    if pixels is None:
                        pixels = torch.empty((samples_in.shape[0],) + tuple(out.shape[1:]), device=self.output_device,
                                             dtype=self.vae_output_dtype())
                    pixels[start:start + batch] = out
        except Exception as exc:  # noqa: BLE001 -- only running out of memory is retried, tiled
            if not is_out_of_memory(exc):
                raise
            out_of_memory = True
        if out_of_memory:
            log.warning("Warning: Ran out of memory when regular VAE decoding, retrying with tiled VAE decoding.")
            dims = samples_in.ndim - 2
            with torch.no_grad():
                if dims == 1 or self.extra_1d_channel is not None:
                    pixels = self.decode_tiled_1d(samples_in)
                elif dims == 2:
                    pixels = self.decode_tiled_(samples_in)
                else:
                    tile = 256 // self.spacial_compression_decode()
                    pixels = self.decode_tiled_3d(samples_in, tile_x=tile, tile_y=tile, overlap=(1, tile // 4, tile // 4))
        return pixels.to(self.output_device).movedim(1, -1)

    def decode_tiled(self, samples: torch.Tensor, tile_x: int | None = None, tile_y: int | None = None,
                     overlap: int | None = None, tile_t: int | None = None, overlap_t: int | None = None) -> torch.Tensor:
        if not _comfy_built(self):
            return super().decode_tiled(samples, tile_x, tile_y, overlap, tile_t=tile_t, overlap_t=overlap_t)
        self.throw_exception_if_invalid()
        self._load(self.memory_used_decode(samples.shape, self.vae_dtype))
        dims = samples.ndim - 2
        args: dict[str, Any] = {k: v for k, v in (("tile_x", tile_x), ("tile_y", tile_y), ("overlap", overlap))
                                if v is not None}
        with torch.no_grad():
            if dims == 1 or self.extra_1d_channel is not None:
                args.pop("tile_y", None)
                out = self.decode_tiled_1d(samples, **args)
            elif dims == 2:
                out = self.decode_tiled_(samples, **args)
            else:
                args["overlap"] = (1 if overlap_t is None else max(1, overlap_t), overlap, overlap)
                if tile_t is not None:
                    args["tile_t"] = max(2, tile_t)
                out = self.decode_tiled_3d(samples, **args)
        return out.movedim(1, -1)

    def _as_model_input(self, pixel_samples: torch.Tensor, not_video: bool | None) -> torch.Tensor:
        """Pixels `[B, ..., C]` -> the module's `[B, C, ...]`; for a video VAE frames `[T, H, W, C]`
        become one video `[1, C, T, H, W]` (or, `not_video`, T single-frame videos)."""
        pixels = self.vae_encode_crop_pixels(pixel_samples).movedim(-1, 1)
        if self.latent_dim == 3 and pixels.ndim < 5:
            single = self.not_video if not_video is None else not_video
            pixels = pixels.unsqueeze(2) if single else pixels.movedim(1, 0).unsqueeze(0)
        return pixels

    def encode(self, pixel_samples: torch.Tensor, not_video: bool | None = None) -> torch.Tensor:  # type: ignore[override]
        """Pixels `[B, ..., C]` to a latent `[B, C, ...]`."""
        if not _comfy_built(self):
            return super().encode(pixel_samples)
        from comfy_core.memory import is_out_of_memory

        self.throw_exception_if_invalid()
        pixels = self._as_model_input(pixel_samples, not_video)
        samples = None
        out_of_memory = False
        try:
            memory = self.memory_used_encode(pixels.shape, self.vae_dtype)
            self._load(memory)
            batch = self._batch(memory)
            with torch.no_grad():
                for start in range(0, pixels.shape[0], batch):
                    part = self.process_input(pixels[start:start + batch]).to(device=self.device, dtype=self.vae_dtype)
                    out = self.first_stage_model.encode(part).to(self.output_device).to(self.vae_output_dtype())
                    if samples is None:
                        samples = torch.empty((pixels.shape[0],) + tuple(out.shape[1:]), device=self.output_device,
                                              dtype=self.vae_output_dtype())
                    samples[start:start + batch] = out
        except Exception as exc:  # noqa: BLE001 -- only running out of memory is retried, tiled
            if not is_out_of_memory(exc):
                raise
            out_of_memory = True
        if out_of_memory:
            log.warning("Warning: Ran out of memory when regular VAE encoding, retrying with tiled VAE encoding.")
            with torch.no_grad():
                if self.latent_dim == 3:
                    samples = self.encode_tiled_3d(pixels, tile_x=256, tile_y=256, overlap=(1, 64, 64))
                elif self.latent_dim == 1 or self.extra_1d_channel is not None:
                    samples = self.encode_tiled_1d(pixels)
                else:
                    samples = self.encode_tiled_(pixels)
        if self.format_encoded is not None:
            samples = self.format_encoded(samples)
        return samples

    def encode_tiled(self, pixel_samples: torch.Tensor, tile_x: int | None = None, tile_y: int | None = None,
                     overlap: int | None = None, tile_t: int | None = None, overlap_t: int | None = None,
                     not_video: bool | None = None) -> torch.Tensor:
        if not _comfy_built(self):
            return super().encode_tiled(pixel_samples, tile_x, tile_y, overlap, tile_t=tile_t, overlap_t=overlap_t)
        self.throw_exception_if_invalid()
        pixels = self._as_model_input(pixel_samples, not_video)
        self._load(self.memory_used_encode(pixels.shape, self.vae_dtype))
        args: dict[str, Any] = {k: v for k, v in (("tile_x", tile_x), ("tile_y", tile_y), ("overlap", overlap))
                                if v is not None}
        with torch.no_grad():
            if self.latent_dim == 1:
                args.pop("tile_y", None)
                return self.encode_tiled_1d(pixels, **args)
            if self.latent_dim == 2:
                return self.encode_tiled_(pixels, **args)
            to_latent, to_frames = self.downscale_ratio[0], self.upscale_ratio[0]
            tile_latent = 9999 if tile_t is None else max(2, to_latent(tile_t))
            args["tile_t"] = to_frames(tile_latent)
            overlap_frames = 1 if overlap_t is None else to_frames(max(1, min(tile_latent // 2, to_latent(overlap_t))))
            args["overlap"] = (overlap_frames, overlap, overlap)
            frames = to_frames(to_latent(pixels.shape[2]))
            return self.encode_tiled_3d(pixels[:, :, :frames], **args)


for _name in _COMPUTED:
    setattr(VAE, _name, _Settable(_name))
del _name

__all__ = ["VAE"]

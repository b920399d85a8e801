"""ComfyUI's config-built autoencoders (`comfy.ldm.models.autoencoder`) and the config-taking
`Encoder` / `Decoder` / `VideoDecoder` (`comfy.ldm.modules.diffusionmodules.model`,
`comfy.ldm.modules.temporal_ae`), as adapters onto our VAE networks (comfy_core/models/vae.py,
comfy_core/models/video_vae.py). Behaviour of today's ComfyUI `comfy/ldm/models/autoencoder.py`
(read there, written here):

- `DiagonalGaussianRegularizer(sample=False)`: `forward(z)` splits the moments `z` into mean and
  log-variance (channels halved) and returns `(mean, None)`, or a sample of the posterior with
  `sample=True`; `EmptyRegularizer`: `forward(z) -> (z, None)`.
- `AutoencodingEngine(*, encoder_config, decoder_config, regularizer_config)` builds each part
  with `comfy.ldm.util.instantiate_from_config`; `encode(x, return_reg_log=False,
  unregularized=False)` is `regularization(encoder(x))` (x `[B, C, H, W]` in -1..1), `decode(z,
  **kw)` the decoder's output (unclamped, -1..1), `forward(x) -> (z, dec, reg_log)`.
- `AutoencodingEngineLegacy(embed_dim, ddconfig=..., max_batch_size=None)`: the LDM encoder and
  decoder of `ddconfig` with the 1x1 `quant_conv` / `post_quant_conv`; `AutoencoderKL(ddconfig=,
  embed_dim=)` is that with the Gaussian regulariser.

The encoder and decoder are ours (parameter names are the LDM checkpoint's, so a VAE's state dict
loads into them unchanged); `Encoder(**ddconfig)` maps ComfyUI's keyword arguments onto our
`VAEConfig` and refuses what our network does not build (attention at inner resolutions, a single
set of moments, 3-D convolutions). `isinstance(x, Encoder)` (and the others) also holds for our
own networks' parts, as it does in ComfyUI for every loaded SD / Flux VAE.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import torch
from torch import nn

from comfy_core.models import vae as _vae
from comfy_core.models import video_vae as _video_vae


class UnsupportedAutoencoderConfig(ValueError):
    """A ComfyUI encoder / decoder configuration our VAE network does not build."""


class _AlsoOurs(type):
    """`isinstance(obj, Adapter)` is also true for an instance of the adapter's `_ours` class (our
    network built by our own loaders), so a pack's type checks see the engine's VAEs."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if type.__instancecheck__(cls, obj):
            return True
        ours = cls.__dict__.get("_ours")
        return ours is not None and isinstance(obj, ours)


def vae_config_from_ddconfig(*, ch: int = 128, out_ch: int = 3, ch_mult: Any = (1, 2, 4, 8), num_res_blocks: int = 2,
                             attn_resolutions: Any = (), dropout: float = 0.0, resamp_with_conv: bool = True,
                             in_channels: int = 3, resolution: int = 256, z_channels: int = 4, double_z: bool = True,
                             conv3d: bool = False, embed_dim: Optional[int] = None, use_quant_conv: bool = True,
                             **ignored: Any) -> _vae.VAEConfig:
    """Our `VAEConfig` for ComfyUI's LDM `ddconfig` keyword arguments (`Encoder(**ddconfig)`)."""
    if attn_resolutions:
        raise UnsupportedAutoencoderConfig(f"attention at resolutions {list(attn_resolutions)}: our VAE has attention "
                                           "only in its middle block (attn_resolutions must be empty)")
    if not double_z:
        raise UnsupportedAutoencoderConfig("double_z=False: our VAE encoder always gives mean and log-variance")
    if conv3d:
        raise UnsupportedAutoencoderConfig("conv3d=True (a 3-D convolution VAE) is not built by this engine")
    if not resamp_with_conv:
        raise UnsupportedAutoencoderConfig("resamp_with_conv=False (pooling resamplers) is not built by this engine")
    z = int(z_channels)
    return _vae.VAEConfig(ch=int(ch), ch_mult=tuple(int(m) for m in ch_mult), num_res_blocks=int(num_res_blocks),
                          z_channels=z, embed_dim=z if embed_dim is None else int(embed_dim), in_channels=int(in_channels),
                          out_ch=int(out_ch), use_quant_conv=use_quant_conv)


def _config(config: Any, kwargs: Mapping[str, Any]) -> _vae.VAEConfig:
    if isinstance(config, _vae.VAEConfig):
        if kwargs:
            raise TypeError(f"a VAEConfig and keyword arguments {sorted(kwargs)} were both given")
        return config
    if config is not None:
        raise TypeError(f"expected a VAEConfig or ComfyUI's keyword arguments, got {type(config).__name__}")
    return vae_config_from_ddconfig(**kwargs)


class Encoder(_vae.Encoder, metaclass=_AlsoOurs):
    """ComfyUI's `Encoder(*, ch, out_ch, ch_mult, num_res_blocks, attn_resolutions, dropout,
    in_channels, resolution, z_channels, double_z=True, ...)` over our encoder: `forward(x)` gives
    the moments `[B, 2 * z_channels, H/f, W/f]`."""

    _ours = _vae.Encoder

    def __init__(self, config: Any = None, **kwargs: Any) -> None:
        super().__init__(_config(config, kwargs))


class Decoder(_vae.Decoder, metaclass=_AlsoOurs):
    """ComfyUI's `Decoder(*, ch, out_ch, ch_mult, num_res_blocks, ..., z_channels)` over our
    decoder: `forward(z, **kwargs)` gives `[B, out_ch, H, W]` in about -1..1."""

    _ours = _vae.Decoder

    def __init__(self, config: Any = None, **kwargs: Any) -> None:
        kwargs.pop("give_pre_end", None), kwargs.pop("tanh_out", None)
        super().__init__(_config(config, kwargs))

    def forward(self, z: torch.Tensor, **kwargs: Any) -> torch.Tensor:  # ComfyUI passes decoder kwargs
        return super().forward(z)


class VideoDecoder(_video_vae.VideoDecoder, metaclass=_AlsoOurs):
    """ComfyUI's `VideoDecoder(*args, video_kernel_size=[3, 1, 1], alpha=0.0, merge_strategy="learned",
    time_mode="conv-only", **ddconfig)` (Stable Video Diffusion's temporal decoder) over ours;
    `forward(z, timesteps=None)` decodes `timesteps` frames per video (all rows: one video)."""

    _ours = _video_vae.VideoDecoder

    def __init__(self, config: Any = None, *, video_kernel_size: Any = (3, 1, 1), alpha: float = 0.0,
                 merge_strategy: str = "learned", time_mode: str = "conv-only", **kwargs: Any) -> None:
        if tuple(int(k) for k in (video_kernel_size if isinstance(video_kernel_size, (list, tuple))
                                  else (video_kernel_size,) * 3)) != (3, 1, 1):
            raise UnsupportedAutoencoderConfig(f"video_kernel_size {video_kernel_size}: our temporal decoder is SVD's "
                                               "(3, 1, 1)")
        if merge_strategy != "learned" or time_mode != "conv-only":
            raise UnsupportedAutoencoderConfig(f"merge_strategy={merge_strategy!r}, time_mode={time_mode!r}: our "
                                               "temporal decoder is SVD's ('learned', 'conv-only')")
        kwargs.pop("give_pre_end", None), kwargs.pop("tanh_out", None)
        super().__init__(_config(config, kwargs))

    def forward(self, z: torch.Tensor, timesteps: Optional[int] = None, **kwargs: Any) -> torch.Tensor:
        return super().forward(z, timesteps)


class DiagonalGaussianRegularizer(nn.Module):
    """`forward(z) -> (mode or sample of the Gaussian with moments z, None)`."""

    def __init__(self, sample: bool = False) -> None:
        super().__init__()
        self.sample = sample

    def get_trainable_parameters(self) -> Any:
        yield from ()

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, None]:
        mean, logvar = torch.chunk(z, 2, dim=1)
        if self.sample:
            std = torch.exp(0.5 * torch.clamp(logvar, -30.0, 20.0))
            return mean + std * torch.randn_like(mean), None
        return mean, None


class EmptyRegularizer(nn.Module):
    """`forward(z) -> (z, None)`."""

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, None]:
        return z, None


def _instantiate(config: Mapping[str, Any]) -> Any:
    from compat.ldm_util import instantiate_from_config

    return instantiate_from_config(config)


class AbstractAutoencoder(nn.Module, metaclass=_AlsoOurs):
    """Base of the engines (ComfyUI's training-side arguments `ema_decay`, `monitor`, `input_key`
    are accepted and unused: nothing trains here)."""

    _ours = None

    def __init__(self, ema_decay: Optional[float] = None, monitor: Optional[str] = None, input_key: str = "jpg",
                 **kwargs: Any) -> None:
        super().__init__()
        self.input_key = input_key
        self.use_ema = False
        if monitor is not None:
            self.monitor = monitor

    def get_input(self, batch: Mapping[str, Any]) -> Any:
        return batch[self.input_key]

    def encode(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise NotImplementedError("encode()-method of abstract base class called")

    def decode(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise NotImplementedError("decode()-method of abstract base class called")


class AutoencodingEngine(AbstractAutoencoder):
    """Encoder, decoder and regulariser built from their configs (see the module docstring).
    `isinstance` also holds for our loaded KL autoencoders (ComfyUI builds every SD / Flux VAE as one)."""

    _ours = _vae.AutoencoderKL

    def __init__(self, *args: Any, encoder_config: Mapping[str, Any], decoder_config: Mapping[str, Any],
                 regularizer_config: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.encoder = _instantiate(encoder_config)
        self.decoder = _instantiate(decoder_config)
        self.regularization = _instantiate(regularizer_config)

    def get_last_layer(self) -> Any:
        last = getattr(self.decoder, "get_last_layer", None)
        return last() if last is not None else self.decoder.conv_out.weight

    def _dtype(self) -> torch.dtype:
        return next(self.encoder.parameters()).dtype

    def encode(self, x: torch.Tensor, return_reg_log: bool = False, unregularized: bool = False) -> Any:
        z = self.encoder(x.to(self._dtype()))
        if unregularized:
            return z, dict()
        z, reg_log = self.regularization(z)
        return (z, reg_log) if return_reg_log else z

    def decode(self, z: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self.decoder(z.to(self._dtype()), **kwargs)

    def forward(self, x: torch.Tensor, **additional_decode_kwargs: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
        z, reg_log = self.encode(x, return_reg_log=True)
        return z, self.decode(z, **additional_decode_kwargs), reg_log


_ENCODER = "comfy.ldm.modules.diffusionmodules.model.Encoder"
_DECODER = "comfy.ldm.modules.diffusionmodules.model.Decoder"


class AutoencodingEngineLegacy(AutoencodingEngine):
    """`AutoencodingEngineLegacy(embed_dim, ddconfig=..., regularizer_config=..., max_batch_size=None)`:
    the LDM encoder / decoder with `quant_conv` (moments -> 2 * embed_dim) and `post_quant_conv`;
    with `max_batch_size` the batch runs in slices of that many rows."""

    _ours = _vae.AutoencoderKL

    def __init__(self, embed_dim: int, **kwargs: Any) -> None:
        self.max_batch_size = kwargs.pop("max_batch_size", None)
        ddconfig = dict(kwargs.pop("ddconfig"))
        super().__init__(encoder_config={"target": _ENCODER, "params": ddconfig},
                         decoder_config={"target": _DECODER, "params": ddconfig}, **kwargs)
        vae_config_from_ddconfig(**ddconfig)  # refuses what our network does not build, as Encoder did
        doubled = 2 if ddconfig.get("double_z", True) else 1
        z = int(ddconfig["z_channels"])
        self.quant_conv = nn.Conv2d(doubled * z, doubled * int(embed_dim), 1)
        self.post_quant_conv = nn.Conv2d(int(embed_dim), z, 1)
        self.embed_dim = int(embed_dim)

    def _slices(self, x: torch.Tensor) -> list[torch.Tensor]:
        if self.max_batch_size is None:
            return [x]
        step = int(self.max_batch_size)
        return [x[i * step:(i + 1) * step] for i in range(int(math.ceil(x.shape[0] / step)))]

    def encode(self, x: torch.Tensor, return_reg_log: bool = False) -> Any:  # type: ignore[override]
        x = x.to(self._dtype())
        z = torch.cat([self.quant_conv(self.encoder(part)) for part in self._slices(x)], 0)
        z, reg_log = self.regularization(z)
        return (z, reg_log) if return_reg_log else z

    def decode(self, z: torch.Tensor, **decoder_kwargs: Any) -> torch.Tensor:
        z = z.to(self._dtype())
        return torch.cat([self.decoder(self.post_quant_conv(part), **decoder_kwargs) for part in self._slices(z)], 0)


class AutoencoderKL(AutoencodingEngineLegacy):
    """`AutoencoderKL(ddconfig=..., embed_dim=...)`: the legacy engine with the Gaussian regulariser
    (ComfyUI's `lossconfig` is accepted and unused)."""

    _ours = _vae.AutoencoderKL

    def __init__(self, **kwargs: Any) -> None:
        kwargs.pop("lossconfig", None), kwargs.pop("loss_config", None)
        kwargs.setdefault("regularizer_config", {"target": "comfy.ldm.models.autoencoder.DiagonalGaussianRegularizer"})
        super().__init__(**kwargs)


__all__ = ["AbstractAutoencoder", "AutoencoderKL", "AutoencodingEngine", "AutoencodingEngineLegacy", "Decoder",
           "DiagonalGaussianRegularizer", "EmptyRegularizer", "Encoder", "UnsupportedAutoencoderConfig", "VideoDecoder",
           "vae_config_from_ddconfig"]

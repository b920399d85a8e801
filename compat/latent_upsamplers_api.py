"""ComfyUI's latent upsampler classes packs build themselves, over our networks
(comfy_core/upscale/): behaviour of today's ComfyUI `comfy/ldm/hunyuan_video/upsampler.py`
(`HunyuanVideo15SRModel`, imported by `comfy_extras/nodes_hunyuan.py`) and
`comfy/ldm/lightricks/latent_upsampler.py` (`LatentUpsampler`), read there, written here.

- `HunyuanVideo15SRModel(model_type, config)`: "720p" builds the super-resolution network from
  `{in_channels, out_channels, hidden_channels, num_blocks, global_residual=False}`, "1080p" the
  latent upsampler from `{z_channels, out_channels, block_out_channels}`; `load_sd(sd)` (strict,
  our names are ComfyUI's: the 1080p file's `nin_shortcut.` renamed `nin_shortcut.conv.` first, as
  ComfyUI's loader does), `get_sd()`, `.patcher`, `.model`, `.load_device`, `.dtype` and
  `resample_latent(latent)` (the network on the load device). It is our LATENT_UPSCALE_MODEL, so
  the engine's latent upscale nodes take it too.
- `LatentUpsampler(in_channels=128, mid_channels=512, num_blocks_per_stage=4, dims=3,
  spatial_upsample=True, temporal_upsample=False, spatial_scale=2.0, rational_resampler=False)` and
  `LatentUpsampler.from_config(config)` (the file's `config` metadata): LTX's latent upsampler,
  our `LTXLatentUpsampler`; `isinstance` also holds for the one our loader builds.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

import torch

from comfy_core.upscale import hv15_latent_upsampler as _hv15
from comfy_core.upscale.latent_models import KINDS, LatentUpscaleModel
from comfy_core.upscale.ltx_latent_upsampler import LTXLatentUpsampler, LTXLatentUpsamplerConfig


class UnsupportedUpsamplerConfig(ValueError):
    """A ComfyUI upsampler configuration our networks do not build."""


def _kind(name: str) -> Any:
    return next(k for k in KINDS if k.name == name)


def _devices() -> tuple[torch.device, torch.device]:
    try:
        from nodes.environment import model_devices

        return model_devices()
    except Exception:  # no environment in force: the CPU
        return torch.device("cpu"), torch.device("cpu")


def _take(config: Mapping[str, Any], names: tuple[str, ...], what: str) -> dict[str, Any]:
    extra = sorted(set(config) - set(names))
    if extra:
        raise UnsupportedUpsamplerConfig(f"{what}: config keys {extra} are not supported here")
    return {name: config[name] for name in names if name in config}


class HunyuanVideo15SRModel(LatentUpscaleModel):
    """See the module docstring."""

    def __init__(self, model_type: str, config: Mapping[str, Any]) -> None:
        config = dict(config)
        if model_type == "720p":
            if config.pop("global_residual", False):
                raise UnsupportedUpsamplerConfig("HunyuanVideo15SRModel 720p: global_residual=True is not built here")
            cfg = _hv15.SRModelConfig(**_take(config, ("in_channels", "out_channels", "hidden_channels", "num_blocks"),
                                              "HunyuanVideo15SRModel 720p"))
            network, kind = _hv15.SRModel720p(cfg), _kind("hunyuanvideo15_sr_720p")
        elif model_type == "1080p":
            values = _take(config, ("z_channels", "out_channels", "block_out_channels"), "HunyuanVideo15SRModel 1080p")
            values["block_out_channels"] = tuple(int(c) for c in values["block_out_channels"])
            cfg = _hv15.UpsamplerConfig(**values)
            network, kind = _hv15.LatentUpsampler1080p(cfg), _kind("hunyuanvideo15_upsampler_1080p")
        else:
            raise UnsupportedUpsamplerConfig(f"HunyuanVideo15SRModel: model_type must be '720p' or '1080p', "
                                             f"got {model_type!r}")
        load_device, offload_device = _devices()
        super().__init__(network.eval(), kind, cfg, load_device, offload_device)

    @property
    def patcher(self) -> "HunyuanVideo15SRModel":
        return self

    @property
    def dtype(self) -> torch.dtype:
        return self.model_dtype()

    def load_sd(self, sd: Mapping[str, torch.Tensor]) -> Any:
        return self.model.load_state_dict(dict(sd), strict=True)

    def get_sd(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict()


class _AlsoOurs(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return type.__instancecheck__(cls, obj) or isinstance(obj, LTXLatentUpsampler)


class LatentUpsampler(LTXLatentUpsampler, metaclass=_AlsoOurs):
    """See the module docstring."""

    def __init__(self, in_channels: int = 128, mid_channels: int = 512, num_blocks_per_stage: int = 4, dims: int = 3,
                 spatial_upsample: bool = True, temporal_upsample: bool = False, spatial_scale: float = 2.0,
                 rational_resampler: bool = False) -> None:
        super().__init__(LTXLatentUpsamplerConfig(
            in_channels=int(in_channels), mid_channels=int(mid_channels), num_blocks_per_stage=int(num_blocks_per_stage),
            dims=int(dims), spatial_upsample=bool(spatial_upsample), temporal_upsample=bool(temporal_upsample),
            spatial_scale=float(spatial_scale), rational_resampler=bool(rational_resampler)))

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "LatentUpsampler":
        known = {f.name for f in fields(LTXLatentUpsamplerConfig)}
        return cls(**{k: v for k, v in config.items() if k in known})

    def get_config(self) -> dict[str, Any]:
        return {f.name: getattr(self.config, f.name) for f in fields(LTXLatentUpsamplerConfig)}


__all__ = ["HunyuanVideo15SRModel", "LatentUpsampler", "UnsupportedUpsamplerConfig"]

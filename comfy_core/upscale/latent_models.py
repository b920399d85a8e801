"""Latent upscale models: the networks ComfyUI's `LatentUpscaleModelLoader` loads from the
`latent_upscale_models` folder, told apart by their tensor names, and the LATENT_UPSCALE_MODEL
wire object that carries one.

`KINDS` is the registry, in the order ComfyUI's loader tests its markers (its
`comfy_extras/nodes_hunyuan.py: LatentUpscaleModelLoader`, read, not copied):

| kind | marker tensor | network |
|---|---|---|
| `hunyuanvideo15_sr_720p` | `blocks.0.block.0.conv.weight` | HunyuanVideo 1.5's 720p super-resolution model (comfy_core.upscale.hv15_latent_upsampler.py) |
| `hunyuanvideo15_upsampler_1080p` | `up.0.block.0.conv1.conv.weight` | HunyuanVideo 1.5's 1080p latent upsampler (comfy_core.upscale.hv15_latent_upsampler.py) |
| `ltx` | `post_upsample_res_blocks.0.conv2.bias` | LTX's latent upsampler (`ltx_latent_upsampler.py`: every LTX-Video 0.9 / LTX-2 / 2.3 / 2.5 variant) |

A new kind is one more `LatentUpscaleKind` entry of `KINDS` (its marker and its builder, a function
`(tensors, metadata, dtype) -> (network, config)` from the module that owns the network, imported
inside the builder so this module stays light; it raises a `ValueError` for weights it cannot build);
a recognised kind without a builder is refused by name. The wire object is the same for every kind. The model runs in
the VAE dtype the device favours among bf16 and fp32 (ComfyUI's `vae_dtype(allowed_dtypes=[bf16,
fp32])`), unless the caller names one.

`LatentUpscaleModel` is a `Patcher` (ComfyUI's LTX branch hands out a `ModelPatcher` too): packs
read `.model`, `.load_device`, `.model_dtype()` and call `load_models_gpu([model])`; the memory
manager moves it like any model. `upsample_normalized` is LTXVLatentUpsampler's work: un-normalise
the latent with the VAE's per-channel statistics, run the network, normalise again.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import nn

from comfy_core.patching.patcher import Patcher
from comfy_core.upscale.ltx_latent_upsampler import (
    MARKER as LTX_MARKER, LTXLatentUpsamplerConfig, build as build_ltx)


class LatentUpscaleModelError(ValueError):
    """A file that is not a latent upscale model this engine builds, or whose weights do not fit
    the network they name; the message names the file and what is wrong."""


@dataclass(frozen=True)
class LatentUpscaleKind:
    """One kind of latent upscale model: `marker`, the tensor whose presence identifies it;
    `build(tensors, metadata, dtype)` -> (network, config), or None where the kind is recognised
    but not built here (such files are refused with `title` named)."""

    name: str
    title: str
    marker: str
    build: Callable[[Mapping[str, torch.Tensor], Mapping[str, str], torch.dtype], tuple[nn.Module, Any]] | None


def _build_ltx(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str],
               dtype: torch.dtype) -> tuple[nn.Module, LTXLatentUpsamplerConfig]:
    config = LTXLatentUpsamplerConfig.detect(tensors, metadata)
    return build_ltx(config, tensors, dtype), config


def _build_hv15_sr_720p(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str],
                        dtype: torch.dtype) -> tuple[nn.Module, Any]:
    from comfy_core.upscale.hv15_latent_upsampler import build_sr_720p

    return build_sr_720p(tensors, metadata, dtype)


def _build_hv15_upsampler_1080p(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str],
                                dtype: torch.dtype) -> tuple[nn.Module, Any]:
    from comfy_core.upscale.hv15_latent_upsampler import build_upsampler_1080p

    return build_upsampler_1080p(tensors, metadata, dtype)


KINDS: tuple[LatentUpscaleKind, ...] = (
    LatentUpscaleKind("hunyuanvideo15_sr_720p", "HunyuanVideo 1.5 720p super-resolution model",
                      "blocks.0.block.0.conv.weight", _build_hv15_sr_720p),
    LatentUpscaleKind("hunyuanvideo15_upsampler_1080p", "HunyuanVideo 1.5 1080p latent upsampler",
                      "up.0.block.0.conv1.conv.weight", _build_hv15_upsampler_1080p),
    LatentUpscaleKind("ltx", "LTX latent upsampler", LTX_MARKER, _build_ltx),
)


def kind_of(names: Iterable[str], kinds: Iterable[LatentUpscaleKind] = KINDS) -> LatentUpscaleKind | None:
    """The first kind (registry order) whose marker is among `names`, None when none is."""
    present = set(names)
    for kind in kinds:
        if kind.marker in present:
            return kind
    return None


class LatentUpscaleModel(Patcher):
    """LATENT_UPSCALE_MODEL: a latent upscale network (`.model`) with its `kind` and `config`."""

    def __init__(self, model: nn.Module, kind: LatentUpscaleKind, config: Any,
                 load_device: torch.device | str | None = None,
                 offload_device: torch.device | str | None = None) -> None:
        super().__init__(model, load_device, offload_device)
        self.kind = kind
        self.config = config

    def model_dtype(self) -> torch.dtype:
        for tensor in self.model.parameters():
            return tensor.dtype
        return torch.float32

    def resample_latent(self, latent: torch.Tensor) -> torch.Tensor:
        """ComfyUI's `HunyuanVideo15SRModel.resample_latent`: the network alone (`upsample`)."""
        return self.upsample(latent)

    def upsample(self, latent: torch.Tensor,
                 around: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 after: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """The network applied to `latent` on the load device in the model's dtype (the result
        stays there, in that dtype). `around(x)` / `after(y)` run on the device just before and
        after the network (LTX's un-normalise / normalise)."""
        with torch.no_grad(), self.applied() as module:
            device = next(iter(module.parameters())).device
            x = latent.to(device=device, dtype=self.model_dtype())
            if around is not None:
                x = around(x)
            y = module(x)
            return after(y) if after is not None else y


def _statistics_width(statistics: Any) -> int | None:
    buffer = getattr(statistics, "get_buffer", None)
    try:
        return int(buffer("mean-of-means").numel()) if callable(buffer) else None
    except AttributeError:
        return None


def upsample_normalized(upscaler: LatentUpscaleModel, latent: torch.Tensor, statistics: Any) -> torch.Tensor:
    """ComfyUI's LTXVLatentUpsampler: `latent` (the VAE's normalised latent [B, C, F, H, W])
    un-normalised with the VAE's per-channel statistics (`statistics.un_normalize`: x * std +
    mean), upscaled, normalised again ((x - mean) / std), all on the model's device in its dtype;
    returned on the CPU in the latent's dtype."""
    config = upscaler.config
    if not isinstance(config, LTXLatentUpsamplerConfig):
        raise LatentUpscaleModelError(f"{upscaler.kind.title}: not an LTX latent upsampler (LTXVLatentUpsampler "
                                      f"runs LTX's)")
    if latent.ndim != 5 or latent.shape[1] != config.in_channels:
        raise LatentUpscaleModelError(f"{upscaler.kind.title} ({config.kind()}) takes a video latent [B, "
                                      f"{config.in_channels}, F, H, W], got {tuple(latent.shape)}")
    width = _statistics_width(statistics)
    if width is not None and width != config.in_channels:
        raise LatentUpscaleModelError(f"the VAE's latent statistics have {width} channels, the upsampler's latent "
                                      f"{config.in_channels}")
    out = upscaler.upsample(latent, statistics.un_normalize, statistics.normalize)
    return out.to(device="cpu", dtype=latent.dtype)


def read_latent_upscale_file(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata of a weight file (`.safetensors`, or a pickle of tensors read with
    `torch.load(weights_only=True)`: no metadata)."""
    from comfy_core.checkpoint.errors import CheckpointError
    from comfy_core.checkpoint.reader import load_tensor_file

    path = Path(path)
    try:
        return load_tensor_file(path)
    except CheckpointError as exc:
        raise LatentUpscaleModelError(f"{path.name}: not a readable weight file ({exc})") from None


def model_from_state_dict(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None,
                          name: str = "state dict", dtype: torch.dtype = torch.float32,
                          kinds: Iterable[LatentUpscaleKind] = KINDS) -> LatentUpscaleModel:
    """The latent upscale model the tensors hold (kind by marker, configuration by names, shapes
    and metadata), on the CPU in `dtype`, eval mode."""
    kinds = tuple(kinds)
    kind = kind_of(tensors, kinds)
    if kind is None:
        raise LatentUpscaleModelError(
            f"{name}: not a latent upscale model; expected one of: "
            + ", ".join(f"{k.title} (tensor {k.marker})" for k in kinds))
    if kind.build is None:
        raise LatentUpscaleModelError(f"{name}: a {kind.title}; this engine does not build that network yet")
    try:
        module, config = kind.build(tensors, metadata or {}, dtype)
    except ValueError as exc:  # LatentUpsamplerConfigError and the other builders' errors about the weights
        raise LatentUpscaleModelError(f"{name}: {exc}") from None
    return LatentUpscaleModel(module, kind, config)


def load_latent_upscale_model(path: str | Path, dtype: torch.dtype = torch.float32) -> LatentUpscaleModel:
    """The latent upscale model in the file `path` (see `model_from_state_dict`)."""
    path = Path(path)
    tensors, metadata = read_latent_upscale_file(path)
    return model_from_state_dict(tensors, metadata, path.name, dtype)

"""ComfyUI's `comfy.bg_removal_model` over our BiRefNet (comfy_core/models/birefnet/): behaviour of
today's ComfyUI `comfy/bg_removal_model.py` (read there, written here):

- `load(ckpt_path)` -> a `BackgroundRemovalModel`, or None when the file's state dict is not a
  BiRefNet's (no `bb.layers.1.blocks.0.attn.relative_position_index`); `load_background_removal_model(sd)`
  the same from a state dict.
- the model: `.patcher` (the network behind a patcher, for `comfy.model_management.load_model_gpu`),
  `.model`, `.load_device`, `.dtype`, `.image_size`, `load_sd(sd)` -> torch's `(missing, unexpected)`
  (not strict), `get_sd()`, and `encode_image(image, image_size=None)` -> MASK `[B, H, W]`: each
  image resized to the square `image_size` (the model's, 1024), normalised, BiRefNet's logits
  resized back (bicubic) and put through a sigmoid. It is our BACKGROUND_REMOVAL model, so the
  RemoveBackground node takes it too.
- `BG_REMOVAL_MODELS` (today's): `{"birefnet": BiRefNet}`, the network class by the config's
  `model_type`, built ComfyUI's way, `BiRefNet(config, dtype, device, operations)`: ComfyUI's one
  BiRefNet, the Swin-L backbone (embed 192, depths 2/2/18/2, window 12), our network
  (comfy_core/models/birefnet/network.py) with random weights in `dtype` on `device` until
  `load_sd`; `operations` (ComfyUI's `comfy.ops` cast layers) is accepted and not needed (the
  weights are cast when loaded). Its `forward` takes ComfyUI's `pixel_values=` keyword too.
- `BackgroundRemovalModel(json_config)`: ComfyUI's constructor (a JSON file: `image_size`,
  `image_mean`, `image_std`, `model_type`), the network from `BG_REMOVAL_MODELS`; a pack subclass
  whose `__init__` sets those attributes, `model` and `patcher` itself without calling ours
  (Pixaroma's RemoveBackground) works too.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping

import torch

from comfy_core.models.birefnet.model import BackgroundRemovalModel as _OurModel
from comfy_core.models.birefnet.network import BiRefNet as _OurNetwork
from comfy_core.models.birefnet.network import BiRefNetConfig


def _devices() -> tuple[torch.device, torch.device]:
    try:
        from nodes.environment import model_devices

        return model_devices()
    except Exception:  # no environment in force (a pack calling outside a run): the CPU
        return torch.device("cpu"), torch.device("cpu")


class BiRefNet(_OurNetwork):
    """ComfyUI's `comfy.background_removal.birefnet.BiRefNet` as `BG_REMOVAL_MODELS` builds it:
    `BiRefNet(config, dtype, device, operations)`, ComfyUI's Swin-L BiRefNet (module docstring)."""

    def __init__(self, config: Mapping[str, Any] | None = None, dtype: torch.dtype | None = None,
                 device: Any = None, operations: Any = None) -> None:
        with torch.device(device if device is not None else "cpu"):
            super().__init__(BiRefNetConfig())
        if dtype is not None:
            self.to(dtype)
        self.comfy_config = dict(config or {})

    def forward(self, x: torch.Tensor | None = None, pixel_values: torch.Tensor | None = None) -> torch.Tensor:
        return super().forward(pixel_values if x is None else x)


# ComfyUI's table of background removal networks by the config's `model_type` (a pack may add one).
BG_REMOVAL_MODELS: dict[str, type] = {"birefnet": BiRefNet}


class BackgroundRemovalModel(_OurModel):
    """Our BACKGROUND_REMOVAL model with ComfyUI's constructor, `patcher`, `load_sd` and `get_sd`."""

    _depth = 0  # `loaded()` nesting, for pack subclasses that never call our __init__

    def __init__(self, json_config: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(json_config, (str, os.PathLike)):  # ours: (network, image_size=, load_device=, ...)
            super().__init__(json_config, *args, **kwargs)
            return
        with open(json_config, encoding="utf-8") as f:
            config = json.load(f)
        self.model_type = config.get("model_type", "birefnet")
        self.config = dict(config)
        model_class = BG_REMOVAL_MODELS.get(self.model_type)
        if model_class is None:
            raise ValueError(f"background removal model_type {self.model_type!r} is not one of "
                             f"{sorted(BG_REMOVAL_MODELS)}")
        device, offload = _devices()
        network = model_class(config, torch.float32, offload, None).eval()  # float32: our loader's precision
        super().__init__(network, image_size=config.get("image_size", 1024), load_device=device,
                         offload_device=offload)
        self.image_mean = config.get("image_mean", [0.0, 0.0, 0.0])  # ComfyUI's defaults when the file has none
        self.image_std = config.get("image_std", [1.0, 1.0, 1.0])

    @property
    def offload_device(self) -> torch.device:
        device = self.__dict__.get("_offload_device")
        if device is None:  # a pack subclass that set only `patcher` (ComfyUI keeps it there)
            patcher = self.__dict__.get("_patcher")
            device = getattr(patcher, "offload_device", None) or getattr(self, "load_device", "cpu")
        return torch.device(device)

    @offload_device.setter
    def offload_device(self, device: Any) -> None:
        self.__dict__["_offload_device"] = device

    @property
    def patcher(self) -> Any:
        patcher = self.__dict__.get("_patcher")
        if patcher is None:
            from comfy_core.patching.patcher import Patcher

            patcher = Patcher(self.model, load_device=self.load_device, offload_device=self.offload_device)
            self.__dict__["_patcher"] = patcher
        return patcher

    @patcher.setter
    def patcher(self, patcher: Any) -> None:  # ComfyUI's __init__ (and a pack's copy of it) assigns it
        self.__dict__["_patcher"] = patcher

    def load_sd(self, sd: Mapping[str, torch.Tensor]) -> Any:
        """The weights of `sd` (ComfyUI's names) into the network, not strictly."""
        state = {k: v for k, v in sd.items() if not k.endswith("relative_position_index")}
        return self.model.load_state_dict(state, strict=False)

    def get_sd(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict()

    def encode_image(self, image: torch.Tensor, image_size: int | None = None, on_image: Any = None) -> torch.Tensor:
        return super().encode_image(image, image_size, on_image)


def load_background_removal_model(sd: Mapping[str, torch.Tensor]) -> BackgroundRemovalModel | None:
    """The BiRefNet of the state dict `sd`, or None when `sd` is not one."""
    from comfy_core.models.birefnet.network import DETECT_KEY, network_from_state_dict

    if DETECT_KEY not in sd:
        return None
    device, offload = _devices()
    network = network_from_state_dict(sd, "background removal state dict")
    return BackgroundRemovalModel(network, load_device=device, offload_device=offload)


def load(ckpt_path: str) -> BackgroundRemovalModel | None:
    """The background removal model in the file `ckpt_path`, or None when it is not a BiRefNet."""
    from comfy_core.checkpoint.reader import load_tensor_file

    state, _metadata = load_tensor_file(ckpt_path)
    return load_background_removal_model(state)


__all__ = ["BG_REMOVAL_MODELS", "BackgroundRemovalModel", "BiRefNet", "load", "load_background_removal_model"]

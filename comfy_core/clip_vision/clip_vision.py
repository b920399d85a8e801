"""`ClipVision`: the CLIP_VISION wire object, an image encoder behind a patcher.

Its surface is ComfyUI's `comfy/clip_vision.py: ClipVisionModel` where node packs read it:
`encode_image(image, crop=True) -> ClipVisionOutput`, `image_size`, `image_mean`, `image_std`,
`model` (the module), `patcher`, `load_device`, `dtype`, `get_sd()`. Encoding runs inside the
patcher's `applied()` (device placement by the memory manager, weight patches if any), and
returns its tensors on the patcher's offload device, as ComfyUI returns them on its
intermediate device.
"""
from __future__ import annotations

import torch

from comfy_core.clip_vision.config import ClipVisionConfig
from comfy_core.clip_vision.model import VisionTower
from comfy_core.clip_vision.output import ClipVisionOutput
from comfy_core.clip_vision.preprocess import clip_preprocess
from comfy_core.patching.patcher import Patcher


class ClipVision:
    """A loaded image encoder. `config` says what it is (`config.name`, geometry, key layout)."""

    def __init__(self, config: ClipVisionConfig, tower: VisionTower, *, load_device: torch.device | str | None = None,
                 offload_device: torch.device | str | None = None) -> None:
        self.config = config
        self.patcher = Patcher(tower, load_device=load_device, offload_device=offload_device)
        self.image_size = config.image_size
        self.image_mean = list(config.image_mean)
        self.image_std = list(config.image_std)
        # ComfyUI's flag: SigLIP outputs carry every layer's states.
        self.return_all_hidden_states = config.kind == "siglip"

    @property
    def model(self) -> VisionTower:
        return self.patcher.model

    @property
    def load_device(self) -> torch.device:
        return self.patcher.load_device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.patch_weight.dtype

    def encode_image(self, image: torch.Tensor, crop: bool = True) -> ClipVisionOutput:
        """IMAGE `[B, H, W, C]` (0..1) -> a `ClipVisionOutput` (float32, on the offload device).

        `crop`: resize the shortest side to the model's image size and cut out the centre (True),
        or squash the whole image to a square (False); see `clip_preprocess`."""
        with torch.no_grad(), self.patcher.applied() as tower:
            device = tower.patch_weight.device
            pixels = clip_preprocess(image.to(device), self.image_size, self.image_mean, self.image_std,
                                     crop=crop).float()
            output = tower.encode(pixels)
        offload = self.patcher.offload_device
        for key in output.keys():
            value = output[key]
            if isinstance(value, torch.Tensor):
                output[key] = value.to(offload)
        return output

    def get_sd(self) -> dict[str, torch.Tensor]:
        """The state dict, in the "hf" names ComfyUI saves clip vision files with."""
        return self.model.state_dict()

    def __repr__(self) -> str:
        c = self.config
        return (f"ClipVision({c.name}: width {c.width}, {c.layers} layers, {c.image_size}px, "
                f"patch {c.patch_size}, {self.dtype})")

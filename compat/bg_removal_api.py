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
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.models.birefnet.model import BackgroundRemovalModel as _OurModel


def _devices() -> tuple[torch.device, torch.device]:
    try:
        from nodes.environment import model_devices

        return model_devices()
    except Exception:  # no environment in force (a pack calling outside a run): the CPU
        return torch.device("cpu"), torch.device("cpu")


class BackgroundRemovalModel(_OurModel):
    """Our BACKGROUND_REMOVAL model with ComfyUI's `patcher`, `load_sd` and `get_sd`."""

    @property
    def patcher(self) -> Any:
        patcher = self.__dict__.get("_patcher")
        if patcher is None:
            from comfy_core.patching.patcher import Patcher

            patcher = Patcher(self.model, load_device=self.load_device, offload_device=self.offload_device)
            self.__dict__["_patcher"] = patcher
        return patcher

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


__all__ = ["BackgroundRemovalModel", "load", "load_background_removal_model"]

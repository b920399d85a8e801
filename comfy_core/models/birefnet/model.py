"""A loaded background removal model (ComfyUI's BACKGROUND_REMOVAL, `comfy/bg_removal_model.py`'s
`BackgroundRemovalModel`) and its mask inference, written here from that file's behaviour:

- `preprocess`: IMAGE [B, H, W, C] in 0..1 -> alpha dropped, resized to `size` x `size` (aspect
  not kept; bicubic with antialiasing, skipped when already that size), quantised to 8 bits
  (`round(clip(255 x)) / 255`), ImageNet mean / std (`birefnet.json`: size 1024) -- CLIP's
  preprocessing without the crop;
- `BackgroundRemovalModel.encode_image`: each image alone through the network, the logits resized
  back to the input's size (bicubic, no antialiasing, align_corners off), sigmoid -> MASK [B, H, W]
  float32 on the CPU.

The network runs in float32 (`dtype` chooses otherwise).
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from comfy_core.models.birefnet.network import BiRefNet, BiRefNetWeightsError, network_from_state_dict
from comfy_core.models.resident import ResidentModel

IMAGE_SIZE = 1024
IMAGE_MEAN = (0.485, 0.456, 0.406)
IMAGE_STD = (0.229, 0.224, 0.225)


def preprocess(image: torch.Tensor, size: int = IMAGE_SIZE, mean=IMAGE_MEAN, std=IMAGE_STD) -> torch.Tensor:
    """[B, H, W, C] in 0..1 -> normalised [B, 3, size, size] (module docstring)."""
    x = image[..., :3].movedim(-1, 1)
    if tuple(x.shape[2:]) != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bicubic", antialias=True)
    x = torch.clamp(255.0 * x, 0, 255).round() / 255.0
    mean_t = torch.tensor(mean, device=x.device, dtype=x.dtype).view(3, 1, 1)
    std_t = torch.tensor(std, device=x.device, dtype=x.dtype).view(3, 1, 1)
    return (x - mean_t) / std_t


class BackgroundRemovalModel(ResidentModel):
    """ComfyUI's BACKGROUND_REMOVAL: the network, its input size and normalisation, and where it
    runs (`load_device`; kept on `offload_device` between runs)."""

    def __init__(self, network: BiRefNet, *, image_size: int = IMAGE_SIZE, load_device: torch.device | str = "cpu",
                 offload_device: torch.device | str = "cpu") -> None:
        super().__init__(network, load_device=load_device, offload_device=offload_device)
        self.image_size = image_size
        self.image_mean, self.image_std = IMAGE_MEAN, IMAGE_STD
        self.dtype = next(network.parameters()).dtype

    @torch.no_grad()
    def encode_image(self, image: torch.Tensor, image_size: int | None = None, on_image=None) -> torch.Tensor:
        """MASK [B, H, W] (foreground probability, float32 on the CPU) for IMAGE [B, H, W, C];
        `on_image(done, total)` after each image."""
        total, height, width = image.shape[0], image.shape[1], image.shape[2]
        size = image_size or self.image_size
        masks = []
        with self.loaded():
            for i in range(total):
                pixels = preprocess(image[i:i + 1].to(self.load_device, torch.float32), size, self.image_mean,
                                    self.image_std)
                logits = self.model(pixels.to(self.dtype)).float()
                logits = F.interpolate(logits, size=(height, width), mode="bicubic", antialias=False)
                masks.append(torch.sigmoid(logits)[:, 0].cpu())
                if on_image is not None:
                    on_image(i + 1, total)
        return torch.cat(masks, dim=0)


def load_background_removal(path: str | Path, *, dtype: torch.dtype = torch.float32,
                            load_device: torch.device | str = "cpu",
                            offload_device: torch.device | str = "cpu") -> BackgroundRemovalModel:
    """The background removal model in the file `path` (a BiRefNet in ComfyUI's names)."""
    from comfy_core.checkpoint.errors import CheckpointError
    from comfy_core.checkpoint.reader import load_tensor_file

    path = Path(path)
    try:
        state, _metadata = load_tensor_file(path)
    except CheckpointError as exc:
        raise BiRefNetWeightsError(f"{path.name}: not a readable weights file ({exc})") from exc
    network = network_from_state_dict(state, path.name, dtype=dtype)
    return BackgroundRemovalModel(network, load_device=load_device, offload_device=offload_device)

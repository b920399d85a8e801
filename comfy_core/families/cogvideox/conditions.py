"""What the CogVideoX transformer receives besides the noisy latent and the T5 context (ComfyUI's
`comfy/model_base.py: CogVideoX.concat_cond / extra_conds`; written here):

- extra input channels (a network wider than the latent: I2V's image latent, VOID's mask latent +
  masked-video latent): `concat_latent_image` resized to the noise's size, padded with zero frames
  or cut to its length, each 16-channel block brought into model space, repeated or cut to the
  width the network takes; zeros when there is none;
- `ofs` (CogVideoX 1.5 I2V's offset embedding) when the network has one: the conditioning's, or 2.0.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.image.resize import upscale_samples
from comfy_core.models.concat_inputs import resize_to_batch_size
from comfy_core.models.model_conditions import ModelConditions

DEFAULT_OFS = 2.0


def _upscale(x: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """`[B, C, T, h, w]` resized per frame (bilinear, centre crop: ComfyUI's common_upscale)."""
    if x.shape[-2:] == (height, width):
        return x
    b, c, t = x.shape[:3]
    frames = x.permute(0, 2, 1, 3, 4).reshape(b * t, c, *x.shape[-2:])
    frames = upscale_samples(frames, width, height, "bilinear", "center")
    return frames.reshape(b, t, c, height, width).permute(0, 2, 1, 3, 4)


class CogVideoXConditions(ModelConditions):
    name = "cogvideox"

    def concat_cond(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        noise = kwargs["noise"]
        extra = model.diffusion_model.in_channels - noise.shape[1]
        if extra <= 0:
            return None
        image = kwargs.get("concat_latent_image")
        if image is None:
            return torch.zeros((noise.shape[0], extra, *noise.shape[2:]), dtype=noise.dtype, device=noise.device)
        device = kwargs.get("device") or noise.device
        image = _upscale(image.to(device), noise.shape[-1], noise.shape[-2])
        if noise.ndim == 5 and image.ndim == 5:
            if image.shape[2] < noise.shape[2]:
                image = torch.nn.functional.pad(image, (0, 0, 0, 0, 0, noise.shape[2] - image.shape[2]))
            elif image.shape[2] > noise.shape[2]:
                image = image[:, :, :noise.shape[2]]
        width = model.latent_format.channels
        image = image.clone()
        for i in range(0, image.shape[1], width):
            image[:, i:i + width] = model.process_latent_in(image[:, i:i + width])
        image = resize_to_batch_size(image, noise.shape[0])
        if image.shape[1] > extra:
            return image[:, :extra]
        if image.shape[1] < extra:
            parts = [image] * (extra // image.shape[1])
            if extra % image.shape[1]:
                parts.append(image[:, :extra % image.shape[1]])
            image = torch.cat(parts, dim=1)
        return image

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        if not getattr(model.diffusion_model, "ofs_proj_dim", None):
            return {}
        ofs = kwargs.get("ofs")
        if ofs is None:
            noise = kwargs["noise"]
            ofs = torch.full((noise.shape[0],), DEFAULT_OFS, device=noise.device, dtype=noise.dtype)
        return {"ofs": ofs}

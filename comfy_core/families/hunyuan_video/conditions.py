"""What the HunyuanVideo 1.0 network receives besides the noisy latent and the LLaVA-Llama-3 context:
ComfyUI's `comfy/model_base.py` `HunyuanVideo` / `HunyuanVideoI2V` / `HunyuanVideoSkyreelsI2V`
(`encode_adm`, `concat_cond`, `extra_conds`), written here.

- `y`: CLIP-L's pooled vector (`pooled_output`);
- `attention_mask` (the text token mask, present only when it masks something: the encoder drops
  an all-ones mask), `guidance` (default 6.0, FluxGuidance's value; read by guidance-embedding
  networks), `guiding_frame_index` (HunyuanImageToVideo "v2 (replace)"), `ref_latent` (its
  "custom": brought into model space);
- the I2V release (33 input channels, ComfyUI's `concat_keys` ("concat_image", "mask_inverted")):
  the image latent (`concat_latent_image` brought into model space, else the sampler's latent
  image), resized per frame to the latent, padded with zeros or cut to its frames, resized to the
  batch; then `1 - mask` of `concat_mask` (else the denoise mask; rounded, resized), zeros without
  one. SkyReels' I2V (32 channels): the image latent alone.
- The region a denoise mask keeps stays the clean latent at every step (ComfyUI's
  `HunyuanVideo.scale_latent_inpaint`, which its I2V classes keep), not the latent re-noised.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.wan.conditions import upscale_frames
from comfy_core.models.concat_inputs import resize_to_batch_size
from comfy_core.models.model_conditions import ConditioningError, PooledConditions

HV_DEFAULT_GUIDANCE = 6.0


def _frames_like(x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """`[b, C, T', h', w']` resized per frame to the noise's size, padded with zeros / cut to its frames."""
    x = upscale_frames(x, noise.shape[-1], noise.shape[-2])
    if x.shape[-3] < noise.shape[-3]:
        x = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, noise.shape[-3] - x.shape[-3]), value=0)
    return x[:, :, :noise.shape[-3]]


class HunyuanVideoConditions(PooledConditions):
    """See the module doc. The concatenated channels follow from the network's input width."""

    name = "hunyuan_video"

    @property
    def scale_latent_inpaint(self) -> Any:
        return lambda model, sigma, noise, latent_image: latent_image

    def concat_cond(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        noise = kwargs["noise"]  # [B, C, T, h, w]
        device = kwargs.get("device") or noise.device
        extra = model.diffusion_model.config.in_channels - noise.shape[1]
        if extra <= 0:
            return None
        if extra not in (noise.shape[1], noise.shape[1] + 1):
            raise ConditioningError(f"HunyuanVideo: a network of {model.diffusion_model.config.in_channels} input "
                                    f"channels does not fit a {noise.shape[1]}-channel latent")
        image = kwargs.get("concat_latent_image")
        if image is not None:
            image = model.process_latent_in(image.to(device))
        else:
            image = kwargs.get("latent_image")
        if image is None:
            image = torch.zeros_like(noise)
        if image.ndim != 5:
            raise ConditioningError(f"HunyuanVideo: the image latent must be a 5-D video latent, got "
                                    f"{tuple(image.shape)}")
        if image.shape[1:] != noise.shape[1:]:
            image = _frames_like(image, noise)
        parts = [resize_to_batch_size(image, noise.shape[0]).to(device)]
        if extra == noise.shape[1] + 1:  # the I2V release: then the inverted mask
            mask = kwargs.get("concat_mask", kwargs.get("denoise_mask"))
            if mask is None:
                parts.append(torch.zeros_like(noise)[:, :1])
            else:
                mask = mask.to(device)
                if mask.ndim == noise.ndim:
                    mask = mask[:, :1]
                mask = mask.reshape((-1, 1) + tuple(mask.shape[-3:]))
                if mask.shape[-2:] != noise.shape[-2:]:
                    mask = upscale_frames(mask, noise.shape[-1], noise.shape[-2])
                mask = resize_to_batch_size(mask.round(), noise.shape[0])
                parts.append(1.0 - mask)
        return torch.cat([p.to(parts[0]) for p in parts], dim=1)

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        mask = kwargs.get("attention_mask")
        if mask is not None:
            out["attention_mask"] = mask
        guidance = kwargs.get("guidance", HV_DEFAULT_GUIDANCE)
        if guidance is not None:
            out["guidance"] = torch.tensor([float(guidance)], dtype=torch.float32)
        index = kwargs.get("guiding_frame_index")
        if index is not None:
            out["guiding_frame_index"] = torch.tensor([float(index)], dtype=torch.float32)
        reference = kwargs.get("ref_latent")
        if reference is not None:
            out["ref_latent"] = model.process_latent_in(reference)
        return out

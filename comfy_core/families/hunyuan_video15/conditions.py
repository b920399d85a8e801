"""What the HunyuanVideo 1.5 network receives besides the noisy latent and the Qwen2.5-VL context:
ComfyUI's `comfy/model_base.py` `HunyuanVideo15` / `HunyuanVideo15_SR_Distilled` (`concat_cond`,
`extra_conds`), written here.

- t2v / i2v (65 input channels): the latent is followed by the image latent (`concat_latent_image`,
  resized per frame to the latent, brought into model space chunk by 32 channels, resized to the
  batch; zeros without one) and one mask channel (`concat_mask`, else the sampler's denoise mask,
  inverted so 1 marks the given frames, resized, padded with zeros to the latent's frames; zeros
  without one).
- super-resolution (98 channels): `concat_latent_image` is the whole `[B, 2C + 2, T, h, w]` block
  HunyuanVideo15SuperResolution builds (image latent, its mask, the low-resolution latent, a ones
  channel), resized but not brought into model space (as the reference code); the low-resolution
  part is noise-augmented: `aug * n + min(1 - aug, 0.75) * lq` with `n` drawn on the CPU from seed
  `seed - 10`, or `0.75 * lq` when `noise_augmentation` is 0. Zeros without one.
- `cross_attn`'s token mask (`attention_mask`, only when it masks something), ByT5 glyph states
  (`conditioning_byt5small` -> `txt_byt5`), `guidance` (default 6.0; only guidance-embedding
  networks read it), `clip_vision_output.last_hidden_state` -> `clip_fea`; the SR model runs its
  MeanFlow embedding (`disable_time_r` False).
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.wan.conditions import _in_model_space, upscale_frames
from comfy_core.models.concat_inputs import resize_to_batch_size
from comfy_core.models.model_conditions import ConditioningError, ModelConditions

HV15_DEFAULT_GUIDANCE = 6.0
SR_SEED_OFFSET = 10  # ComfyUI seeds the augmentation noise with `seed - 10`
SR_LQ_SCALE = 0.75


class HunyuanVideo15Conditions(ModelConditions):
    """See the module doc; `super_resolution`: the SR model's 98-channel conditioning."""

    name = "hunyuan_video15"

    def __init__(self, super_resolution: bool = False) -> None:
        self.super_resolution = super_resolution

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self)
                and other.super_resolution == self.super_resolution)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.super_resolution))

    def __repr__(self) -> str:
        return f"HunyuanVideo15Conditions(super_resolution={self.super_resolution})"

    def concat_cond(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        noise = kwargs["noise"]  # [B, C, T, h, w]
        device = kwargs.get("device") or noise.device
        in_channels = model.diffusion_model.config.in_channels
        if self.super_resolution:
            return self._sr_concat(noise, device, in_channels, kwargs)
        extra = in_channels - noise.shape[1] - 1  # image latent + one mask channel
        if extra <= 0:
            return None
        image = kwargs.get("concat_latent_image")
        if image is None:
            image = torch.zeros((noise.shape[0], extra, *noise.shape[2:]), dtype=noise.dtype, device=noise.device)
        else:
            if image.ndim != 5:
                raise ConditioningError(f"HunyuanVideo 1.5: concat_latent_image must be a 5-D video latent, got "
                                        f"{tuple(image.shape)}")
            image = upscale_frames(image.to(device), noise.shape[-1], noise.shape[-2])
            image = resize_to_batch_size(_in_model_space(model, image), noise.shape[0])
        if image.shape[1] != extra:
            raise ConditioningError(f"HunyuanVideo 1.5: the image latent has {image.shape[1]} channels, the model "
                                    f"takes {extra} besides the latent and the mask")
        mask = kwargs.get("concat_mask", kwargs.get("denoise_mask"))
        if mask is None:
            mask = torch.zeros_like(noise)[:, :1]
        else:
            mask = mask.to(device)
            if mask.ndim == 4:
                mask = mask.unsqueeze(2)
            mask = upscale_frames(1.0 - mask, noise.shape[-1], noise.shape[-2])
            if mask.shape[-3] < noise.shape[-3]:
                mask = torch.nn.functional.pad(mask, (0, 0, 0, 0, 0, noise.shape[-3] - mask.shape[-3]), value=0)
            mask = resize_to_batch_size(mask, noise.shape[0])
        return torch.cat((image, mask.to(image)), dim=1)

    @staticmethod
    def _sr_concat(noise: torch.Tensor, device: Any, in_channels: int, kwargs: dict[str, Any]) -> torch.Tensor:
        channels = noise.shape[1]
        width = 2 * channels + 2
        if in_channels - channels != width:
            raise ConditioningError(f"HunyuanVideo 1.5 SR: the network takes {in_channels - channels} conditioning "
                                    f"channels, a {channels}-channel latent gives {width}")
        image = kwargs.get("concat_latent_image")
        if image is None:
            return torch.zeros((noise.shape[0], width, *noise.shape[2:]), dtype=noise.dtype, device=noise.device)
        if image.ndim != 5 or image.shape[1] != width:
            raise ConditioningError(f"HunyuanVideo 1.5 SR: concat_latent_image must be [B, {width}, T, h, w] (from "
                                    f"HunyuanVideo15SuperResolution), got {tuple(image.shape)}")
        image = upscale_frames(image.to(device), noise.shape[-1], noise.shape[-2])
        image = resize_to_batch_size(image, noise.shape[0]).clone()
        lq = slice(channels + 1, 2 * channels + 1)
        augmentation = float(kwargs.get("noise_augmentation", 0.0) or 0.0)
        if augmentation > 0:
            generator = torch.Generator(device="cpu")
            generator.manual_seed(int(kwargs.get("seed", 0) or 0) - SR_SEED_OFFSET)
            fresh = torch.randn(image[:, lq].shape, generator=generator, dtype=image.dtype, device="cpu")
            image[:, lq] = augmentation * fresh.to(image.device) + min(1.0 - augmentation, SR_LQ_SCALE) * image[:, lq]
        else:
            image[:, lq] = SR_LQ_SCALE * image[:, lq]
        return image

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        mask = kwargs.get("attention_mask")
        if mask is not None and torch.numel(mask) != int(mask.sum()):
            out["attention_mask"] = mask
        byt5 = kwargs.get("conditioning_byt5small")
        if byt5 is not None:
            out["txt_byt5"] = byt5
        guidance = kwargs.get("guidance", HV15_DEFAULT_GUIDANCE)
        if guidance is not None:
            out["guidance"] = torch.tensor([float(guidance)], dtype=torch.float32)
        clip_vision_output = kwargs.get("clip_vision_output")
        if clip_vision_output is not None:
            states = getattr(clip_vision_output, "last_hidden_state", None)
            if states is None:
                raise ConditioningError("HunyuanVideo 1.5: clip_vision_output has no last_hidden_state")
            out["clip_fea"] = states
        if self.super_resolution:
            out["disable_time_r"] = False
        return out

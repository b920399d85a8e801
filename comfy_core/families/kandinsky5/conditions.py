"""What the Kandinsky 5 network receives besides the noisy latent and the Qwen2.5-VL context:
ComfyUI's `comfy/model_base.py` `Kandinsky5` / `Kandinsky5Image` (`encode_adm`, `concat_cond`,
`extra_conds`), written here.

- `y`: CLIP-L's pooled vector (`pooled_output`), checked against the network's width;
- video models: the latent is followed by a zero image latent (the same channels) and one mask
  channel: `concat_mask` (else the sampler's denoise mask) inverted so 1 marks the given frames,
  resized per frame to the latent, padded with zeros to its frames, resized to the batch; zeros
  without one. The image model takes no extra channels;
- `time_dim_replace` (Kandinsky5ImageToVideo's clean start-image latent) brought into model space;
- the text token mask passed on as `attention_mask` (the network does not read it, as ComfyUI's).
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.wan.conditions import upscale_frames
from comfy_core.models.concat_inputs import resize_to_batch_size
from comfy_core.models.model_conditions import ConditioningError, PooledConditions


class Kandinsky5Conditions(PooledConditions):
    """See the module doc; `image`: the text-to-image model (no concatenated channels)."""

    name = "kandinsky5"

    def __init__(self, image: bool = False) -> None:
        self.image = image

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.image == self.image  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.image))

    def __repr__(self) -> str:
        return f"Kandinsky5Conditions(image={self.image})"

    def concat_cond(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        if self.image:
            return None
        noise = kwargs["noise"]  # [B, C, T, h, w]
        device = kwargs.get("device") or noise.device
        image = torch.zeros_like(noise)
        mask = kwargs.get("concat_mask", kwargs.get("denoise_mask"))
        if mask is None:
            mask = torch.zeros_like(noise)[:, :1]
        else:
            mask = mask.to(device)
            if mask.ndim == 4:
                mask = mask.unsqueeze(2)
            if mask.ndim != 5:
                raise ConditioningError(f"Kandinsky 5: concat_mask must be [B, 1, T, h, w], got {tuple(mask.shape)}")
            mask = upscale_frames(1.0 - mask, noise.shape[-1], noise.shape[-2])
            if mask.shape[-3] < noise.shape[-3]:
                mask = torch.nn.functional.pad(mask, (0, 0, 0, 0, 0, noise.shape[-3] - mask.shape[-3]), value=0)
            if mask.shape[1] != 1 or mask.shape[-3] != noise.shape[-3]:
                raise ConditioningError(f"Kandinsky 5: concat_mask {tuple(mask.shape)} does not fit the latent "
                                        f"{tuple(noise.shape)} (one channel, at most its frames)")
            mask = resize_to_batch_size(mask, noise.shape[0])
        return torch.cat((image, mask.to(image)), dim=1)

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        mask = kwargs.get("attention_mask")
        if mask is not None:
            out["attention_mask"] = mask
        replace = kwargs.get("time_dim_replace")
        if replace is not None:
            if replace.ndim != 5:
                raise ConditioningError(f"Kandinsky 5: time_dim_replace must be a 5-D video latent, got "
                                        f"{tuple(replace.shape)}")
            out["time_dim_replace"] = model.process_latent_in(replace)
        return out

"""NewBie-Image's network: Lumina 2's NextDiT (comfy_core/families/zimage/nextdit.py) with a pooled
text vector mixed into the modulation, and `NewBieConfig` read from weights.

NewBie-Image Exp0.1 (NewBie-AI 2025; github.com/NewBieAI-Lab/NewBie-image, `NextDiT_CLIP`) is a
2304-wide, 36-layer NextDiT conditioned on Gemma 3 4B's token states; besides the timestep, its
blocks are modulated by Jina CLIP v2's pooled text embedding. Today's ComfyUI runs it as a Lumina 2
NextDiT with `clip_text_dim` set (`comfy/ldm/lumina/model.py`; `model_detection`: a 2304-wide
NextDiT with `clip_text_pooled_proj.0.weight`), written here, with its behaviour:

- `clip_text_pooled_proj` (RMSNorm with eps `norm_eps`, then a linear `clip_text_dim ->
  clip_text_dim`) projects the pooled vector, and `time_text_embed` (SiLU, then a linear
  `adaln_dim + clip_text_dim -> adaln_dim`) maps `[t_emb ; projected]` to the modulation vector
  the blocks and the final layer read;
- without a pooled vector the projection is replaced by zeros (not skipped), so
  `time_text_embed` always runs;
- the release's `clip_img_pooled_embedder.*` tensors (an image-pooled input that ComfyUI's network
  does not have) are left unused.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

import torch
from torch import nn

from comfy_core.families.zimage.nextdit import NextDiT, NextDiTConfig, NextDiTConfigError, RMSNorm
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default

POOLED_PROJ = "clip_text_pooled_proj."
TIME_TEXT = "time_text_embed."
IMAGE_POOLED = "clip_img_pooled_embedder."  # in the release, unused by ComfyUI's network


@dataclass(frozen=True)
class NewBieConfig(NextDiTConfig):
    """A NextDiT with a pooled-text input `clip_text_dim` wide (Jina CLIP v2: 1024)."""

    clip_text_dim: int = 1024

    def comfy_unet_config(self) -> dict[str, Any]:
        config = super().comfy_unet_config()
        config["clip_text_dim"] = self.clip_text_dim
        return config

    @classmethod
    def detect_newbie(cls, tensors: Mapping[str, Any], prefix: str, **family: Any) -> "NewBieConfig":
        """The structure from names and shapes under `prefix`: the NextDiT's (`family` gives what
        weights cannot show, as `NextDiTConfig.detect_from_weights`) plus the pooled-text width."""
        key = prefix + POOLED_PROJ + "0.weight"
        if key not in tensors:
            raise NextDiTConfigError(f"NewBie: no pooled-text projection ({key!r})")
        extra = (prefix + POOLED_PROJ, prefix + TIME_TEXT, prefix + IMAGE_POOLED)
        core = {name: value for name, value in tensors.items() if not name.startswith(extra)}
        config = cls.detect_from_weights(core, prefix, **family)
        clip_text_dim = int(tensors[key].shape[0])
        time_text = prefix + TIME_TEXT + "1.weight"
        if time_text not in tensors:
            raise NextDiTConfigError(f"NewBie key {time_text!r} is missing")
        if tuple(tensors[time_text].shape) != (config.adaln_dim, config.adaln_dim + clip_text_dim):
            raise NextDiTConfigError(f"NewBie: {time_text} has shape {list(tensors[time_text].shape)}, not "
                                     f"[{config.adaln_dim}, {config.adaln_dim + clip_text_dim}]")
        return replace(config, clip_text_dim=clip_text_dim)


@comfyui_name("NextDiT")
class NewBieNextDiT(NextDiT):
    """NextDiT plus the pooled-text modulation (see the module docstring); forward takes
    `clip_text_pooled` `[B, clip_text_dim]` as a keyword (ComfyUI's `model_base.Lumina2` passes
    the conditioning's `pooled_output` under that name)."""

    def __init__(self, config: NewBieConfig, dtype: Any = None, device: Any = None, operations: Any = None,
                 lora_keys: Callable[[NextDiTConfig, list[str]], dict[str, Any]] | None = None) -> None:
        super().__init__(config, dtype=dtype, device=device, operations=operations, lora_keys=lora_keys)
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        width = config.clip_text_dim
        self.clip_text_dim = width
        self.clip_text_pooled_proj = nn.Sequential(RMSNorm(width, config.norm_eps, **factory),
                                                   ops.Linear(width, width, bias=True, **factory))
        self.time_text_embed = nn.Sequential(nn.SiLU(), ops.Linear(config.adaln_dim + width, config.adaln_dim,
                                                                   bias=True, **factory))

    def modulation_input(self, timesteps: torch.Tensor, x: torch.Tensor, kwargs: Mapping[str, Any]) -> torch.Tensor:
        """`time_text_embed([t_emb ; clip_text_pooled_proj(pooled)])`, zeros for a missing pooled vector."""
        t_emb = super().modulation_input(timesteps, x, kwargs)  # [B, adaln_dim]
        pooled = kwargs.get("clip_text_pooled")
        if pooled is not None:
            pooled = self.clip_text_pooled_proj(pooled.to(device=t_emb.device, dtype=t_emb.dtype))
        else:
            pooled = torch.zeros((x.shape[0], self.clip_text_dim), device=x.device, dtype=x.dtype)
        return self.time_text_embed(torch.cat([t_emb, pooled.to(t_emb.dtype)], dim=-1))

"""unCLIP's label-embedding input: CLIP image embeddings with seeded noise augmentation.

After ComfyUI's `comfy/model_base.py: unclip_adm` and `CLIPEmbeddingNoiseAugmentation`
(`comfy/ldm/modules/encoders/noise_aug_modules.py`), which follow Ramesh et al. 2022
("Hierarchical Text-Conditional Image Generation with CLIP Latents", sec. 2: the decoder is
conditioned on a noised image embedding and the embedding of its noise level). Written here:

- The augmentor's schedule is the squared-cosine one of Nichol & Dhariwal 2021 ("Improved
  Denoising Diffusion Probabilistic Models", eq. 17; `squaredcos_cap_v2`: betas from
  `alpha_bar(t) = cos((t + 0.008) / 1.008 * pi / 2)^2` over 1000 steps, capped at 0.999), computed
  in float64 and stored as float32, as there. Its data statistics are the identity (mean 0, std
  1): ComfyUI does not read the checkpoint's `noise_augmentor.*` tensors, so neither do we.
- One embedding `e` [P] at noise level `n = round(999 * noise_augmentation)` becomes
  `[sqrt(ac[n]) * e + sqrt(1 - ac[n]) * z, timestep_embedding(n, P)] * strength` [1, 2P], with
  `z ~ N(0, 1)` drawn from a CPU generator seeded with `seed` (the sampler's seed minus 10) --
  re-seeded for every embedding, so all of them get the same noise.
- Each row of each entry of `unclip_conditioning` is one embedding. With more than one, the
  weighted rows are summed and the image half of the sum is augmented once more at the merge
  level (`unclip_noise_augment_merge`, 0.05 for SD2.1 unCLIP, 0 for SDXL); that second draw has no
  seed of its own in ComfyUI: it continues the global generator the last re-seed left, which on
  the CPU is the same stream continued (reproduced here with one private generator; on another
  device it is that device's generator freshly seeded with `seed`, reproduced likewise). No
  global random state is touched.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Sequence

import torch

from comfy_core.models.unet_blocks import timestep_embedding

MAX_NOISE_LEVEL = 1000  # ImageConcatWithNoiseAugmentation's default
TIMESTEPS = 1000


class UnclipConditioningError(ValueError):
    """An `unclip_conditioning` entry that does not fit the model."""


@lru_cache(maxsize=4)
def _schedule(timesteps: int = TIMESTEPS) -> tuple[torch.Tensor, torch.Tensor]:
    """(sqrt(alphas_cumprod), sqrt(1 - alphas_cumprod)) of the squared-cosine schedule, float32."""
    def alpha_bar(t: float) -> float:
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

    betas = torch.tensor([min(1 - alpha_bar((i + 1) / timesteps) / alpha_bar(i / timesteps), 0.999)
                          for i in range(timesteps)], dtype=torch.float64)
    cumprod = torch.cumprod(1.0 - betas, dim=0)
    return cumprod.sqrt().float(), (1.0 - cumprod).sqrt().float()


def noise_level_for(noise_augmentation: float, max_noise_level: int = MAX_NOISE_LEVEL) -> int:
    """The discrete noise level of an augmentation amount in 0..1 (Python's round, as ComfyUI)."""
    return round((max_noise_level - 1) * noise_augmentation)


def augment(embedding: torch.Tensor, level: int, noise: torch.Tensor) -> torch.Tensor:
    """`embedding` [1, P] noised to `level` with `noise` [1, P], followed by the level's
    sinusoidal embedding -> [1, 2P] (float32)."""
    sqrt_ac, sqrt_one_minus = _schedule()
    x = embedding.float()
    z = sqrt_ac[level].to(x.device) * x + sqrt_one_minus[level].to(x.device) * noise.to(x.device, x.dtype)
    level_emb = timestep_embedding(torch.tensor([level], device=x.device), x.shape[-1])  # [1, P]
    return torch.cat([z, level_emb.to(z.dtype)], dim=1)


def unclip_adm(unclip_conditioning: Sequence[dict[str, Any]], device: torch.device | str,
               noise_augment_merge: float = 0.0, seed: int = 0) -> torch.Tensor:
    """The label-embedding input `[1, 2P]` of a list of `{"clip_vision_output", "strength",
    "noise_augmentation"}` entries (see the module docstring)."""
    device = torch.device(device)
    generator = torch.Generator().manual_seed(seed)
    rows: list[torch.Tensor] = []
    for index, entry in enumerate(unclip_conditioning):
        embeds = getattr(entry.get("clip_vision_output"), "image_embeds", None)
        if not isinstance(embeds, torch.Tensor) or embeds.ndim != 2:
            raise UnclipConditioningError(
                f"unclip_conditioning[{index}]: expected a CLIP vision output with image_embeds [B, P], got "
                f"{type(embeds).__name__ if not isinstance(embeds, torch.Tensor) else tuple(embeds.shape)}")
        level = noise_level_for(entry["noise_augmentation"])
        for embedding in embeds:  # one conditioning input per image, as ComfyUI iterates them
            # float32 as ComfyUI's statistics buffers promote it, whatever the encoder's dtype
            x = embedding.to(device).unsqueeze(0).float()  # [1, P]
            generator.manual_seed(seed)
            noise = torch.randn(x.shape, dtype=x.dtype, generator=generator)
            rows.append(augment(x, level, noise) * entry["strength"])
    if not rows:
        raise UnclipConditioningError("unclip_conditioning is empty")
    if len(rows) == 1:
        return rows[0]
    total = torch.stack(rows).sum(0)  # [1, 2P]
    width = total.shape[1] // 2
    image = total[:, :width]
    if device.type == "cpu":
        noise = torch.randn(image.shape, dtype=image.dtype, generator=generator)
    else:
        noise = torch.randn(image.shape, dtype=image.dtype, device=device,
                            generator=torch.Generator(device).manual_seed(seed))
    return augment(image, noise_level_for(noise_augment_merge), noise)

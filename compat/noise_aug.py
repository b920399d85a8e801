"""ComfyUI's unCLIP noise-augmentation modules and conditioning helpers, for node packs that build
their own model classes (MinusZoneAI/ComfyUI-Kolors-MZ's `KolorsSDXL`: `Timestep(256)`,
`CLIPEmbeddingNoiseAugmentation(noise_schedule_config=..., timestep_dim=1280)`, `sdxl_pooled(kwargs,
self.noise_augmentor)` in its `encode_adm`).

Behaviour of ComfyUI's
- `comfy/ldm/modules/diffusionmodules/openaimodel.py: Timestep` (a module around the sinusoidal
  `timestep_embedding`, ours: comfy_core.models.unet_blocks);
- `comfy/ldm/modules/diffusionmodules/upscaling.py: AbstractLowScaleModel`, `SimpleImageConcat`,
  `ImageConcatWithNoiseAugmentation` (from CompVis latent-diffusion / Stability's SD2 upscaler: the
  forward-diffusion sample `q(x_t | x_0) = sqrt(ac_t) x_0 + sqrt(1 - ac_t) eps`, Ho et al. 2020 eq. 4,
  over a beta schedule of `compat.ldm_util.make_beta_schedule`);
- `comfy/ldm/modules/encoders/noise_aug_modules.py: CLIPEmbeddingNoiseAugmentation` (Ramesh et al.
  2022, unCLIP: the image embedding, normalised by the CLIP statistics, is noised to a level whose
  sinusoidal embedding is returned beside it);
- `comfy/model_base.py: unclip_adm`, `sdxl_pooled`.

The engine's own unCLIP models use comfy_core/models/unclip.py (fixed squared-cosine schedule, a
private generator); these classes are ComfyUI's configurable ones. As ComfyUI's `q_sample`, a given
`seed` seeds torch's global generators (`torch.manual_seed(seed)`), so the merge step of
`unclip_adm` (no seed) continues that stream, as there.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn

from comfy_core.models.unet_blocks import timestep_embedding
from compat.ldm_util import extract_into_tensor

_SCHEDULE_BUFFERS = ("betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod",
                     "sqrt_one_minus_alphas_cumprod", "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod",
                     "sqrt_recipm1_alphas_cumprod")


class Timestep(nn.Module):
    """ComfyUI's `openaimodel.Timestep(dim)`: `t` [B] -> its sinusoidal embedding [B, dim] (cos half first)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return timestep_embedding(t, self.dim)


class AbstractLowScaleModel(nn.Module):
    """ComfyUI's base of the noise augmentors: a DDPM schedule as float32 buffers (`betas`,
    `alphas_cumprod`, `sqrt_alphas_cumprod`, ...; registered when `noise_schedule_config` is given)
    and `q_sample`."""

    def __init__(self, noise_schedule_config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if noise_schedule_config is not None:
            self.register_schedule(**noise_schedule_config)

    def register_schedule(self, beta_schedule: str = "linear", timesteps: int = 1000, linear_start: float = 1e-4,
                          linear_end: float = 2e-2, cosine_s: float = 8e-3) -> None:
        from compat.ldm_util import make_beta_schedule

        betas = torch.as_tensor(make_beta_schedule(beta_schedule, timesteps, linear_start=linear_start,
                                                   linear_end=linear_end, cosine_s=cosine_s), dtype=torch.float64)
        alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)  # float64, as ComfyUI's NumPy cumprod
        alphas_cumprod_prev = torch.cat([torch.ones(1, dtype=torch.float64), alphas_cumprod[:-1]])
        self.num_timesteps = int(betas.shape[0])
        self.linear_start = linear_start
        self.linear_end = linear_end
        tables = {
            "betas": betas,
            "alphas_cumprod": alphas_cumprod,
            "alphas_cumprod_prev": alphas_cumprod_prev,
            "sqrt_alphas_cumprod": alphas_cumprod.sqrt(),
            "sqrt_one_minus_alphas_cumprod": (1.0 - alphas_cumprod).sqrt(),
            "log_one_minus_alphas_cumprod": (1.0 - alphas_cumprod).log(),
            "sqrt_recip_alphas_cumprod": (1.0 / alphas_cumprod).sqrt(),
            "sqrt_recipm1_alphas_cumprod": (1.0 / alphas_cumprod - 1).sqrt(),
        }
        for name in _SCHEDULE_BUFFERS:
            self.register_buffer(name, tables[name].float())

    def q_sample(self, x_start: torch.Tensor, t: torch.Tensor, noise: torch.Tensor | None = None,
                 seed: int | None = None) -> torch.Tensor:
        """`x_start` noised to levels `t` [B]: `sqrt(ac[t]) * x + sqrt(1 - ac[t]) * noise`; the noise,
        when not given, is `randn` from the generator `torch.manual_seed(seed)` (CPU, then moved) or,
        without a seed, `randn_like(x_start)`."""
        if noise is None:
            if seed is None:
                noise = torch.randn_like(x_start)
            else:
                noise = torch.randn(x_start.size(), dtype=x_start.dtype, layout=x_start.layout,
                                    generator=torch.manual_seed(seed)).to(x_start.device)
        device = x_start.device
        return (extract_into_tensor(self.sqrt_alphas_cumprod.to(device), t, x_start.shape) * x_start
                + extract_into_tensor(self.sqrt_one_minus_alphas_cumprod.to(device), t, x_start.shape) * noise)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return x, None

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return x


class SimpleImageConcat(AbstractLowScaleModel):
    """No augmentation: `x` and a zero noise level per batch item."""

    def __init__(self) -> None:
        super().__init__(noise_schedule_config=None)
        self.max_noise_level = 0

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, torch.zeros(x.shape[0], device=x.device).long()


def _noise_level(x: torch.Tensor, noise_level: Any, max_noise_level: int) -> torch.Tensor:
    if noise_level is None:
        return torch.randint(0, max_noise_level, (x.shape[0],), device=x.device).long()
    if not isinstance(noise_level, torch.Tensor):
        raise TypeError(f"noise_level must be a tensor of levels (or None for random ones), got "
                        f"{type(noise_level).__name__}")
    return noise_level


class ImageConcatWithNoiseAugmentation(AbstractLowScaleModel):
    """`forward(x, noise_level=None, seed=None)` -> `(q_sample(x, level), level)`; a random level
    in [0, max_noise_level) per item when none is given."""

    def __init__(self, noise_schedule_config: Mapping[str, Any] | None, max_noise_level: int = 1000,
                 to_cuda: bool = False) -> None:
        super().__init__(noise_schedule_config=noise_schedule_config)
        self.max_noise_level = max_noise_level

    def forward(self, x: torch.Tensor, noise_level: torch.Tensor | None = None,
                seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        noise_level = _noise_level(x, noise_level, self.max_noise_level)
        return self.q_sample(x, noise_level, seed=seed), noise_level


class CLIPEmbeddingNoiseAugmentation(ImageConcatWithNoiseAugmentation):
    """unCLIP's augmentor: `forward(x, noise_level, seed)` -> `(z, level_embedding)` where `z` is
    `x` normalised by the CLIP statistics (`data_mean`, `data_std`: 0 and 1 unless
    `clip_stats_path` names a saved `(mean, std)` pair), noised by `q_sample`, and un-normalised;
    `level_embedding` is `Timestep(timestep_dim)` of the levels."""

    def __init__(self, *args: Any, clip_stats_path: str | None = None, timestep_dim: int = 256, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if clip_stats_path is None:
            clip_mean, clip_std = torch.zeros(timestep_dim), torch.ones(timestep_dim)
        else:
            clip_mean, clip_std = torch.load(clip_stats_path, map_location="cpu", weights_only=True)
        self.register_buffer("data_mean", clip_mean[None, :], persistent=False)  # [1, P]
        self.register_buffer("data_std", clip_std[None, :], persistent=False)
        self.time_embed = Timestep(timestep_dim)

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.data_mean.to(x.device)) * 1.0 / self.data_std.to(x.device)

    def unscale(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.data_std.to(x.device) + self.data_mean.to(x.device)

    def forward(self, x: torch.Tensor, noise_level: torch.Tensor | None = None,
                seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        noise_level = _noise_level(x, noise_level, self.max_noise_level)
        z = self.unscale(self.q_sample(self.scale(x), noise_level, seed=seed))
        return z, self.time_embed(noise_level)


def unclip_adm(unclip_conditioning: Sequence[Mapping[str, Any]], device: Any, noise_augmentor: Any,
               noise_augment_merge: float = 0.0, seed: int | None = None) -> torch.Tensor:
    """ComfyUI's `model_base.unclip_adm`: each image embedding of each entry
    (`clip_vision_output.image_embeds` rows) is augmented at level
    `round((max_noise_level - 1) * noise_augmentation)` and `cat(z, level_emb) * strength` [1, 2P];
    with more than one, their sum's image half is augmented again at `noise_augment_merge` (no seed)."""
    adm_inputs = []
    for entry in unclip_conditioning:
        for adm_cond in entry["clip_vision_output"].image_embeds:
            level = round((noise_augmentor.max_noise_level - 1) * entry["noise_augmentation"])
            c_adm, level_emb = noise_augmentor(adm_cond.to(device), noise_level=torch.tensor([level], device=device),
                                               seed=seed)
            adm_inputs.append(torch.cat((c_adm, level_emb), 1) * entry["strength"])
    if not adm_inputs:
        raise ValueError("unclip_adm: unclip_conditioning holds no image embedding")
    adm_out = adm_inputs[-1]
    if len(adm_inputs) > 1:
        adm_out = torch.stack(adm_inputs).sum(0)
        level = round((noise_augmentor.max_noise_level - 1) * noise_augment_merge)
        c_adm, level_emb = noise_augmentor(adm_out[:, :noise_augmentor.time_embed.dim],
                                           noise_level=torch.tensor([level], device=device))
        adm_out = torch.cat((c_adm, level_emb), 1)
    return adm_out


def sdxl_pooled(args: Mapping[str, Any], noise_augmentor: Any) -> torch.Tensor:
    """ComfyUI's `model_base.sdxl_pooled` (SDXL's `encode_adm`): the first 1280 columns of
    `unclip_adm(...)` (seed `args["seed"] - 10`) when `args` holds `unclip_conditioning`,
    otherwise `args["pooled_output"]`."""
    if "unclip_conditioning" in args:
        return unclip_adm(args.get("unclip_conditioning"), args["device"], noise_augmentor,
                          seed=args.get("seed", 0) - 10)[:, :1280]
    return args["pooled_output"]

"""`DiffusionModel`: the UNet wrapped as a k-diffusion-style denoiser, what MODEL's patcher holds.

Behaviour follows ComfyUI's `comfy/model_base.py: BaseModel.apply_model` (the denoiser wrapper of
Karras et al. 2022, "Elucidating the Design Space of Diffusion-Based Generative Models", via
k-diffusion's `external.py`): scale the noisy input with `model_sampling.calculate_input`, map
sigma to the discrete timestep the network was trained on, run the UNet in its weight dtype, and
turn its eps/v output back into a denoised estimate with `model_sampling.calculate_denoised`.

SDXL's extra conditioning ("ADM", Podell et al. 2023, sec. 2.2) is built by `encode_adm`: the
pooled text embedding followed by 256-wide sinusoidal embeddings of the original size, crop
offsets and target size (base) or aesthetic score (refiner), as ComfyUI's `SDXL.encode_adm` /
`SDXLRefiner.encode_adm` do, with the same defaults.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from comfy_core.models.latent_formats import LatentFormat
from comfy_core.models.unet import UNetModel
from comfy_core.models.unet_blocks import timestep_embedding

ADM_NONE = "none"
ADM_SDXL = "sdxl"
ADM_SDXL_REFINER = "sdxl_refiner"


class ConditioningError(ValueError):
    """Conditioning that does not fit the model (missing pooled output, wrong widths)."""


def size_embedding(values: list[float], dim: int = 256) -> torch.Tensor:
    """Concatenated sinusoidal embeddings of scalar conditions, `[len(values) * dim]`."""
    return timestep_embedding(torch.tensor(values, dtype=torch.float32), dim).flatten()


class DiffusionModel(nn.Module):
    """`.diffusion_model` (the UNet), `.model_sampling`, `.family`, `.latent_format`, `.adm`."""

    def __init__(self, unet: UNetModel, model_sampling: Any, latent_format: LatentFormat,
                 family: Any = None, adm: str = ADM_NONE) -> None:
        super().__init__()
        if adm not in (ADM_NONE, ADM_SDXL, ADM_SDXL_REFINER):
            raise ValueError(f"DiffusionModel: unknown ADM kind {adm!r}")
        self.diffusion_model = unet
        self.model_sampling = model_sampling
        self.latent_format = latent_format
        self.family = family
        self.adm = adm

    # --- ComfyUI's BaseModel surface, for samplers and node packs ---

    def get_dtype(self) -> torch.dtype:
        return self.diffusion_model.out[2].weight.dtype

    @property
    def adm_channels(self) -> int:
        return self.diffusion_model.config.adm_in_channels or 0

    def process_latent_in(self, latent: torch.Tensor) -> torch.Tensor:
        return self.latent_format.process_in(latent)

    def process_latent_out(self, latent: torch.Tensor) -> torch.Tensor:
        return self.latent_format.process_out(latent)

    def apply_model(self, x: torch.Tensor, sigma: torch.Tensor, c_crossattn: torch.Tensor | None = None,
                    y: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None,
                    *, c_concat: torch.Tensor | None = None, control: Any = None, **kwargs: Any) -> torch.Tensor:
        """x [B, C, h, w] noisy latent (model space), sigma [B], c_crossattn [B, M, ctx], y [B, adm]
        -> denoised [B, C, h, w] float32. `control`: ControlNet residuals for the UNet (the dict
        a ControlNet's `get_control` returns)."""
        if c_crossattn is None:
            raise ConditioningError("DiffusionModel.apply_model: c_crossattn (the text conditioning) is required")
        ctx_dim = self.diffusion_model.config.context_dim
        if c_crossattn.shape[-1] != ctx_dim:
            raise ConditioningError(
                f"DiffusionModel.apply_model: conditioning is {c_crossattn.shape[-1]} wide, this "
                f"{getattr(self.family, 'name', 'model')} UNet expects {ctx_dim} (wrong CLIP for this model?)")
        dtype = self.get_dtype()
        xc = self.model_sampling.calculate_input(sigma, x)  # [B, C, h, w]
        if c_concat is not None:
            xc = torch.cat([xc, c_concat], dim=1)
        t = self.model_sampling.timestep(sigma).float()  # [B] integer-valued
        out = self.diffusion_model(
            xc.to(dtype), t, c_crossattn.to(dtype), None if y is None else y.to(dtype),
            transformer_options=transformer_options, control=control).float()
        return self.model_sampling.calculate_denoised(sigma, out, x)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.apply_model(*args, **kwargs)

    def encode_adm(self, **kwargs: Any) -> torch.Tensor | None:
        """The UNet's `y` input from conditioning options (None for models without one).

        SDXL base: `pooled_output [B, P]` then embeddings of height, width, crop_h, crop_w,
        target_height, target_width (defaults 768, 768, 0, 0, height, width, as ComfyUI).
        SDXL refiner: height, width, crop_h, crop_w, aesthetic_score (default 6, or 2.5 when
        `prompt_type == "negative"`).
        """
        if self.adm == ADM_NONE:
            return None
        pooled = kwargs.get("pooled_output")
        if pooled is None:
            raise ConditioningError(
                f"{getattr(self.family, 'name', 'SDXL')}: conditioning has no 'pooled_output' "
                "(use a CLIP from an SDXL checkpoint)")
        width = kwargs.get("width", 768)
        height = kwargs.get("height", 768)
        crop_w = kwargs.get("crop_w", 0)
        crop_h = kwargs.get("crop_h", 0)
        if self.adm == ADM_SDXL:
            values = [height, width, crop_h, crop_w, kwargs.get("target_height", height), kwargs.get("target_width", width)]
        else:
            default_score = 2.5 if kwargs.get("prompt_type", "") == "negative" else 6.0
            values = [height, width, crop_h, crop_w, kwargs.get("aesthetic_score", default_score)]
        flat = size_embedding([float(v) for v in values]).to(pooled.device, pooled.dtype)  # [n*256]
        y = torch.cat([pooled, flat.unsqueeze(0).repeat(pooled.shape[0], 1)], dim=1)  # [B, P + n*256]
        if y.shape[1] != self.adm_channels:
            raise ConditioningError(
                f"{getattr(self.family, 'name', 'SDXL')}: pooled output is {pooled.shape[1]} wide, the UNet's "
                f"label embedding needs {self.adm_channels - len(values) * 256} (wrong CLIP for this model?)")
        return y

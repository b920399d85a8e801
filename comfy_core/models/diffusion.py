"""`DiffusionModel`: the UNet wrapped as a k-diffusion-style denoiser, what MODEL's patcher holds.

Behaviour follows ComfyUI's `comfy/model_base.py: BaseModel.apply_model` (the denoiser wrapper of
Karras et al. 2022, "Elucidating the Design Space of Diffusion-Based Generative Models", via
k-diffusion's `external.py`): scale the noisy input with `model_sampling.calculate_input`, map
sigma to the discrete timestep the network was trained on, run the UNet in its weight dtype, and
turn its eps/v output back into a denoised estimate with `model_sampling.calculate_denoised`.

SDXL's extra conditioning ("ADM", Podell et al. 2023, sec. 2.2) is built by `encode_adm`: the
pooled text embedding followed by 256-wide sinusoidal embeddings of the original size, crop
offsets and target size (base) or aesthetic score (refiner), as ComfyUI's `SDXL.encode_adm` /
`SDXLRefiner.encode_adm` do, with the same defaults. SD2.1 unCLIP's ADM is the noise-augmented
CLIP image embedding of its `unclip_conditioning` (zeros without one), and an SDXL
`unclip_conditioning` replaces the pooled text by the image half of that embedding, as ComfyUI's
`SD21UNCLIP.encode_adm` / `sdxl_pooled` (comfy_core/models/unclip.py).

Inpainting and instruct-pix2pix UNets take extra input channels (`c_concat`), built by
`concat_cond` from the conditioning and the run's latent and denoise mask as ComfyUI's
`concat_cond` (comfy_core/models/concat_inputs.py); the family says which (`Family.concat`).
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from comfy_core.models.family_classes import class_for
from comfy_core.models.latent_formats import LatentFormat
from comfy_core.patching import wrappers
from comfy_core.models.unet import UNetModel
from comfy_core.models.unet_blocks import timestep_embedding

ADM_NONE = "none"
ADM_SDXL = "sdxl"
ADM_SDXL_REFINER = "sdxl_refiner"
ADM_UNCLIP = "unclip"
# ComfyUI's seed offset for the unCLIP noise augmentation (`kwargs.get("seed", 0) - 10`).
UNCLIP_SEED_OFFSET = 10
UNCLIP_MERGE_DEFAULT = 0.05  # SD21UNCLIP's `unclip_noise_augment_merge` default (SDXL: 0)


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
        if adm not in (ADM_NONE, ADM_SDXL, ADM_SDXL_REFINER, ADM_UNCLIP):
            raise ValueError(f"DiffusionModel: unknown ADM kind {adm!r}")
        self.diffusion_model = unet
        self.model_sampling = model_sampling
        self.latent_format = latent_format
        self.family = family
        self.adm = adm
        # ComfyUI's `BaseModel.manual_cast_dtype`: the dtype the UNet computes in when its weights
        # are stored in another one (fp8 storage, comfy_core/models/storage_cast.py); None: the
        # weights' own dtype.
        self.manual_cast_dtype: torch.dtype | None = None
        # A host may have models be instances of its own subclass per family (ComfyUI's
        # comfy.model_base classes, see family_classes); the subclass adds no state.
        registered = class_for(getattr(family, "name", None))
        if registered is not None and type(self) is DiffusionModel:
            if not issubclass(registered, DiffusionModel):
                raise TypeError(f"family class for {family.name!r}: {registered!r} is not a DiffusionModel subclass")
            self.__class__ = registered

    # --- ComfyUI's BaseModel surface, for samplers and node packs ---

    @property
    def model_type(self) -> Any:
        """ComfyUI's `ModelType` of the loaded parametrisation (EPS, V_PREDICTION, ...)."""
        from comfy_core.sampling.model_sampling import model_type_of

        return model_type_of(self.model_sampling)

    @property
    def model_config(self) -> Any:
        """ComfyUI's config object for this family (comfy_core/models/model_config.py)."""
        from comfy_core.models.model_config import config_for

        return config_for(self)

    @property
    def memory_usage_factor(self) -> float:
        return self.__dict__.get("_memory_usage_factor") or self.model_config.memory_usage_factor

    @memory_usage_factor.setter
    def memory_usage_factor(self, value: float) -> None:
        self.__dict__["_memory_usage_factor"] = value

    def memory_required(self, input_shape: Any, cond_shapes: Any = None) -> float:
        """Bytes a forward pass on `input_shape` is estimated to need: ComfyUI's attention-backend
        estimate, `batch * spatial area * dtype size * 0.01 * memory_usage_factor` MiB."""
        dtype = self.manual_cast_dtype or self.get_dtype()
        area = input_shape[0] * math.prod(input_shape[2:])
        return area * torch.empty((), dtype=dtype).element_size() * 0.01 * self.memory_usage_factor * (1024 * 1024)

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
        a ControlNet's `get_control` returns).

        Runs through the APPLY_MODEL wrappers of `transformer_options` (comfy_core/patching/
        wrappers.py), which get ComfyUI's arguments `(x, t, c_concat, c_crossattn, control,
        transformer_options, **kwargs)` with `y` among the kwargs, and `executor.class_obj` = self."""
        to = transformer_options if transformer_options is not None else {}
        if y is not None:
            kwargs["y"] = y
        return wrappers.run_wrapped(wrappers.WrappersMP.APPLY_MODEL, to, self._apply_model, x, sigma, c_concat,
                                    c_crossattn, control, to, class_obj=self, is_model_options=False, **kwargs)

    def _apply_model(self, x: torch.Tensor, sigma: torch.Tensor, c_concat: torch.Tensor | None = None,
                     c_crossattn: torch.Tensor | None = None, control: Any = None,
                     transformer_options: dict[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """The unwrapped model call, in ComfyUI's argument order (see `apply_model`)."""
        y = kwargs.get("y")
        if c_crossattn is None:
            raise ConditioningError("DiffusionModel.apply_model: c_crossattn (the text conditioning) is required")
        ctx_dim = self.diffusion_model.config.context_dim
        if c_crossattn.shape[-1] != ctx_dim:
            raise ConditioningError(
                f"DiffusionModel.apply_model: conditioning is {c_crossattn.shape[-1]} wide, this "
                f"{getattr(self.family, 'name', 'model')} UNet expects {ctx_dim} (wrong CLIP for this model?)")
        dtype = self.manual_cast_dtype or self.get_dtype()
        xc = self.model_sampling.calculate_input(sigma, x)  # [B, C, h, w]
        if c_concat is not None:
            xc = torch.cat([xc, c_concat], dim=1)
        t = self.model_sampling.timestep(sigma).float()  # [B] integer-valued
        to = transformer_options if transformer_options is not None else {}
        # DIFFUSION_MODEL wrappers get ComfyUI's UNet arguments (x, timesteps, context, y, control,
        # transformer_options) and `executor.class_obj` = the UNet.
        out = wrappers.run_wrapped(
            wrappers.WrappersMP.DIFFUSION_MODEL, to, self._run_unet, xc.to(dtype), t, c_crossattn.to(dtype),
            None if y is None else y.to(dtype), control, transformer_options, class_obj=self.diffusion_model,
            is_model_options=False).float()
        return self.model_sampling.calculate_denoised(sigma, out, x)

    def _run_unet(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor, y: torch.Tensor | None,
                  control: Any, transformer_options: dict[str, Any] | None, **kwargs: Any) -> torch.Tensor:
        return self.diffusion_model(x, timesteps, context, y, transformer_options=transformer_options,
                                    control=control, **kwargs)

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
        if self.adm == ADM_UNCLIP:
            return self._unclip_adm(kwargs)
        pooled = kwargs.get("pooled_output")
        if "unclip_conditioning" in kwargs:  # SDXL "revision": the image embedding as pooled output
            pooled = self._unclip_embedding(kwargs, 0.0)[:, :self.adm_channels - (6 if self.adm == ADM_SDXL else 5) * 256]
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

    # --- unCLIP and concatenated inputs (ComfyUI's SD21UNCLIP.encode_adm, concat_cond) ---

    def _unclip_embedding(self, kwargs: dict[str, Any], merge_default: float) -> torch.Tensor:
        from comfy_core.models.unclip import UnclipConditioningError, unclip_adm

        seed = kwargs.get("seed")
        device = kwargs.get("device") or self._device()
        try:
            return unclip_adm(kwargs["unclip_conditioning"], device,
                              kwargs.get("unclip_noise_augment_merge", merge_default),
                              (0 if seed is None else int(seed)) - UNCLIP_SEED_OFFSET)
        except UnclipConditioningError as exc:
            raise ConditioningError(f"{getattr(self.family, 'name', 'model')}: {exc}") from None

    def _unclip_adm(self, kwargs: dict[str, Any]) -> torch.Tensor:
        """SD2.1 unCLIP: `[1, adm]`, zeros when the entry has no `unclip_conditioning`."""
        if kwargs.get("unclip_conditioning") is None:
            return torch.zeros((1, self.adm_channels), device=kwargs.get("device") or self._device())
        y = self._unclip_embedding(kwargs, UNCLIP_MERGE_DEFAULT)
        if y.shape[1] != self.adm_channels:
            raise ConditioningError(
                f"{getattr(self.family, 'name', 'unCLIP')}: the CLIP vision embedding is {y.shape[1] // 2} wide, "
                f"this model needs {self.adm_channels // 2} (wrong CLIP vision model for this checkpoint?)")
        return y

    def _device(self) -> torch.device:
        return self.diffusion_model.out[2].weight.device

    def concat_cond(self, **kwargs: Any) -> torch.Tensor | None:
        """The UNet's extra input channels `[B, k, h, w]` for this family (None for plain models).

        Reads `noise`, `device`, `latent_image`, `denoise_mask`, `concat_latent_image`,
        `concat_mask` (the conditioning entry's options and the run's tensors, as ComfyUI's
        `extra_conds` receives them)."""
        from comfy_core.models import concat_inputs

        kind = getattr(self.family, "concat", "none")
        if kind == "none":
            return None
        noise = kwargs["noise"]
        device = kwargs.get("device") or noise.device
        if kind == "ip2p":
            out = concat_inputs.ip2p_concat(noise, device, kwargs.get("concat_latent_image"))
        else:
            out = concat_inputs.inpaint_concat(
                noise, device, latent_image=kwargs.get("latent_image"), denoise_mask=kwargs.get("denoise_mask"),
                concat_latent_image=kwargs.get("concat_latent_image"), concat_mask=kwargs.get("concat_mask"),
                process_latent_in=self.process_latent_in)
        expected = self.diffusion_model.config.in_channels - noise.shape[1]
        if out.shape[1] != expected:
            raise ConditioningError(
                f"{getattr(self.family, 'name', 'model')}: the concatenated inputs have {out.shape[1]} channels, "
                f"the UNet takes {expected} besides the latent")
        return out

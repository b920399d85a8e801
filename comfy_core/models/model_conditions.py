"""What a family's network receives besides the noisy latent and the text context.

One `ModelConditions` object per family (`Family.conditioning`), read by `DiffusionModel`: the
label embedding `y` (`encode_adm`, ComfyUI's `BaseModel.encode_adm`) and further model inputs
(`extra_conds`, the rest of ComfyUI's `BaseModel.extra_conds`), both from a conditioning entry's
options plus the run's tensors (`noise`, `device`, `width`, `height`, `prompt_type`, `seed`, ...).

- SDXL base (Podell et al. 2023, sec. 2.2): the pooled text embedding followed by 256-wide
  sinusoidal embeddings of the original size, crop offsets and target size; the refiner: size,
  crop offsets and aesthetic score (ComfyUI's `SDXL.encode_adm` / `SDXLRefiner.encode_adm`, same
  defaults). An `unclip_conditioning` replaces the pooled text by the image half of the embedding.
- SD2.1 unCLIP: the noise-augmented CLIP image embedding (zeros without one), `SD21UNCLIP.encode_adm`.
- SD3 (Esser et al. 2024): `y` is the pooled text embedding (CLIP-L + CLIP-G), ComfyUI's `SD3`.
- Flux: `y` is CLIP-L's pooled output; `guidance` (default 3.5, the distilled-guidance input of
  Flux dev, ignored by schnell) and Kontext's `ref_latents` (reference latents in model space)
  with their `ref_latents_method`, as ComfyUI's `model_base.Flux.extra_conds`.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.models.unet_blocks import timestep_embedding

# ComfyUI's seed offset for the unCLIP noise augmentation (`kwargs.get("seed", 0) - 10`).
UNCLIP_SEED_OFFSET = 10
UNCLIP_MERGE_DEFAULT = 0.05  # SD21UNCLIP's `unclip_noise_augment_merge` default (SDXL: 0)
FLUX_DEFAULT_GUIDANCE = 3.5


class ConditioningError(ValueError):
    """Conditioning that does not fit the model (missing pooled output, wrong widths)."""


def size_embedding(values: list[float], dim: int = 256) -> torch.Tensor:
    """Concatenated sinusoidal embeddings of scalar conditions, `[len(values) * dim]`."""
    return timestep_embedding(torch.tensor(values, dtype=torch.float32), dim).flatten()


def _family_name(model: Any, default: str) -> str:
    return getattr(getattr(model, "family", None), "name", default)


def unclip_embedding(model: Any, kwargs: dict[str, Any], merge_default: float) -> torch.Tensor:
    """The noise-augmented image embedding of an entry's `unclip_conditioning` `[1, 2 * width]`."""
    from comfy_core.models.unclip import UnclipConditioningError, unclip_adm

    seed = kwargs.get("seed")
    device = kwargs.get("device") or model._device()
    try:
        return unclip_adm(kwargs["unclip_conditioning"], device, kwargs.get("unclip_noise_augment_merge", merge_default),
                          (0 if seed is None else int(seed)) - UNCLIP_SEED_OFFSET)
    except UnclipConditioningError as exc:
        raise ConditioningError(f"{_family_name(model, 'model')}: {exc}") from None


class ModelConditions:
    """No label embedding, no further inputs (SD1.x, SD2.x)."""

    name = "none"

    def encode_adm(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        return None

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        return {}

    def concat_cond(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        """Extra input channels the network takes besides the latent (families whose
        `Family.concat` is "none"); None: none."""
        return None

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class SdxlConditions(ModelConditions):
    """SDXL base: pooled text + height, width, crop_h, crop_w, target_height, target_width."""

    name = "sdxl"

    def size_values(self, kwargs: dict[str, Any], width: Any, height: Any) -> list[Any]:
        return [height, width, kwargs.get("crop_h", 0), kwargs.get("crop_w", 0),
                kwargs.get("target_height", height), kwargs.get("target_width", width)]

    def encode_adm(self, model: Any, **kwargs: Any) -> torch.Tensor:
        pooled = kwargs.get("pooled_output")
        width, height = kwargs.get("width", 768), kwargs.get("height", 768)
        values = self.size_values(kwargs, width, height)
        if "unclip_conditioning" in kwargs:  # SDXL "revision": the image embedding as pooled output
            pooled = unclip_embedding(model, kwargs, 0.0)[:, :model.adm_channels - len(values) * 256]
        if pooled is None:
            raise ConditioningError(f"{_family_name(model, 'SDXL')}: conditioning has no 'pooled_output' "
                                    "(use a CLIP from an SDXL checkpoint)")
        flat = size_embedding([float(v) for v in values]).to(pooled.device, pooled.dtype)  # [n*256]
        y = torch.cat([pooled, flat.unsqueeze(0).repeat(pooled.shape[0], 1)], dim=1)  # [B, P + n*256]
        if y.shape[1] != model.adm_channels:
            raise ConditioningError(
                f"{_family_name(model, 'SDXL')}: pooled output is {pooled.shape[1]} wide, the UNet's label "
                f"embedding needs {model.adm_channels - len(values) * 256} (wrong CLIP for this model?)")
        return y


class SdxlRefinerConditions(SdxlConditions):
    """SDXL refiner: pooled text + height, width, crop_h, crop_w, aesthetic score (6, or 2.5 for
    negative prompts)."""

    name = "sdxl_refiner"

    def size_values(self, kwargs: dict[str, Any], width: Any, height: Any) -> list[Any]:
        default_score = 2.5 if kwargs.get("prompt_type", "") == "negative" else 6.0
        return [height, width, kwargs.get("crop_h", 0), kwargs.get("crop_w", 0),
                kwargs.get("aesthetic_score", default_score)]


class UnclipConditions(ModelConditions):
    """SD2.1 unCLIP: `[1, adm]`, zeros when the entry has no `unclip_conditioning`."""

    name = "unclip"

    def encode_adm(self, model: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("unclip_conditioning") is None:
            return torch.zeros((1, model.adm_channels), device=kwargs.get("device") or model._device())
        y = unclip_embedding(model, kwargs, UNCLIP_MERGE_DEFAULT)
        if y.shape[1] != model.adm_channels:
            raise ConditioningError(
                f"{_family_name(model, 'unCLIP')}: the CLIP vision embedding is {y.shape[1] // 2} wide, this "
                f"model needs {model.adm_channels // 2} (wrong CLIP vision model for this checkpoint?)")
        return y


class PooledConditions(ModelConditions):
    """SD3: `y` is the conditioning's pooled text embedding (ComfyUI's `SD3.encode_adm`)."""

    name = "pooled"

    def encode_adm(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        pooled = kwargs.get("pooled_output")
        if pooled is None:
            return None
        width = model.adm_channels
        if width and pooled.shape[-1] != width:
            raise ConditioningError(f"{_family_name(model, 'model')}: pooled output is {pooled.shape[-1]} wide, the "
                                    f"model's vector input takes {width} (wrong text encoders for this model?)")
        return pooled


class FluxConditions(PooledConditions):
    """Flux: pooled CLIP-L as `y`, `guidance`, Kontext's reference latents, and the image / mask
    channels of Flux Fill, Canny and Depth (`concat_cond`)."""

    name = "flux"

    def concat_cond(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        from comfy_core.models.concat_inputs import flux_concat

        network = model.diffusion_model
        noise = kwargs["noise"]
        patch = network.patch_size
        in_channels = network.img_in.weight.shape[1] // (patch * patch)
        return flux_concat(noise, kwargs.get("device") or noise.device, in_channels, network.config.out_channels,
                           concat_latent_image=kwargs.get("concat_latent_image"),
                           concat_mask=kwargs.get("concat_mask"), denoise_mask=kwargs.get("denoise_mask"),
                           process_latent_in=model.process_latent_in)

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        guidance = kwargs.get("guidance", FLUX_DEFAULT_GUIDANCE)
        if guidance is not None:
            out["guidance"] = torch.tensor([float(guidance)], dtype=torch.float32)  # [1]
        references = kwargs.get("reference_latents")
        if references is not None:
            out["ref_latents"] = [model.process_latent_in(latent) for latent in references]
            method = kwargs.get("reference_latents_method")
            if method is not None:
                out["ref_latents_method"] = method
        return out


class ReferenceLatentConditions(ModelConditions):
    """The edit DiTs' further inputs (ComfyUI's `model_base.QwenImage.extra_conds` shape, which its
    Krea 2, Mage-Flow, JoyImage and Fibo 2.0 classes keep): the conditioning's `reference_latents`
    in the model's latent space as `ref_latents` (one entry per reference), their
    `reference_latents_method` as `ref_latents_method` where the family reads one (`pass_method`),
    and the text's token mask as `attention_mask` where it does (`pass_mask`)."""

    name = "reference_latents"
    pass_method = True
    pass_mask = False

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        references = kwargs.get("reference_latents")
        if references is not None:
            out["ref_latents"] = [model.process_latent_in(latent) for latent in references]
            method = kwargs.get("reference_latents_method")
            if self.pass_method and method is not None:
                out["ref_latents_method"] = method
        mask = kwargs.get("attention_mask")
        if self.pass_mask and mask is not None:
            out["attention_mask"] = mask
        return out

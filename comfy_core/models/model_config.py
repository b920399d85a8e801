"""ComfyUI's model configs (comfy/supported_models_base.py `BASE`): what `model.model.model_config`
is, so packs read `unet_config`, `latent_format`, `sampling_settings`, `memory_usage_factor` and
`isinstance(config, comfy.supported_models.SDXL)` holds exactly when ComfyUI's would. Each family
names its class of ComfyUI's `comfy/supported_models.py` (`Family.supported_model`, defined in its
package's `supported_models.py` with ComfyUI's name and hierarchy); the values are read from our
loaded model (`config_for(model)`), not a table of ComfyUI's.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.models import latent_formats


class BASE:
    """A model config: class-level defaults, copied per instance (ComfyUI's `BASE`)."""

    unet_config: dict[str, Any] = {}
    unet_extra_config: dict[str, Any] = {"num_heads": -1, "num_head_channels": 64}
    required_keys: dict[str, Any] = {}
    clip_prefix: list[str] = []
    clip_vision_prefix: str | None = None
    noise_aug_config: dict[str, Any] | None = None
    sampling_settings: dict[str, Any] = {}
    latent_format: Any = latent_formats.LatentFormat
    vae_key_prefix = ["first_stage_model."]
    text_encoder_key_prefix = ["cond_stage_model."]
    supported_inference_dtypes = [torch.float16, torch.bfloat16, torch.float32]
    memory_usage_factor = 2.0
    manual_cast_dtype: torch.dtype | None = None
    custom_operations: Any = None
    scaled_fp8: Any = None
    optimizations: dict[str, Any] = {"fp8": False}

    def __init__(self, unet_config: dict[str, Any]) -> None:
        self.unet_config = dict(unet_config)
        self.sampling_settings = dict(self.sampling_settings)
        self.latent_format = self.latent_format() if isinstance(self.latent_format, type) else self.latent_format
        self.optimizations = dict(self.optimizations)
        for key, value in self.unet_extra_config.items():
            self.unet_config.setdefault(key, value)

    @classmethod
    def matches(cls, unet_config: dict[str, Any], state_dict: Any = None) -> bool:
        """True when every key of the class's `unet_config` has that value in `unet_config`."""
        if any(unet_config.get(k, object()) != v for k, v in cls.unet_config.items()):
            return False
        return state_dict is None or all(k in state_dict for k in cls.required_keys)

    def inpaint_model(self) -> bool:
        return self.unet_config.get("in_channels", 4) > 4

    def set_inference_dtype(self, dtype: torch.dtype, manual_cast_dtype: torch.dtype | None) -> None:
        self.unet_config["dtype"] = dtype
        self.manual_cast_dtype = manual_cast_dtype

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.unet_config})"


class ModelConfigError(LookupError):
    """A model whose family names no ComfyUI config class (`Family.supported_model`)."""


def unet_config_dict(config: Any) -> dict[str, Any]:
    """Our `UNetConfig` in ComfyUI's `unet_config` keys (comfy/model_detection.py's names)."""
    return {
        "context_dim": config.context_dim, "model_channels": config.model_channels,
        "use_linear_in_transformer": config.use_linear_in_transformer, "adm_in_channels": config.adm_in_channels,
        "in_channels": config.in_channels, "out_channels": config.out_channels,
        "num_res_blocks": [config.num_res_blocks] * len(config.channel_mult),
        "channel_mult": list(config.channel_mult), "transformer_depth": list(config.transformer_depth),
        "transformer_depth_output": list(config.transformer_depth_output),
        "transformer_depth_middle": config.transformer_depth_middle,
        "num_heads": config.num_heads, "num_head_channels": config.num_head_channels,
        "use_temporal_attention": False, "image_size": 32,
    }


def comfy_unet_config(config: Any, family: Any = None) -> dict[str, Any]:
    """A diffusion model's config in ComfyUI's `unet_config` keys: what the family's architecture
    says (`Architecture.comfy_config`: an MMDiT's `MMDiTConfig.comfy_unet_config()`, what ComfyUI's
    `detect_unet_config` makes of the same weights; Flux's `image_model: "flux"` and the
    `Flux(**unet_config)` arguments), else the config's own `comfy_unet_config()` (DiT configs
    have one), else a UNet's (`unet_config_dict`)."""
    convert = getattr(getattr(family, "architecture", None), "comfy_config", None)
    if convert is not None:
        return convert(config)
    own = getattr(config, "comfy_unet_config", None)
    return own() if own is not None else unet_config_dict(config)


def config_for(model: Any) -> BASE:
    """The ComfyUI config of a loaded `DiffusionModel`, from its family and UNet."""
    family = getattr(model, "family", None)
    cls = getattr(family, "supported_model", None)
    if cls is None:
        raise ModelConfigError(f"model_config: family {getattr(family, 'name', None)!r} names no ComfyUI model "
                               "config class (Family.supported_model)")
    config = cls(comfy_unet_config(model.diffusion_model.config, getattr(model, "family", None)))
    config.latent_format = model.latent_format
    config.manual_cast_dtype = model.manual_cast_dtype
    sampling = model.model_sampling
    if hasattr(sampling, "linear_start"):
        config.sampling_settings.update(linear_start=sampling.linear_start, linear_end=sampling.linear_end,
                                        timesteps=sampling.num_timesteps, zsnr=bool(getattr(sampling, "zsnr", False)))
    elif hasattr(sampling, "shift"):  # flow sampling (SD3's discrete flow, Flux's): what it runs with
        config.sampling_settings["shift"] = sampling.shift
        if hasattr(sampling, "multiplier"):
            config.sampling_settings["multiplier"] = sampling.multiplier
    return config

"""ComfyUI's model configs (comfy/supported_models_base.py `BASE`, comfy/supported_models.py) for
our families: what `model.model.model_config` is, so packs read `unet_config`, `latent_format`,
`sampling_settings`, `memory_usage_factor` and `isinstance(config, comfy.supported_models.SDXL)`
holds exactly when ComfyUI's would. The classes carry ComfyUI's names and hierarchy; the values
are read from our loaded model (`config_for(model)`), not a table of ComfyUI's.
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


class SD15(BASE):
    unet_config = {"context_dim": 768, "model_channels": 320, "use_linear_in_transformer": False,
                   "adm_in_channels": None, "use_temporal_attention": False}
    unet_extra_config = {"num_heads": 8, "num_head_channels": -1}
    latent_format = latent_formats.SD15
    memory_usage_factor = 1.0


class SD20(BASE):
    unet_config = {"context_dim": 1024, "model_channels": 320, "use_linear_in_transformer": True,
                   "adm_in_channels": None, "use_temporal_attention": False}
    unet_extra_config = {"num_heads": -1, "num_head_channels": 64, "attn_precision": torch.float32}
    latent_format = latent_formats.SD15
    memory_usage_factor = 1.0


class SD21UnclipH(SD20):
    unet_config = {"context_dim": 1024, "model_channels": 320, "use_linear_in_transformer": True,
                   "adm_in_channels": 2048, "use_temporal_attention": False}
    clip_vision_prefix = "embedder.model.visual."
    noise_aug_config = {"noise_schedule_config": {"timesteps": 1000, "beta_schedule": "squaredcos_cap_v2"},
                        "timestep_dim": 1024}


class SDXLRefiner(BASE):
    unet_config = {"model_channels": 384, "use_linear_in_transformer": True, "context_dim": 1280,
                   "adm_in_channels": 2560, "transformer_depth": [0, 0, 4, 4, 4, 4, 0, 0],
                   "use_temporal_attention": False}
    latent_format = latent_formats.SDXL
    memory_usage_factor = 1.0


class SDXL(BASE):
    unet_config = {"model_channels": 320, "use_linear_in_transformer": True,
                   "transformer_depth": [0, 0, 2, 2, 10, 10], "context_dim": 2048, "adm_in_channels": 2816,
                   "use_temporal_attention": False}
    latent_format = latent_formats.SDXL
    memory_usage_factor = 0.8


class SD15_instructpix2pix(SD15):
    unet_config = {**SD15.unet_config, "in_channels": 8}


class SDXL_instructpix2pix(SDXL):
    unet_config = {**SDXL.unet_config, "in_channels": 8}


class SVD_img2vid(BASE):
    unet_config = {"model_channels": 320, "in_channels": 8, "use_linear_in_transformer": True,
                   "transformer_depth": [1, 1, 1, 1, 1, 1, 0, 0], "context_dim": 1024, "adm_in_channels": 768,
                   "use_temporal_attention": True, "use_temporal_resblock": True}
    unet_extra_config = {"num_heads": -1, "num_head_channels": 64, "attn_precision": torch.float32}
    clip_vision_prefix = "conditioner.embedders.0.open_clip.model.visual."
    latent_format = latent_formats.SD15
    sampling_settings = {"sigma_max": 700.0, "sigma_min": 0.002}


class SD3(BASE):
    """SD3 / SD3.5 (MMDiT): ComfyUI matches any 16-channel MMDiT config (`pos_embed_scaling_factor`
    is a key only MMDiT configs have)."""

    unet_config = {"in_channels": 16, "pos_embed_scaling_factor": None}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": 3.0}
    latent_format = latent_formats.SD3
    memory_usage_factor = 1.2
    text_encoder_key_prefix = ["text_encoders."]


class Flux(BASE):
    """Flux.1 dev / Kontext (guidance-distilled)."""

    unet_config = {"image_model": "flux", "guidance_embed": True}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings: dict[str, Any] = {}
    latent_format = latent_formats.Flux
    memory_usage_factor = 3.1
    supported_inference_dtypes = [torch.bfloat16, torch.float16, torch.float32]
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]


class FluxInpaint(Flux):
    """Flux.1 Fill (96 input channels: latent, masked image, packed mask)."""

    unet_config = {"image_model": "flux", "guidance_embed": True, "in_channels": 96}
    supported_inference_dtypes = [torch.bfloat16, torch.float32]


class FluxSchnell(Flux):
    """Flux.1 schnell (no guidance embedding; plain rectified-flow sampling, shift 1)."""

    unet_config = {"image_model": "flux", "guidance_embed": False}
    sampling_settings = {"multiplier": 1.0, "shift": 1.0}


class Chroma(BASE):
    """Chroma (Flux-derived, T5-XXL only): model type FLUX, only the multiplier set (shift: 1.15)."""

    unet_config = {"image_model": "chroma"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"multiplier": 1.0}
    latent_format = latent_formats.Flux
    memory_usage_factor = 3.2
    supported_inference_dtypes = [torch.bfloat16, torch.float16, torch.float32]


class WAN21_T2V(BASE):
    """Wan 2.1 text-to-video (and the Wan 2.2 A14B experts): shift 8, memory factor dim / 2222."""

    unet_config = {"image_model": "wan2.1", "model_type": "t2v"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": 8.0}
    # ComfyUI's Wan21 / Wan22 format classes once comfy_core.models.latent_formats has them
    # (the Wan VAE's area); a loaded model's config always carries the model's own format.
    latent_format = getattr(latent_formats, "Wan21", None)
    memory_usage_factor = 0.9
    vae_key_prefix = ["vae."]
    text_encoder_key_prefix = ["text_encoders."]

    def __init__(self, unet_config: dict[str, Any]) -> None:
        super().__init__(unet_config)
        self.memory_usage_factor = self.unet_config.get("dim", 2000) / 2222  # ComfyUI's rule


class WAN21_I2V(WAN21_T2V):
    unet_config = {"image_model": "wan2.1", "model_type": "i2v", "in_dim": 36}


class WAN21_FunControl2V(WAN21_T2V):
    unet_config = {"image_model": "wan2.1", "model_type": "i2v", "in_dim": 48}


class WAN21_Camera(WAN21_T2V):
    unet_config = {"image_model": "wan2.1", "model_type": "camera", "in_dim": 32}


class WAN22_Camera(WAN21_T2V):
    unet_config = {"image_model": "wan2.1", "model_type": "camera_2.2", "in_dim": 36}


class WAN21_Vace(WAN21_T2V):
    unet_config = {"image_model": "wan2.1", "model_type": "vace"}

    def __init__(self, unet_config: dict[str, Any]) -> None:
        super().__init__(unet_config)
        self.memory_usage_factor = 1.2 * self.memory_usage_factor


class WAN22_T2V(WAN21_T2V):
    """Wan 2.2 TI2V-5B (48 output channels)."""

    unet_config = {"image_model": "wan2.1", "model_type": "t2v", "out_dim": 48}
    latent_format = getattr(latent_formats, "Wan22", None)


# Our family name -> ComfyUI's config class for it (inpainting UNets are their base's config in
# ComfyUI too: `inpaint_model()` tells them apart).
CONFIG_BY_FAMILY: dict[str, type[BASE]] = {
    "sd1": SD15, "sd1_inpaint": SD15, "sd1_ip2p": SD15_instructpix2pix,
    "sd2": SD20, "sd2_inpaint": SD20, "sd21_unclip": SD21UnclipH,
    "sdxl": SDXL, "sdxl_inpaint": SDXL, "sdxl_ip2p": SDXL_instructpix2pix, "sdxl_refiner": SDXLRefiner,
    "svd": SVD_img2vid,
    "sd3": SD3, "flux": Flux, "flux_schnell": FluxSchnell, "chroma": Chroma,
    "wan21_t2v": WAN21_T2V, "wan21_i2v": WAN21_I2V, "wan21_fun_control": WAN21_FunControl2V,
    "wan21_vace": WAN21_Vace, "wan21_camera": WAN21_Camera, "wan22_camera": WAN22_Camera,
    "wan22_ti2v": WAN22_T2V, "wan22_i2v": WAN21_T2V,  # ComfyUI's WAN21_T2V takes the A14B i2v experts
}


class ModelConfigError(LookupError):
    """A model whose family has no ComfyUI config class here."""


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
    name = getattr(getattr(model, "family", None), "name", None)
    if name not in CONFIG_BY_FAMILY:
        raise ModelConfigError(f"model_config: family {name!r} has no ComfyUI model config class "
                               f"(known: {sorted(CONFIG_BY_FAMILY)})")
    cls = CONFIG_BY_FAMILY[name]
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

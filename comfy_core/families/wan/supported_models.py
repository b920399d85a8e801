"""ComfyUI's `comfy.supported_models` config classes of Wan 2.1 / 2.2 (its `supported_models.py`): what
`model.model.model_config` is for this family, so packs read `unet_config`, `latent_format`,
`sampling_settings`, `memory_usage_factor` and `isinstance(config, comfy.supported_models.X)` holds
exactly when ComfyUI's would. The family names its class (`Family.supported_model`); the values are
read from the loaded model (`comfy_core.models.model_config.config_for`)."""
from __future__ import annotations

from typing import Any

from comfy_core.families.wan.latent_format import Wan21, Wan22
from comfy_core.models.model_config import BASE


class WAN21_T2V(BASE):
    """Wan 2.1 text-to-video (and the Wan 2.2 A14B experts): shift 8, memory factor dim / 2222."""

    unet_config = {"image_model": "wan2.1", "model_type": "t2v"}
    unet_extra_config: dict[str, Any] = {}
    sampling_settings = {"shift": 8.0}
    # ComfyUI's Wan21 / Wan22 format classes; a loaded model's config carries the model's own format.
    latent_format = Wan21
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
    latent_format = Wan22


class WAN22_S2V(WAN21_T2V):
    """Wan 2.2 S2V (speech-to-video, 14B)."""

    unet_config = {"image_model": "wan2.1", "model_type": "s2v"}


class WAN21_HuMo(WAN21_T2V):
    """Wan HuMo (1.7B and 17B): text, reference image and audio to video."""

    unet_config = {"image_model": "wan2.1", "model_type": "humo"}


class WAN_Animate2(WAN21_T2V):
    """Wan-Animate-2 (i2v-shaped weights, `model_type` "animate2" from the file's metadata): shift 5."""

    unet_config = {"image_model": "wan2.1", "model_type": "animate2"}
    sampling_settings = {"shift": 5.0}


class WAN21_SCAIL(WAN21_T2V):
    """SCAIL-Preview (Wan 2.1 14B i2v weights with a pose patch embedding): shift 8."""

    unet_config = {"image_model": "wan2.1", "model_type": "scail"}


class WAN21_SCAIL2(WAN21_T2V):
    """SCAIL-2 (SCAIL plus the 28-channel identity-mask patch embedding): shift 8."""

    unet_config = {"image_model": "wan2.1", "model_type": "scail2"}


class WAN22_Animate(WAN21_T2V):
    """Wan 2.2 Animate (i2v weights with the pose embedding, face encoder and face adapter): shift 8."""

    unet_config = {"image_model": "wan2.1", "model_type": "animate"}

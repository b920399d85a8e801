"""ComfyUI's latent formats of model families this engine does not implement, for packs that list
them (ComfyUI-bleh's preview tables import `Mochi` and `Cosmos1CV8x8x8` at start-up;
comfyui_jankhidiffusion checks models against `SDXL_Playground_2_5`). They are data (channels,
scaling, the linear preview factors ComfyUI calibrated), so they are the same here; no file of
these families is ever loaded here, so no model has one of them."""
from __future__ import annotations

from dataclasses import dataclass

from comfy_core.models.latent_formats import LatentFormat, NormalizedLatentFormat

_MOCHI_MEAN = (-0.06730895953510081, -0.038011381506090416, -0.07477820912866141, -0.05565264470995561,
               0.012767231469026969, -0.04703542746246419, 0.043896967884726704, -0.09346305707025976,
               -0.09918314763016893, -0.008729793427399178, -0.011931556316503654, -0.0321993391887285)
_MOCHI_STD = (0.9263795028493863, 0.9248894543193766, 0.9393059390890617, 0.959253732819592,
              0.8244560132752793, 0.917259975397747, 0.9294154431013696, 1.3720942357788521,
              0.881393668867029, 0.9168315692124348, 0.9185249279345552, 0.9274757570805041)
_MOCHI_RGB = ((-0.0069, -0.0045, 0.0018), (0.0154, -0.0692, -0.0274), (0.0333, 0.0019, 0.0206),
              (-0.1390, 0.0628, 0.1678), (-0.0725, 0.0134, -0.1898), (0.0074, -0.0270, -0.0209),
              (-0.0176, -0.0277, -0.0221), (0.5294, 0.5204, 0.3852), (-0.0326, -0.0446, -0.0143),
              (-0.0659, 0.0153, -0.0153), (0.0185, -0.0217, 0.0014), (-0.0396, -0.0495, -0.0281))
_COSMOS1_RGB = ((0.1817, 0.2284, 0.2423), (-0.0586, -0.0862, -0.3108), (-0.4703, -0.4255, -0.3995),
                (0.0803, 0.1963, 0.1001), (-0.0820, -0.1050, 0.0400), (0.2511, 0.3098, 0.2787),
                (-0.1830, -0.2117, -0.0040), (-0.0621, -0.2187, -0.0939), (0.3619, 0.1082, 0.1455),
                (0.3164, 0.3922, 0.2575), (0.1152, 0.0231, -0.0462), (-0.1434, -0.3609, -0.3665),
                (0.0635, 0.1471, 0.1680), (-0.3635, -0.1963, -0.3248), (-0.1865, 0.0365, 0.2346),
                (0.0447, 0.0994, 0.0881))
_PLAYGROUND_RGB = ((0.3920, 0.4054, 0.4549), (-0.2634, -0.0196, 0.0653), (0.0568, 0.1687, -0.0755),
                   (-0.3112, -0.2359, -0.2076))


@dataclass(frozen=True)
class Mochi(NormalizedLatentFormat):
    """Genmo Mochi 1: 12-channel video latents normalised per channel."""

    name: str = "Mochi"
    channels: int = 12
    scale_factor: float = 1.0
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _MOCHI_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (-0.0940, -0.1418, -0.1453)
    mean: tuple[float, ...] = _MOCHI_MEAN
    std: tuple[float, ...] = _MOCHI_STD

    @property
    def latent_dimensions(self) -> int:
        return 3


@dataclass(frozen=True)
class Cosmos1CV8x8x8(LatentFormat):
    """NVIDIA Cosmos 1's 8x8x8 continuous video tokenizer: 16 channels, unscaled."""

    name: str = "Cosmos1CV8x8x8"
    channels: int = 16
    scale_factor: float = 1.0
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _COSMOS1_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (-0.1223, -0.1889, -0.1976)

    @property
    def latent_dimensions(self) -> int:
        return 3


@dataclass(frozen=True)
class SDXL_Playground_2_5(NormalizedLatentFormat):  # noqa: N801 -- ComfyUI's class name
    """Playground v2.5 (an SDXL-architecture model with its own latent statistics)."""

    name: str = "SDXL_Playground_2_5"
    channels: int = 4
    scale_factor: float = 0.5
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _PLAYGROUND_RGB
    mean: tuple[float, ...] = (-1.6574, 1.886, -1.383, 2.5155)
    std: tuple[float, ...] = (8.4927, 5.9022, 6.5498, 5.2299)
    taesd_decoder_name: str | None = "taesdxl_decoder"

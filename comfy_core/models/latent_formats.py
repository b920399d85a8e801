"""Latent formats: how a family's first-stage latents are scaled for the diffusion model and
previewed.

The scale factors make the VAE latents roughly unit-variance for the diffusion model (Rombach
et al. 2022, sec. 4.3.2 / appendix: 0.18215 for the SD1/SD2 autoencoder, 0.13025 for SDXL's,
Podell et al. 2023). The 16-channel SD3 and Flux.1 autoencoders also shift them first (Esser et
al. 2024, sec. 5.2.1; `scaling_factor` / `shift_factor` in diffusers' SD3 and Flux VAE configs):
`(z - shift) * scale`. LATENT values on the wire are unscaled, as in ComfyUI; samplers call
`process_in` before and `process_out` after. The RGB factors are the linear latent-to-RGB
approximations ComfyUI's previews use (`comfy/latent_formats.py`), so previews look the same.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LatentFormat:
    name: str
    channels: int
    scale_factor: float
    shift_factor: float = 0.0
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = ()  # [channels][3]
    latent_rgb_factors_bias: tuple[float, float, float] | None = None
    taesd_decoder_name: str | None = None

    # ComfyUI's attribute names (comfy/latent_formats.py), which node packs read.
    @property
    def latent_channels(self) -> int:
        return self.channels

    @property
    def latent_dimensions(self) -> int:
        return 2

    def process_in(self, latent: torch.Tensor) -> torch.Tensor:
        """Raw first-stage latent -> the diffusion model's space."""
        return (latent - self.shift_factor) * self.scale_factor

    def process_out(self, latent: torch.Tensor) -> torch.Tensor:
        """The diffusion model's space -> raw first-stage latent."""
        return latent / self.scale_factor + self.shift_factor

    def latent_to_rgb(self, latent: torch.Tensor) -> torch.Tensor:
        """Cheap preview: latent [B, C, h, w] (raw or model space) -> RGB [B, h, w, 3] in 0..1."""
        factors = torch.tensor(self.latent_rgb_factors, dtype=torch.float32, device=latent.device)  # [C, 3]
        rgb = torch.einsum("bchw,cr->bhwr", latent.float(), factors)
        if self.latent_rgb_factors_bias is not None:
            rgb = rgb + torch.tensor(self.latent_rgb_factors_bias, device=latent.device)
        return ((rgb + 1.0) / 2.0).clamp(0.0, 1.0)


_SD15_RGB = ((0.3512, 0.2297, 0.3227), (0.3250, 0.4974, 0.2350),
             (-0.2829, 0.1762, 0.2721), (-0.2120, -0.2616, -0.7177))
_SDXL_RGB = ((0.3651, 0.4232, 0.4341), (-0.2533, -0.0042, 0.1068),
             (0.1076, 0.1111, -0.0362), (-0.3165, -0.2492, -0.2188))


# One class per format, constructible without arguments as ComfyUI's are (`comfy.latent_formats.
# SD15()`), so a pack's instance and the family's are equal and pass the same isinstance checks.
@dataclass(frozen=True)
class SD15(LatentFormat):
    """SD1.x / SD2.x: 4 channels, scale 0.18215."""

    name: str = "SD15"
    channels: int = 4
    scale_factor: float = 0.18215
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _SD15_RGB
    taesd_decoder_name: str | None = "taesd_decoder"


@dataclass(frozen=True)
class SDXL(LatentFormat):
    """SDXL (base and refiner): 4 channels, scale 0.13025."""

    name: str = "SDXL"
    channels: int = 4
    scale_factor: float = 0.13025
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _SDXL_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (0.1084, -0.0175, -0.0011)
    taesd_decoder_name: str | None = "taesdxl_decoder"


_SD3_RGB = (
    (-0.0922, -0.0175, 0.0749), (0.0311, 0.0633, 0.0954), (0.1994, 0.0927, 0.0458), (0.0856, 0.0339, 0.0902),
    (0.0587, 0.0272, -0.0496), (-0.0006, 0.1104, 0.0309), (0.0978, 0.0306, 0.0427), (-0.0042, 0.1038, 0.1358),
    (-0.0194, 0.0020, 0.0669), (-0.0488, 0.0130, -0.0268), (0.0922, 0.0988, 0.0951), (-0.0278, 0.0524, -0.0542),
    (0.0332, 0.0456, 0.0895), (-0.0069, -0.0030, -0.0810), (-0.0596, -0.0465, -0.0293), (-0.1448, -0.1463, -0.1189),
)
_FLUX_RGB = (
    (-0.0346, 0.0244, 0.0681), (0.0034, 0.0210, 0.0687), (0.0275, -0.0668, -0.0433), (-0.0174, 0.0160, 0.0617),
    (0.0859, 0.0721, 0.0329), (0.0004, 0.0383, 0.0115), (0.0405, 0.0861, 0.0915), (-0.0236, -0.0185, -0.0259),
    (-0.0245, 0.0250, 0.1180), (0.1008, 0.0755, -0.0421), (-0.0515, 0.0201, 0.0011), (0.0428, -0.0012, -0.0036),
    (0.0817, 0.0765, 0.0749), (-0.1264, -0.0522, -0.1103), (-0.0280, -0.0881, -0.0499), (-0.1262, -0.0982, -0.0778),
)


@dataclass(frozen=True)
class SD3(LatentFormat):
    """SD3 / SD3.5: 16 channels, shift 0.0609 then scale 1.5305 (TAESD previews: `taesd3_decoder`)."""

    name: str = "SD3"
    channels: int = 16
    scale_factor: float = 1.5305
    shift_factor: float = 0.0609
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _SD3_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (0.2394, 0.2135, 0.1925)
    taesd_decoder_name: str | None = "taesd3_decoder"


# A subclass of SD3, as ComfyUI's `Flux(SD3)`, so a pack's `isinstance(fmt, SD3)` answers alike.
@dataclass(frozen=True)
class Flux(SD3):
    """Flux.1 (dev, schnell, Kontext): 16 channels, shift 0.1159 then scale 0.3611 (TAESD
    previews: `taef1_decoder`)."""

    name: str = "Flux"
    channels: int = 16
    scale_factor: float = 0.3611
    shift_factor: float = 0.1159
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _FLUX_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (-0.0329, -0.0718, -0.0851)
    taesd_decoder_name: str | None = "taef1_decoder"


def sd15_latent_format() -> LatentFormat:
    """SD1.x / SD2.x: 4 channels, scale 0.18215."""
    return SD15()


def sdxl_latent_format() -> LatentFormat:
    """SDXL (base and refiner): 4 channels, scale 0.13025."""
    return SDXL()


def sd3_latent_format() -> LatentFormat:
    """SD3 / SD3.5: 16 channels, shift 0.0609, scale 1.5305."""
    return SD3()


def flux_latent_format() -> LatentFormat:
    """Flux.1: 16 channels, shift 0.1159, scale 0.3611."""
    return Flux()

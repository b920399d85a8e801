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


# --- Wan 2.1 / 2.2 video latents [B, C, T, h, w] (comfy/latent_formats.py: Wan21, Wan22) ---
# Per-channel statistics of the Wan VAEs' latents (as in the Wan releases and diffusers'
# AutoencoderKLWan configs) and ComfyUI's linear preview factors.

_WAN21_MEAN = (-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
               0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921)
_WAN21_STD = (2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
              3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160)
_WAN21_RGB = (
    (-0.1299, -0.1692, 0.2932), (0.0671, 0.0406, 0.0442), (0.3568, 0.2548, 0.1747), (0.0372, 0.2344, 0.1420),
    (0.0313, 0.0189, -0.0328), (0.0296, -0.0956, -0.0665), (-0.3477, -0.4059, -0.2925), (0.0166, 0.1902, 0.1975),
    (-0.0412, 0.0267, -0.1364), (-0.1293, 0.0740, 0.1636), (0.0680, 0.3019, 0.1128), (0.0032, 0.0581, 0.0639),
    (-0.1251, 0.0927, 0.1699), (0.0060, -0.0633, 0.0005), (0.3477, 0.2275, 0.2950), (0.1984, 0.0913, 0.1861),
)
_WAN22_MEAN = (-0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
               -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
               -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
               -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
               -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
               0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667)
_WAN22_STD = (0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
              0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
              0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
              0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
              0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
              0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744)
_WAN22_RGB = (
    (0.0119, 0.0103, 0.0046), (-0.1062, -0.0504, 0.0165), (0.0140, 0.0409, 0.0491), (-0.0813, -0.0677, 0.0607),
    (0.0656, 0.0851, 0.0808), (0.0264, 0.0463, 0.0912), (0.0295, 0.0326, 0.0590), (-0.0244, -0.0270, 0.0025),
    (0.0443, -0.0102, 0.0288), (-0.0465, -0.0090, -0.0205), (0.0359, 0.0236, 0.0082), (-0.0776, 0.0854, 0.1048),
    (0.0564, 0.0264, 0.0561), (0.0006, 0.0594, 0.0418), (-0.0319, -0.0542, -0.0637), (-0.0268, 0.0024, 0.0260),
    (0.0539, 0.0265, 0.0358), (-0.0359, -0.0312, -0.0287), (-0.0285, -0.1032, -0.1237), (0.1041, 0.0537, 0.0622),
    (-0.0086, -0.0374, -0.0051), (0.0390, 0.0670, 0.2863), (0.0069, 0.0144, 0.0082), (0.0006, -0.0167, 0.0079),
    (0.0313, -0.0574, -0.0232), (-0.1454, -0.0902, -0.0481), (0.0714, 0.0827, 0.0447), (-0.0304, -0.0574, -0.0196),
    (0.0401, 0.0384, 0.0204), (-0.0758, -0.0297, -0.0014), (0.0568, 0.1307, 0.1372), (-0.0055, -0.0310, -0.0380),
    (0.0239, -0.0305, 0.0325), (-0.0663, -0.0673, -0.0140), (-0.0416, -0.0047, -0.0023), (0.0166, 0.0112, -0.0093),
    (-0.0211, 0.0011, 0.0331), (0.1833, 0.1466, 0.2250), (-0.0368, 0.0370, 0.0295), (-0.3441, -0.3543, -0.2008),
    (-0.0479, -0.0489, -0.0420), (-0.0660, -0.0153, 0.0800), (-0.0101, 0.0068, 0.0156), (-0.0690, -0.0452, -0.0927),
    (-0.0145, 0.0041, 0.0015), (0.0421, 0.0451, 0.0373), (0.0504, -0.0483, -0.0356), (-0.0837, 0.0168, 0.0055),
)


@dataclass(frozen=True)
class Wan21(LatentFormat):
    """Wan 2.1 (and Wan 2.2 A14B, which uses the 2.1 VAE): 16 channels, normalised per channel,
    `(z - mean) * scale / std`, on video latents [B, C, T, h, w] (image latents [B, C, h, w] too)."""

    name: str = "Wan21"
    channels: int = 16
    scale_factor: float = 1.0
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _WAN21_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (-0.1835, -0.0868, -0.3360)
    mean: tuple[float, ...] = _WAN21_MEAN
    std: tuple[float, ...] = _WAN21_STD

    @property
    def latent_dimensions(self) -> int:
        return 3

    # ComfyUI's tensors [1, C, 1, 1, 1], which node packs read.
    @property
    def latents_mean(self) -> torch.Tensor:
        return torch.tensor(self.mean).view(1, self.channels, 1, 1, 1)

    @property
    def latents_std(self) -> torch.Tensor:
        return torch.tensor(self.std).view(1, self.channels, 1, 1, 1)

    def _stats(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std shaped to broadcast over `latent`'s channel axis (4-D or 5-D)."""
        if latent.ndim < 2 or latent.shape[1] != self.channels:
            raise ValueError(f"{self.name} latent format: expected [B, {self.channels}, ...], "
                             f"got {tuple(latent.shape)}")
        shape = (1, self.channels) + (1,) * (latent.ndim - 2)
        mean = torch.tensor(self.mean, device=latent.device, dtype=latent.dtype).view(shape)
        std = torch.tensor(self.std, device=latent.device, dtype=latent.dtype).view(shape)
        return mean, std

    def process_in(self, latent: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(latent)
        return (latent - mean) * self.scale_factor / std

    def process_out(self, latent: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(latent)
        return latent * std / self.scale_factor + mean

    def latent_to_rgb(self, latent: torch.Tensor) -> torch.Tensor:
        """Cheap preview of every frame: [B, C, T, h, w] -> RGB [B, T, h, w, 3] in 0..1 (a 4-D
        latent gives [B, h, w, 3], as the image formats)."""
        if latent.ndim == 4:
            return super().latent_to_rgb(latent)
        b, c, t, h, w = latent.shape
        frames = super().latent_to_rgb(latent.transpose(1, 2).reshape(b * t, c, h, w))  # [B*T, h, w, 3]
        return frames.reshape(b, t, h, w, 3)


# A subclass of Wan21, as ComfyUI's `Wan22(Wan21)`, so a pack's `isinstance(fmt, Wan21)` answers alike.
@dataclass(frozen=True)
class Wan22(Wan21):
    """Wan 2.2 TI2V-5B (its own VAE, `wan2.2_vae.safetensors`): 48 channels, normalised per channel."""

    name: str = "Wan22"
    channels: int = 48
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _WAN22_RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (0.0317, -0.0878, -0.1388)
    mean: tuple[float, ...] = _WAN22_MEAN
    std: tuple[float, ...] = _WAN22_STD


def wan21_latent_format() -> LatentFormat:
    """Wan 2.1 (and 2.2 A14B): 16 channels, per-channel mean/std, video latents."""
    return Wan21()


def wan22_latent_format() -> LatentFormat:
    """Wan 2.2 TI2V-5B: 48 channels, per-channel mean/std, video latents."""
    return Wan22()

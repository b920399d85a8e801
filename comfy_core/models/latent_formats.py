"""Latent formats: how a family's first-stage latents are scaled for the diffusion model and
previewed.

The scale factors make the VAE latents roughly unit-variance for the diffusion model (Rombach
et al. 2022, sec. 4.3.2 / appendix: 0.18215 for the SD1/SD2 autoencoder, 0.13025 for SDXL's,
Podell et al. 2023). The 16-channel SD3 and Flux.1 autoencoders also shift them first (Esser et
al. 2024, sec. 5.2.1; `scaling_factor` / `shift_factor` in diffusers' SD3 and Flux VAE configs):
`(z - shift) * scale`. LATENT values on the wire are unscaled, as in ComfyUI; samplers call
`process_in` before and `process_out` after. The RGB factors are the linear latent-to-RGB
approximations ComfyUI's previews use (`comfy/latent_formats.py`), so previews look the same.

Here: `LatentFormat` and the SD1.x / SD2.x format (`SD15`), which several families share; a
format only one family uses lives in its package (`families/sdxl/latent_format.py`,
`families/sd3/...`, `families/flux/...` (Chroma's too), `families/wan/...`).
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

    @property
    def spacial_downscale_ratio(self) -> int:
        """Pixels per latent cell along height and width (ComfyUI's attribute, spelled as there):
        what an empty latent made at another ratio is resized by before sampling."""
        return 8

    @property
    def temporal_downscale_ratio(self) -> int:
        """Pixel frames (audio samples) per latent frame, as `spacial_downscale_ratio`."""
        return 1

    def fix_empty_latent(self, latent: torch.Tensor) -> object:
        """An all-zero latent already widened and resized to this format -> what the model samples
        (ComfyUI's hook: the latent itself; a joint audio-video format builds its nested latent)."""
        return latent

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


@dataclass(frozen=True)
class NormalizedLatentFormat(LatentFormat):
    """A format normalised per channel: `(z - mean) * scale / std` into the model's space and back
    (ComfyUI's formats with `latents_mean` / `latents_std`: Wan, Mochi, Playground 2.5)."""

    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()

    # ComfyUI's tensors, `[1, C, 1, 1]` (`[1, C, 1, 1, 1]` for video formats), which node packs read.
    @property
    def latents_mean(self) -> torch.Tensor:
        return torch.tensor(self.mean).view(1, self.channels, *(1,) * self.latent_dimensions)

    @property
    def latents_std(self) -> torch.Tensor:
        return torch.tensor(self.std).view(1, self.channels, *(1,) * self.latent_dimensions)

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


_SD15_RGB = ((0.3512, 0.2297, 0.3227), (0.3250, 0.4974, 0.2350),
             (-0.2829, 0.1762, 0.2721), (-0.2120, -0.2616, -0.7177))


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


def sd15_latent_format() -> LatentFormat:
    """SD1.x / SD2.x: 4 channels, scale 0.18215."""
    return SD15()

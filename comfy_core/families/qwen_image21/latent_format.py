"""Qwen-Image 2.1's latent format (ComfyUI's `comfy/latent_formats.py: QwenImage21`): image latents
[B, 64, h, w] at 1/16 of the pixels from the Qwen-Image 2.1 VAE, normalised per channel
`(z - mean) / std` (the statistics of diffusers' `AutoencoderKLQwenImage21` config, which ComfyUI
uses too; no extra scale), and ComfyUI's 64 x 3 linear preview factors."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.latent_formats import LatentFormat

_MEAN = (
    0.5126, 0.7721, -0.0631, 1.3506, -0.7855, -2.1025, -0.3458, 1.3722,
    1.8873, -1.7177, -0.6510, 0.2732, 0.7562, -0.6163, -1.0277, 3.8363,
    2.0210, 0.0472, 0.9320, 2.0087, 2.4954, -0.1391, -1.4249, 1.8464,
    -0.5236, 1.2826, 3.7046, -1.3035, 2.7286, -1.4518, -1.9036, -1.9955,
    -0.0342, -1.0265, -0.7636, 3.0555, 0.0746, -3.0751, -0.1076, 1.7376,
    -1.0914, -1.9435, -0.2784, -1.3680, 0.4809, -0.4433, 0.3764, 0.5729,
    -2.0595, 1.0960, -1.3260, -2.0211, -5.0179, 0.5275, 4.0162, 1.8505,
    0.3026, 1.9373, 1.4937, 0.2632, 0.5547, -1.7121, -0.1562, 0.0304,
)

_STD = (
    3.2001, 3.2936, 3.4321, 3.0091, 3.1061, 4.0379, 4.0705, 3.7910,
    3.0785, 3.6500, 3.9308, 3.0904, 2.8778, 3.7675, 3.7320, 5.0756,
    3.2864, 4.0397, 3.1317, 4.0443, 2.9249, 3.9454, 3.0988, 4.2489,
    3.4896, 3.8513, 3.9323, 3.4719, 3.7498, 4.2830, 3.5694, 4.2467,
    3.9037, 3.2947, 5.0770, 3.5075, 3.2700, 3.4767, 2.8063, 5.1125,
    3.5327, 4.7833, 3.1286, 4.1819, 3.8527, 3.8312, 3.5605, 4.3875,
    3.9624, 4.0168, 3.5643, 4.0550, 5.5614, 4.2963, 4.4080, 3.4959,
    3.8747, 3.7608, 3.5735, 3.1490, 3.7662, 3.6746, 3.4563, 3.8161,
)

_RGB = (
    (-0.0158, -0.0115, -0.0174), (0.0030, 0.0120, 0.0027), (0.0637, 0.0470, -0.0127), (0.0360, 0.0661, -0.0030),
    (0.0159, 0.0181, 0.0082), (0.0132, 0.0326, 0.0169), (0.0191, 0.0261, 0.0136), (-0.0146, -0.0276, -0.0361),
    (0.0187, -0.0024, -0.0072), (-0.1059, -0.0090, 0.0350), (-0.0195, -0.0226, -0.0138), (-0.0295, 0.0024, -0.0215),
    (0.0191, -0.0393, -0.0001), (-0.0144, -0.0166, -0.0272), (0.0389, 0.0430, 0.0445), (-0.0153, -0.0336, 0.0031),
    (0.0339, 0.0122, 0.0220), (-0.0136, -0.0078, -0.0120), (-0.0340, -0.0282, -0.0245), (-0.0133, -0.0176, -0.0133),
    (0.0109, -0.0087, 0.0096), (-0.0010, 0.0044, 0.0016), (0.0301, 0.0053, 0.0361), (-0.0281, -0.0205, -0.0032),
    (-0.0725, 0.0002, 0.0160), (-0.0036, 0.0158, 0.0807), (0.0087, 0.0040, -0.0053), (-0.0260, 0.0183, -0.0077),
    (-0.0039, -0.0035, -0.0107), (-0.0026, 0.0172, 0.0237), (0.0088, 0.0078, 0.0078), (-0.0087, -0.0310, -0.0122),
    (-0.0027, 0.0018, 0.0094), (-0.0064, 0.0292, -0.0256), (0.0594, 0.1049, 0.1180), (0.0103, -0.0103, -0.0026),
    (-0.0091, 0.0025, -0.0015), (0.0178, 0.0243, 0.0292), (-0.0063, -0.0012, 0.0202), (0.0452, 0.0246, 0.0143),
    (0.0149, 0.0270, 0.0052), (0.1484, 0.0801, 0.0804), (-0.0120, 0.0040, 0.0010), (0.0181, 0.0051, -0.0021),
    (0.0132, 0.0050, 0.0019), (0.0291, 0.0020, 0.0092), (0.0066, -0.0410, -0.1314), (-0.1153, -0.0629, -0.0802),
    (0.0258, 0.0378, 0.0298), (0.0375, 0.1139, 0.0468), (-0.0142, -0.0126, -0.0276), (0.0339, 0.0153, 0.0138),
    (0.0346, 0.0211, 0.0267), (0.0369, -0.0431, -0.0993), (-0.0052, -0.0092, 0.0056), (-0.0279, 0.0410, -0.0357),
    (0.0036, 0.0017, -0.0083), (-0.0441, -0.0367, -0.0454), (-0.0001, -0.0092, -0.0001), (-0.0222, -0.0183, -0.0051),
    (0.0039, 0.0053, -0.0184), (-0.0094, -0.0075, -0.0143), (-0.0066, -0.0088, -0.0063), (0.0220, 0.0074, 0.0100),
)


@comfyui_name("QwenImage21")
@dataclass(frozen=True)
class QwenImage21LatentFormat(LatentFormat):
    """64 channels, 16x down, per-channel mean / std (TAESD previews: `taeqi2_1_decoder`)."""

    name: str = "QwenImage21"
    channels: int = 64
    scale_factor: float = 1.0
    latent_rgb_factors: tuple[tuple[float, float, float], ...] = _RGB
    latent_rgb_factors_bias: tuple[float, float, float] | None = (-0.1228, -0.1869, -0.3083)
    taesd_decoder_name: str | None = "taeqi2_1_decoder"
    mean: tuple[float, ...] = _MEAN
    std: tuple[float, ...] = _STD

    @property
    def spacial_downscale_ratio(self) -> int:
        return 16

    # ComfyUI's tensors [1, 64, 1, 1], which node packs read.
    @property
    def latents_mean(self) -> torch.Tensor:
        return torch.tensor(self.mean).view(1, self.channels, 1, 1)

    @property
    def latents_std(self) -> torch.Tensor:
        return torch.tensor(self.std).view(1, self.channels, 1, 1)

    def _stats(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if latent.ndim < 2 or latent.shape[1] != self.channels:
            raise ValueError(f"{self.name} latent format: expected [B, {self.channels}, ...], "
                             f"got {tuple(latent.shape)}")
        shape = (1, self.channels) + (1,) * (latent.ndim - 2)
        mean = torch.tensor(self.mean, device=latent.device, dtype=latent.dtype).view(shape)
        std = torch.tensor(self.std, device=latent.device, dtype=latent.dtype).view(shape)
        return mean, std

    def process_in(self, latent: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(latent)
        return (latent - mean) / std

    def process_out(self, latent: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(latent)
        return latent * std + mean

"""`VideoDiffusionModel`: Stable Video Diffusion's UNet as a denoiser, what its MODEL holds.

After ComfyUI's `comfy/model_base.py: SVD_img2vid` (model type V_PREDICTION_EDM): the
`DiffusionModel` surface with SVD's conditioning, read from a conditioning entry's options as
ComfyUI's `SVD_img2vid.extra_conds` reads them:

- `encode_adm`: the label-embedding input `[1, 768]`, 256-wide sinusoidal embeddings (the UNet's
  timestep embedding) of `fps - 1` (default fps 6), `motion_bucket_id` (127) and
  `augmentation_level` (0), concatenated;
- `concat_cond`: the extra input channels, the conditioning frame's VAE latent
  `concat_latent_image` **unscaled** (zeros without one), resized bilinearly (centre crop) to
  the noise's size when it differs and to the noise's batch (every frame gets it);
- the cross-attention context is the CLIP vision image embedding the conditioning carries
  (`[1, 1, P]` per entry); a `time_context` model condition, when an entry carries one, is the
  temporal blocks' context (by default they use the cross-attention context).

`apply_model` runs the video UNet with `num_video_frames` = the frames of one video. ComfyUI
passes it as a constant (the latent's batch); here it is the batch of one conditioning entry,
so a batch of `k` concatenated entries (cond and uncond, `transformer_options["cond_or_uncond"]`)
is `k` videos; an explicit `num_video_frames` (an int, or a tensor whose first value is it) wins.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.models.concat_inputs import resize_to_batch_size
from comfy_core.models.diffusion import ADM_NONE, ConditioningError, DiffusionModel, size_embedding
from comfy_core.models.latent_formats import LatentFormat
from comfy_core.families.svd.video_unet import VideoUNetModel


class VideoDiffusionModel(DiffusionModel):
    """SVD img2vid: `.diffusion_model` is a `VideoUNetModel`, sampling continuous EDM with v."""

    def __init__(self, unet: VideoUNetModel, model_sampling: Any, latent_format: LatentFormat,
                 family: Any = None) -> None:
        super().__init__(unet, model_sampling, latent_format, family=family, adm=ADM_NONE)  # type: ignore[arg-type]

    def encode_adm(self, **kwargs: Any) -> torch.Tensor:
        """`[1, 768]` from `fps`, `motion_bucket_id`, `augmentation_level` (see the module docstring)."""
        values = [float(kwargs.get("fps", 6)) - 1.0, float(kwargs.get("motion_bucket_id", 127)),
                  float(kwargs.get("augmentation_level", 0))]
        y = size_embedding(values).unsqueeze(0)  # [1, 3 * 256]
        if y.shape[1] != self.adm_channels:
            raise ConditioningError(f"{getattr(self.family, 'name', 'svd')}: the UNet's label embedding takes "
                                    f"{self.adm_channels} values, not SVD's {y.shape[1]}")
        device = kwargs.get("device")
        return y.to(device) if device is not None else y

    def concat_cond(self, **kwargs: Any) -> torch.Tensor:
        """`[B, C, h, w]`: the conditioning frame's latent for every frame of `noise` [B, C, h, w]."""
        from comfy_core.image.resize import upscale_samples

        noise = kwargs["noise"]
        device = kwargs.get("device") or noise.device
        latent = kwargs.get("concat_latent_image")
        if latent is None:
            latent = torch.zeros_like(noise)
        if latent.ndim != 4 or latent.shape[1] != noise.shape[1]:
            raise ConditioningError(f"{getattr(self.family, 'name', 'svd')}: concat_latent_image must be a "
                                    f"[B, {noise.shape[1]}, h, w] latent, got {tuple(latent.shape)}")
        if latent.shape[1:] != noise.shape[1:]:
            latent = upscale_samples(latent, noise.shape[-1], noise.shape[-2], "bilinear", "center")
        return resize_to_batch_size(latent, noise.shape[0]).to(device=device, dtype=noise.dtype)

    @staticmethod
    def video_frames(x: torch.Tensor, num_video_frames: Any, transformer_options: dict[str, Any] | None) -> int:
        """Frames per video in the batch `x` (see the module docstring)."""
        if num_video_frames is not None:
            if isinstance(num_video_frames, torch.Tensor):
                return int(num_video_frames.flatten()[0])
            return int(num_video_frames)
        runs = len((transformer_options or {}).get("cond_or_uncond") or ()) or 1
        if x.shape[0] % runs:
            raise ConditioningError(f"video model: a batch of {x.shape[0]} frames does not split into {runs} videos")
        return x.shape[0] // runs

    def apply_model(self, x: torch.Tensor, sigma: torch.Tensor, c_crossattn: torch.Tensor | None = None,
                    y: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None,
                    *, c_concat: torch.Tensor | None = None, control: Any = None, time_context: Any = None,
                    num_video_frames: Any = None, image_only_indicator: torch.Tensor | None = None,
                    **kwargs: Any) -> torch.Tensor:
        """x [B*T, 4, h, w] noisy frames (model space), sigma [B*T], c_crossattn [B*T, M, ctx],
        y [B*T, 768], c_concat [B*T, 4, h, w] -> denoised [B*T, 4, h, w] float32."""
        if c_crossattn is None:
            raise ConditioningError("video model: c_crossattn (the CLIP vision image embedding) is required; "
                                    "use SVD_img2vid_Conditioning")
        ctx_dim = self.diffusion_model.config.context_dim
        if c_crossattn.shape[-1] != ctx_dim:
            raise ConditioningError(f"video model: conditioning is {c_crossattn.shape[-1]} wide, this UNet expects "
                                    f"{ctx_dim} (wrong CLIP vision model for this checkpoint?)")
        if y is None or c_concat is None:
            raise ConditioningError("video model: y (fps / motion bucket / augmentation) and c_concat (the "
                                    "conditioning frame's latent) are required; the sampler builds them from "
                                    "the conditioning (encode_adm, concat_cond)")
        frames = self.video_frames(x, num_video_frames, transformer_options)
        dtype = getattr(self, "manual_cast_dtype", None) or self.get_dtype()
        xc = torch.cat([self.model_sampling.calculate_input(sigma, x), c_concat.to(x.dtype)], dim=1)
        t = self.model_sampling.timestep(sigma).float()  # [B*T]: 0.25 * ln(sigma)
        out = self.diffusion_model(
            xc.to(dtype), t, c_crossattn.to(dtype), y.to(dtype), control=control,
            transformer_options=transformer_options, num_video_frames=frames,
            image_only_indicator=image_only_indicator,
            time_context=None if time_context is None else time_context.to(dtype)).float()
        return self.model_sampling.calculate_denoised(sigma, out, x)

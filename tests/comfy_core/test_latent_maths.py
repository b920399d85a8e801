"""comfy_core.latent.arithmetic on video latents and batches: frame-by-frame resizing, batch
cutting and tiling (ComfyUI's common_upscale / repeat_to_batch_size rules)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from comfy_core.latent.arithmetic import fit_to, repeat_to_batch, resize_spatial


def test_video_latents_are_resized_frame_by_frame():
    video = torch.randn(2, 3, 4, 6, 8, generator=torch.Generator().manual_seed(0))  # [B, C, t, h, w]
    out = resize_spatial(video, 5, 3)
    assert out.shape == (2, 3, 4, 3, 5)
    for frame in range(4):
        # 8 x 6 to 5 x 3 is wider: the 6 rows are cropped to 4.8, round(0.6) = 1 row off each side, then bilinear.
        expected = F.interpolate(video[:, :, frame, 1:5, :], size=(3, 5), mode="bilinear")
        assert torch.allclose(out[:, :, frame], expected)


def test_repeat_to_batch_cuts_and_tiles():
    items = torch.arange(3.0)[:, None]
    assert repeat_to_batch(items, 2).flatten().tolist() == [0, 1]
    assert repeat_to_batch(items, 7).flatten().tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert repeat_to_batch(items, 3) is items


def test_fit_to_leaves_a_fitting_latent_alone():
    latent = torch.zeros(2, 4, 3, 3)
    assert fit_to(latent, torch.Size((2, 4, 3, 3))) is latent
    assert fit_to(latent, torch.Size((5, 4, 3, 3)), repeat_batch=False) is latent

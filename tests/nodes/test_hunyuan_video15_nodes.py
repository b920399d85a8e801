"""HunyuanVideo 1.5's nodes (comfy_extras/nodes_hunyuan.py): the empty latent, image-to-video and
super-resolution conditioning, and the latent upscale through a LATENT_UPSCALE_MODEL. Their
`/object_info` entries are checked against the records by tests/nodes/test_object_info_2026.py."""
from __future__ import annotations

import pytest
import torch

from nodes.errors import NodeInputError
from nodes.hunyuan_video15_nodes import (empty_hunyuan_video15_latent, hunyuan_video15_image_to_video,
                                         hunyuan_video15_latent_upscale_with_model, hunyuan_video15_super_resolution)


class VideoVae:
    """Encodes frames `[N, H, W, 3]` to `[1, 32, (N - 1) // 4 + 1, H / 16, W / 16]` (the frames' mean per cell)."""

    def __init__(self) -> None:
        self.seen = []

    def encode(self, frames):
        self.seen.append(frames.shape)
        n, h, w, _ = frames.shape
        cells = frames.mean(-1).reshape(n, h // 16, 16, w // 16, 16).mean((2, 4))[:: 4]  # [T, h, w]
        return cells[None, None].expand(1, 32, -1, -1, -1).clone()

    def decode(self, latent):
        raise AssertionError("not used")


class Vision:
    last_hidden_state = torch.ones(1, 4, 16)


def _cond():
    return [[torch.zeros(1, 3, 8), {}]]


def test_empty_latent():
    (latent,) = empty_hunyuan_video15_latent(64, 32, 9, 2)
    assert latent["samples"].shape == (2, 32, 3, 2, 4) and latent["downscale_ratio_spacial"] == 16
    with pytest.raises(NodeInputError, match="4k \\+ 1"):
        empty_hunyuan_video15_latent(64, 32, 10, 1)


def test_image_to_video_conditioning():
    vae = VideoVae()
    image = torch.rand(2, 40, 80, 3)
    positive, negative, latent = hunyuan_video15_image_to_video(_cond(), _cond(), vae, 64, 32, 9, 1,
                                                                start_image=image, clip_vision_output=Vision())
    assert latent["samples"].shape == (1, 32, 3, 2, 4)
    assert vae.seen == [(2, 32, 64, 3)]  # resized to the size (centre crop)
    for cond in (positive, negative):
        options = cond[0][1]
        concat = options["concat_latent_image"]
        assert concat.shape == (1, 32, 3, 2, 4) and concat[:, :, 0].abs().sum() > 0 and not concat[:, :, 1:].any()
        assert options["concat_mask"][0, 0, :, 0, 0].tolist() == [0.0, 1.0, 1.0]
        assert options["clip_vision_output"] is not None
    plain_pos, _, _ = hunyuan_video15_image_to_video(_cond(), _cond(), vae, 64, 32, 9, 1)
    assert plain_pos[0][1] == {}
    with pytest.raises(NodeInputError, match="clip_vision_output"):
        hunyuan_video15_image_to_video(_cond(), _cond(), vae, 64, 32, 9, 1, clip_vision_output=object())


def test_super_resolution_block():
    latent = {"samples": torch.randn(1, 32, 2, 2, 3)}
    positive, negative, out = hunyuan_video15_super_resolution(_cond(), _cond(), latent, 0.7)
    assert out is latent
    block = positive[0][1]["concat_latent_image"]
    assert block.shape == (1, 66, 2, 2, 3) and positive[0][1]["noise_augmentation"] == 0.7
    assert torch.equal(block[:, 33:65], latent["samples"]) and block[:, 65].eq(1).all() and not block[:, :33].any()
    vae = VideoVae()
    positive, _, _ = hunyuan_video15_super_resolution(_cond(), _cond(), latent, 0.0, vae=vae,
                                                      start_image=torch.rand(1, 20, 20, 3))
    assert vae.seen == [(1, 32, 48, 3)]  # 16 x the latent
    block = positive[0][1]["concat_latent_image"]
    assert block[:, :32, 0].abs().sum() > 0 and block[:, 32, 0].eq(1).all() and not block[:, 32, 1].any()
    with pytest.raises(NodeInputError, match="vae"):
        hunyuan_video15_super_resolution(_cond(), _cond(), latent, 0.7, start_image=torch.rand(1, 20, 20, 3))


class Doubler:
    def resample_latent(self, latent):
        return 2 * latent.double()


def test_latent_upscale_with_model():
    samples = {"samples": torch.ones(1, 32, 2, 3, 4)}
    (out,) = hunyuan_video15_latent_upscale_with_model(Doubler(), samples, "bilinear", 1920, 1080, "disabled")
    assert out["samples"].shape == (1, 32, 2, 67, 120) and out["samples"].dtype == torch.float32
    assert out["samples"].eq(2).all()
    (same,) = hunyuan_video15_latent_upscale_with_model(Doubler(), samples, "bilinear", 0, 0, "disabled")
    assert same is samples
    (kept,) = hunyuan_video15_latent_upscale_with_model(Doubler(), samples, "nearest-exact", 0, 960, "center")
    assert kept["samples"].shape[-2:] == (960 // 16, 1280 // 16)  # width in proportion: round(4 * 960 / 3)
    (small,) = hunyuan_video15_latent_upscale_with_model(Doubler(), samples, "bislerp", 16, 16, "disabled")
    assert small["samples"].shape[-2:] == (4, 4)  # each side at least 64 pixels
    with pytest.raises(NodeInputError, match="LATENT_UPSCALE_MODEL"):
        hunyuan_video15_latent_upscale_with_model(object(), samples, "bilinear", 64, 64, "disabled")

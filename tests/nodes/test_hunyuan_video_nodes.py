"""HunyuanVideo 1.0's HunyuanImageToVideo (comfy_extras/nodes_hunyuan.py): its three guidance types.
Its `/object_info` entry is checked against the record by tests/nodes/test_object_info_2026.py."""
from __future__ import annotations

import pytest
import torch

from nodes.errors import NodeInputError
from nodes.hunyuan_video_nodes import hunyuan_image_to_video


class VideoVae:
    """Encodes frames `[N, H, W, 3]` to `[1, 16, (N - 1) // 4 + 1, H / 8, W / 8]` (the frames' mean per cell)."""

    def __init__(self) -> None:
        self.seen = []

    def encode(self, frames):
        self.seen.append(frames.shape)
        n, h, w, _ = frames.shape
        cells = frames.mean(-1).reshape(n, h // 8, 8, w // 8, 8).mean((2, 4))[::4] + 1.0  # [T, h, w]
        return cells[None, None].expand(1, 16, -1, -1, -1).clone()

    def decode(self, latent):
        raise AssertionError("not used")


def _cond():
    return [[torch.zeros(1, 3, 8), {}]]


def test_concat_replace_and_custom_guidance():
    vae, image = VideoVae(), torch.rand(1, 40, 80, 4)
    positive, latent = hunyuan_image_to_video(_cond(), vae, 64, 32, 9, 1, "v1 (concat)", start_image=image)
    assert vae.seen == [(1, 32, 64, 3)]  # RGB, resized to the size (centre crop)
    options = positive[0][1]
    assert options["concat_latent_image"].shape == (1, 16, 1, 4, 8)
    assert options["concat_mask"][0, 0, :, 0, 0].tolist() == [0.0, 1.0, 1.0]
    assert latent["samples"].shape == (1, 16, 3, 4, 8) and not latent["samples"].any() and "noise_mask" not in latent

    positive, latent = hunyuan_image_to_video(_cond(), vae, 64, 32, 9, 2, "v2 (replace)", start_image=image)
    assert positive[0][1] == {"guiding_frame_index": 0}
    assert latent["samples"][:, :, 0].gt(0).all() and not latent["samples"][:, :, 1:].any()
    assert latent["noise_mask"][0, 0, :, 0, 0].tolist() == [0.0, 1.0, 1.0]

    positive, latent = hunyuan_image_to_video(_cond(), vae, 64, 32, 9, 1, "custom", start_image=image)
    assert positive[0][1]["ref_latent"].shape == (1, 16, 1, 4, 8) and not latent["samples"].any()

    plain, latent = hunyuan_image_to_video(_cond(), vae, 64, 32, 9, 1, "v1 (concat)")
    assert plain[0][1] == {} and set(latent) == {"samples"} and latent["samples"].shape == (1, 16, 3, 4, 8)
    with pytest.raises(NodeInputError, match="guidance_type"):
        hunyuan_image_to_video(_cond(), vae, 64, 32, 9, 1, "v3")


def test_the_image_prompt_needs_the_llava_projection():
    from nodes.hunyuan_video_nodes import text_encode_hunyuan_video_image_to_video

    class Clip:
        def tokenize(self, text, **kwargs):
            raise AssertionError("not reached")

        def encode_from_tokens(self, tokens, **kwargs):
            raise AssertionError("not reached")

    class PlainVision:
        last_hidden_state = torch.zeros(1, 4, 8)
        mm_projected = None

    with pytest.raises(NodeInputError, match="mm_projected"):
        text_encode_hunyuan_video_image_to_video(Clip(), PlainVision(), "a cat", 2)

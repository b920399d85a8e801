"""Kandinsky 5's nodes (comfy_extras/nodes_kandinsky5.py) and ReplaceVideoLatentFrames
(comfy_extras/nodes_latent.py): image-to-video conditioning, the start-frame renormalisation, the
frame splice, the two-prompt text encode. Their `/object_info` entries are checked against the
records by tests/nodes/test_object_info_2026.py."""
from __future__ import annotations

import logging

import pytest
import torch

from nodes.errors import NodeInputError
from nodes.kandinsky5_nodes import (clip_text_encode_kandinsky5, kandinsky5_image_to_video, normalize_video_latent_start,
                                    replace_video_latent_frames)


class VideoVae:
    """Encodes frames `[N, H, W, 3]` to `[1, 16, (N - 1) // 4 + 1, H / 8, W / 8]` (the frames' mean per cell)."""

    def encode(self, frames):
        n, h, w, _ = frames.shape
        cells = frames.mean(-1).reshape(n, h // 8, 8, w // 8, 8).mean((2, 4))[::4]  # [T, h, w]
        return cells[None, None].expand(1, 16, -1, -1, -1).clone()

    def decode(self, latent):
        raise AssertionError("not used")


def _cond():
    return [[torch.zeros(1, 3, 8), {"pooled_output": torch.zeros(1, 4)}]]


def test_image_to_video_without_a_start_image():
    positive, negative, latent, cond_latent = kandinsky5_image_to_video(_cond(), _cond(), VideoVae(), 64, 32, 9, 2)
    assert latent["samples"].shape == (2, 16, 3, 4, 8) and not latent["samples"].any()
    assert cond_latent == {}  # ComfyUI's empty LATENT
    assert "time_dim_replace" not in positive[0][1] and "concat_mask" not in negative[0][1]


def test_image_to_video_start_latent_and_mask():
    image = torch.rand(6, 40, 80, 3)  # six frames: two latent frames are given
    positive, negative, latent, cond_latent = kandinsky5_image_to_video(_cond(), _cond(), VideoVae(), 64, 32, 9, 1,
                                                                        start_image=image)
    encoded = cond_latent["samples"]
    assert encoded.shape == (1, 16, 2, 4, 8)
    for conditioning in (positive, negative):
        options = conditioning[0][1]
        assert options["time_dim_replace"] is encoded
        mask = options["concat_mask"]
        assert mask.shape == (1, 1, 3, 4, 8)
        assert mask[:, :, :2].eq(0).all() and mask[:, :, 2:].eq(1).all()
    assert "time_dim_replace" not in _cond()[0][1]  # inputs untouched (copies)
    with pytest.raises(NodeInputError, match="4k \\+ 1"):
        kandinsky5_image_to_video(_cond(), _cond(), VideoVae(), 64, 32, 10, 1)


def test_normalize_video_latent_start():
    gen = torch.Generator().manual_seed(0)
    samples = torch.randn(2, 4, 7, 3, 5, generator=gen) * 3 + 1
    (out,) = normalize_video_latent_start({"samples": samples, "batch_index": [0, 1]}, 2, 3)
    first, reference = samples[:, :, :2], samples[:, :, 2:5]
    mean, std = first.mean(dim=(1, 3, 4), keepdim=True), first.std(dim=(1, 3, 4), keepdim=True)
    target_mean = torch.clamp(reference.mean(), mean - 0.3, mean + 0.35)
    target_std = torch.clamp(reference.std(), std - 0.35, std + 0.5)
    assert torch.allclose(out["samples"][:, :, :2], (first - mean) / (std + 1e-8) * target_std + target_mean,
                          atol=1e-5)
    assert torch.equal(out["samples"][:, :, 2:], samples[:, :, 2:]) and out["batch_index"] == [0, 1]
    assert not torch.equal(out["samples"], samples)
    single = {"samples": torch.randn(1, 4, 1, 2, 2)}
    assert normalize_video_latent_start(single, 4, 5)[0] is single  # one frame: unchanged
    with pytest.raises(NodeInputError, match="start_frame_count"):  # nothing left as the reference
        normalize_video_latent_start({"samples": torch.randn(1, 4, 3, 2, 2)}, 4, 5)


def test_replace_video_latent_frames(caplog):
    destination = {"samples": torch.zeros(1, 4, 5, 2, 2), "noise_mask": torch.ones(1)}
    source = {"samples": torch.ones(1, 4, 2, 2, 2)}
    (out,) = replace_video_latent_frames(destination, 1, source)
    assert out["samples"][:, :, 1:3].eq(1).all() and out["samples"][:, :, [0, 3, 4]].eq(0).all()
    assert "noise_mask" not in out and not destination["samples"].any()  # source's keys, destination untouched
    (tail,) = replace_video_latent_frames(destination, -2, source)
    assert tail["samples"][:, :, 3:].eq(1).all() and tail["samples"][:, :, :3].eq(0).all()
    assert replace_video_latent_frames(destination, 0)[0] is destination  # no source
    with caplog.at_level(logging.WARNING):
        assert replace_video_latent_frames(destination, 4, source)[0] is destination  # does not fit
    assert "do not fit" in caplog.text
    with pytest.raises(NodeInputError, match="source"):
        replace_video_latent_frames(destination, 0, {"samples": torch.ones(1, 3, 2, 2, 2)})


class TwoPromptClip:
    def __init__(self) -> None:
        self.encoded = None

    def tokenize(self, text):
        return {"l": [("l", text)], "qwen25_7b": [("qwen", text)]}

    def encode_from_tokens(self, tokens):
        raise AssertionError("the scheduled encode is ComfyUI's")

    def encode_from_tokens_scheduled(self, tokens):
        self.encoded = tokens
        return [[torch.zeros(1, 1, 1), {}]]


def test_clip_text_encode_kandinsky5_takes_each_prompt_for_its_encoder():
    clip = TwoPromptClip()
    clip_text_encode_kandinsky5(clip, "a cat", "a cat on a sofa, camera pans")
    assert clip.encoded == {"l": [("l", "a cat")], "qwen25_7b": [("qwen", "a cat on a sofa, camera pans")]}

"""MiniMax Music 3's nodes (nodes/minimax_music3_nodes.py): MiniMaxMusic3TextEncode on the tiny AR text
encoder (its frames, `conditioning_scale`, the seconds output), EmptyMiniMaxMusic3LatentAudio's latent,
and ConditioningZeroOut's negative for it."""
from __future__ import annotations

import pytest
import torch

from nodes.conditioning_ops import conditioning_zero_out
from nodes.errors import NodeInputError
from nodes.minimax_music3_nodes import empty_minimax_music3_latent_audio, minimax_music3_text_encode
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.template_models_minimax_music3 import CODEBOOKS, TEXT_WIDTH, write_text_encoder


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from comfy_core.split.text_encoder_files import load_text_encoders

    path = write_text_encoder(tmp_path_factory.mktemp("mm3") / "minimax_music3_text_encoder_pruned.safetensors")
    return load_text_encoders([str(path)], "minimax")


def test_text_encode_generates_frames_with_conditioning_scale_and_seconds(clip):
    conditioning, seconds = minimax_music3_text_encode(clip, "Lo-fi hip-hop", "[verse]\nrain", 7, 0.2, 1.5, 50)
    (cond, options), = conditioning
    assert cond.shape[0] == 1 and 1 <= cond.shape[1] <= 5 and cond.shape[2] == CODEBOOKS * TEXT_WIDTH  # 0.2 s: 5 frames
    assert seconds == pytest.approx(cond.shape[1] / 25)
    assert torch.equal(options["conditioning_scale"], torch.ones(1, 1, 1, dtype=cond.dtype))
    again, _ = minimax_music3_text_encode(clip, "Lo-fi hip-hop", "[verse]\nrain", 7, 0.2, 1.5, 50)
    assert torch.equal(again[0][0], cond)
    other, _ = minimax_music3_text_encode(clip, "Lo-fi hip-hop", "[verse]\nrain", 8, 0.2, 1.5, 50)
    assert not torch.equal(other[0][0], cond)
    (negative, negative_options), = conditioning_zero_out(conditioning)[0]
    assert not negative.any() and not negative_options["conditioning_scale"].any()  # the DiT sees a zero condition


def test_text_encode_needs_the_music_text_encoder():
    with pytest.raises(NodeInputError):
        minimax_music3_text_encode("not a clip", "a", "b", 0, 1.0, 1.5, 50)


@pytest.mark.parametrize("seconds, frames", [(120.0, 10335), (0.04, 3), (360.0, 31007), (60.0, 5167)])
def test_empty_latent_has_the_ar_frames_latent_length(seconds, frames):
    (latent,) = empty_minimax_music3_latent_audio(seconds, 2)
    assert latent["samples"].shape == (2, 128, frames) and not latent["samples"].any()
    assert latent["type"] == "audio" and latent["downscale_ratio_temporal"] == 512

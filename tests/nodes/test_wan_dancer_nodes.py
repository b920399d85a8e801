"""Wan Dancer's nodes (nodes/wan_dancer_nodes.py) as ComfyUI's `comfy_extras/nodes_wandancer.py`
computes them: the encoded audio's dict, fps and prompt text; WanDancerVideo's latent and
conditioning values (the concat mask from the start frames or from a keyframe mask, hand-checked);
the keyframe padding of WanDancerPadKeyframes(List) on a hand-worked case."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from nodes.errors import NodeInputError
from nodes.wan_dancer_nodes import (wan_dancer_encode_audio, wan_dancer_pad_keyframes, wan_dancer_pad_keyframes_list,
                                    wan_dancer_video)
from tests.nodes.node_context import running_node
from tests.nodes.test_wan_nodes import FakeVideoVAE, cond, frames


def _clicks(seconds: float = 3.0, rate: int = 22050) -> dict:
    clicks = np.zeros(int(seconds * rate), dtype=np.float32)
    for start in range(0, len(clicks), rate // 2):
        clicks[start:start + 200] = np.hanning(200)
    return {"waveform": torch.from_numpy(np.stack([clicks, clicks]))[None], "sample_rate": rate}


def test_encode_audio_output_fps_and_prompt_text():
    audio = _clicks()
    with running_node("WanDancerEncodeAudio", "1"):
        output, text = wan_dancer_encode_audio(audio, 45, 0.75)            # 91 feature frames / 45 -> 2
        assert output["audio_feature"].shape == (1, 91, 35)
        assert output["fps"] == 15.0 and output["audio_inject_scale"] == 0.75 and text == " 帧率是15.0000"
        output, text = wan_dancer_encode_audio(audio, 89, 1.0)
        assert output["fps"] == 30.0 and text == ", 帧率是30fps。"
        with pytest.raises(NodeInputError, match="audio"):
            wan_dancer_encode_audio(audio, 1001, 1.0)


def test_video_latent_and_start_frame_mask():
    vae = FakeVideoVAE()
    start = frames(5, 16, 32)
    positive, negative, latent = wan_dancer_video(cond(1.0), cond(-1.0), vae, 32, 16, 13, start_image=start)
    assert latent["samples"].shape == (1, 16, 4, 2, 4) and not latent["samples"].any()
    values = positive[0][1]
    image = torch.zeros(13, 16, 32, 3)
    image[:5] = start
    torch.testing.assert_close(values["concat_latent_image"], vae.latent_of(image))
    mask = values["concat_mask"]
    assert mask.shape == (1, 1, 4, 2, 4)
    assert not mask[:, :, :2].any() and bool((mask[:, :, 2:] == 1).all())  # 5 frames: latent frames 0 and 1 given
    assert negative[0][1]["concat_mask"] is mask and "clip_vision_output" not in values
    assert positive[0][1]["keep"] == 1.0


def test_video_keyframe_mask_to_four_channels():
    vae = FakeVideoVAE()
    keyframes = torch.zeros(9, 16, 32)
    keyframes[[0, 3, 8]] = 1.0                                                  # white: keep
    positive, _, _ = wan_dancer_video(cond(), cond(), vae, 32, 16, 9, start_image=frames(9), mask=keyframes)
    mask = positive[0][1]["concat_mask"]
    assert mask.shape == (1, 4, 3, 2, 4)
    # latent frame 0: frame 0 four times; frame 1: frames 1..4; frame 2: frames 5..8 (1 = generate)
    expected = torch.tensor([[0, 0, 0, 0], [1, 1, 0, 1], [1, 1, 1, 0]], dtype=torch.float32).T
    torch.testing.assert_close(mask[0, :, :, 0, 0], expected)
    assert bool((mask == mask[..., :1, :1]).all())                               # whole frames
    with pytest.raises(NodeInputError, match="4k"):
        wan_dancer_video(cond(), cond(), vae, 32, 16, 9, start_image=frames(9), mask=keyframes[:8])


def test_video_clip_vision_and_audio_values():
    first, ref = SimpleNamespace(penultimate_hidden_states=torch.ones(1, 3, 4)), \
        SimpleNamespace(penultimate_hidden_states=torch.zeros(1, 3, 4))
    audio = {"audio_feature": torch.ones(1, 30, 35), "fps": 10.0, "audio_inject_scale": 0.5}
    positive, negative, _ = wan_dancer_video(cond(), cond(), FakeVideoVAE(), 32, 16, 5, clip_vision_output=first,
                                             clip_vision_output_ref=ref, audio_encoder_output=audio)
    for values in (positive[0][1], negative[0][1]):
        assert values["clip_vision_output"] is first and values["clip_vision_output_ref"] is ref
        assert values["audio_embed"] is audio["audio_feature"] and values["fps"] == 10.0
        assert values["audio_inject_scale"] == 0.5 and "concat_mask" not in values
    # the reference alone is dropped, as ComfyUI's node does
    positive, _, _ = wan_dancer_video(cond(), cond(), FakeVideoVAE(), 32, 16, 5, clip_vision_output_ref=ref)
    assert "clip_vision_output_ref" not in positive[0][1]


def _audio(samples: int, rate: int = 10) -> dict:
    return {"waveform": torch.arange(float(samples)).reshape(1, 1, samples), "sample_rate": rate}


def test_pad_keyframes_hand_case():
    """0.6 s of audio, 9-frame segments (0.3 s at 30 fps): 2 segments, 18 frames for 6 images, one every
    3 frames. Segment 0 holds images 0, 1 at frames 0, 3 and image 2 at its last frame; segment 1 starts
    from image 2 (frames 0, 3) and ends with image 4 on the video's last frame."""
    images = torch.arange(6.0).reshape(6, 1, 1, 1).expand(6, 2, 2, 3).clone()
    audio = _audio(6)
    seg0 = wan_dancer_pad_keyframes(images, 9, 0, audio)
    seg1 = wan_dancer_pad_keyframes(images, 9, 1, audio)
    for (keyframes, mask, piece), places, samples in ((seg0, {0: 0, 3: 1, 8: 2}, [0, 1, 2]),
                                                       (seg1, {0: 2, 3: 3, 8: 4}, [3, 4, 5])):
        assert keyframes.shape == (9, 2, 2, 3) and mask.shape == (9, 2, 2)
        assert torch.nonzero(mask[:, 0, 0]).flatten().tolist() == sorted(places)
        for frame, image in places.items():
            assert bool((keyframes[frame] == image).all())
        assert not keyframes[[1, 2, 4, 5, 6, 7]].any()
        assert piece["waveform"].flatten().tolist() == samples and piece["sample_rate"] == 10
    # under 0.2 s of audio: nothing placed
    keyframes, mask, _ = wan_dancer_pad_keyframes(images, 9, 0, _audio(1))
    assert not mask.any() and not keyframes.any()


def test_pad_keyframes_list_emits_lists_in_order():
    images = torch.arange(6.0).reshape(6, 1, 1, 1).expand(6, 2, 2, 3).clone()
    keyframes, masks, pieces = wan_dancer_pad_keyframes_list(images, 9, 2, _audio(6))
    assert isinstance(keyframes, list) and len(keyframes) == len(masks) == len(pieces) == 2
    single = wan_dancer_pad_keyframes(images, 9, 1, _audio(6))
    assert torch.equal(keyframes[1], single[0]) and torch.equal(masks[1], single[1])
    spec = wan_dancer_pad_keyframes_list.__node_spec__
    assert [o.is_list for o in spec.outputs] == [True, True, True]

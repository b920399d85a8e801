"""Kandinsky 6's latent nodes (today's ComfyUI, comfy_extras/nodes_kandinsky6.py) and the joint
latent of comfy_core/families/kandinsky6/latents.py: sizes against hand-computed numbers, the
reference tail and its removal, the errors, and a workflow through the executor."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.kandinsky6.latents import audio_latent_frames
from comfy_core.latent.nested import NestedTensor
from nodes.errors import NodeInputError
from nodes.kandinsky6_nodes import (kandinsky6_empty_latent, kandinsky6_image_to_video_audio,
                                    kandinsky6_remove_reference_latent)
from tests.nodes.workflow_2026 import Runner, node


def _cond(value: float = 1.0) -> list:
    return [[torch.full((1, 3, 8), value), {"pooled_output": None}]]


def test_audio_length_covers_the_video_duration():
    # 121 frames at 24 fps = 5.041666 s; * 44100 / 1024 = 217.13 -> 218 latent frames
    assert audio_latent_frames(121, 24.0) == 218
    assert audio_latent_frames(17, 24.0) == 31  # 17 / 24 * 44100 / 1024 = 30.5 -> 31
    assert audio_latent_frames(24, 24.0) == 44  # exactly 43.07 -> 44


def test_empty_latent_shapes_and_rates():
    (latent,) = kandinsky6_empty_latent(256, 320, 17, 1)
    video, audio = latent["samples"].unbind()
    assert video.shape == (1, 16, 5, 40, 32) and audio.shape == (1, 31, 40)
    assert float(video.abs().sum() + audio.abs().sum()) == 0.0
    assert latent["frame_rate"] == 24.0 and latent["sample_rate"] == 44100


@pytest.mark.parametrize("size", [(264, 256, 17, 1), (256, 248, 17, 1), (256, 256, 18, 1), (256, 256, 17, 2)])
def test_empty_latent_refuses_sizes_kandinsky6_cannot_take(size):
    # width / height not multiples of 16, a frame count not 4n+1, a batch of 2
    with pytest.raises(NodeInputError, match="width/height/length/batch_size"):
        kandinsky6_empty_latent(*size)


def test_empty_latent_smallest_sizes():
    (latent,) = kandinsky6_empty_latent(272, 256, 1, 1)
    video, audio = latent["samples"].unbind()
    assert video.shape == (1, 16, 1, 32, 34) and audio.shape == (1, 2, 40)  # 1/24 s * 44100/1024 = 1.79


def test_reference_tail_then_removed():
    (empty,) = kandinsky6_empty_latent(256, 256, 9, 1)
    reference = torch.randn(1, 16, 1, 32, 32)
    pos, neg, latent = kandinsky6_image_to_video_audio(_cond(1.0), _cond(0.0), empty, {"samples": reference})
    assert pos[0][1]["k6_reference_tail"] is True and neg[0][1]["k6_reference_tail"] is True
    video, audio = latent["samples"].unbind()
    assert video.shape == (1, 16, 4, 32, 32) and torch.equal(video[:, :, -1:], reference)
    assert float(video[:, :, :3].abs().sum()) == 0.0
    vmask, amask = latent["noise_mask"].unbind()
    assert float(vmask[:, :, :3].min()) == 1.0 and float(vmask[:, :, 3].abs().max()) == 0.0
    assert amask.shape == audio.shape and float(amask.min()) == 1.0
    assert latent["k6_generated_video_latent_frames"] == 3 and "noise_mask" not in empty
    # a 4-D reference (an image VAE's latent) is taken as one frame
    _, _, again = kandinsky6_image_to_video_audio(_cond(), _cond(), empty, {"samples": reference[:, :, 0]})
    assert torch.equal(again["samples"].unbind()[0], video)

    sampled = dict(latent, samples=NestedTensor((video + 1.0, audio + 2.0)))
    (out,) = kandinsky6_remove_reference_latent(sampled)
    v2, a2 = out["samples"].unbind()
    assert v2.shape == (1, 16, 3, 32, 32) and float(v2.min()) == 1.0 and float(a2.min()) == 2.0
    assert not {"noise_mask", "k6_reference_tail", "k6_generated_video_latent_frames"} & set(out)
    assert out["frame_rate"] == 24.0


def test_text_to_video_passes_through():
    (empty,) = kandinsky6_empty_latent(256, 256, 9, 1)
    pos, neg = _cond(1.0), _cond(0.0)
    p, n, latent = kandinsky6_image_to_video_audio(pos, neg, empty)
    assert latent is empty and "k6_reference_tail" not in p[0][1] and "k6_reference_tail" not in n[0][1]


def test_errors_name_the_input():
    (empty,) = kandinsky6_empty_latent(256, 256, 9, 1)
    with pytest.raises(NodeInputError, match="reference_latent"):
        kandinsky6_image_to_video_audio(_cond(), _cond(), empty, {"samples": torch.zeros(1, 16, 2, 32, 32)})
    with pytest.raises(NodeInputError, match="reference_latent"):
        kandinsky6_image_to_video_audio(_cond(), _cond(), empty, {"samples": torch.zeros(1, 16, 1, 16, 32)})
    with pytest.raises(NodeInputError, match="empty_latent"):
        kandinsky6_image_to_video_audio(_cond(), _cond(), {"samples": torch.zeros(1, 16, 3, 32, 32)})
    video, _ = empty["samples"].unbind()
    with pytest.raises(NodeInputError, match="empty_latent"):  # audio too short for 24 fps
        kandinsky6_image_to_video_audio(_cond(), _cond(), dict(empty, samples=NestedTensor((video, torch.zeros(1, 3, 40)))))
    with pytest.raises(NodeInputError, match="joint_latent"):  # no reference tail to remove
        kandinsky6_remove_reference_latent(empty)


async def test_in_a_workflow(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"lat": node("Kandinsky6EmptyLatent", width=256, height=256, length=17, batch_size=1),
              "size": node("GetLatentSize", latent=["lat", 0]),
              "out": node("PreviewAny", source=["size", 2])}
    checked = await runner.validate(prompt)
    assert checked.ok, checked.node_errors
    out = await runner.executor.execute(prompt, "p", outputs=checked.outputs, sink=lambda e: None)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["5"]}  # (17 - 1) / 4 + 1 latent frames

    bad = {"lat": node("Kandinsky6EmptyLatent", width=256, height=256, length=17, batch_size=1),
           "rm": node("Kandinsky6RemoveReferenceLatent", joint_latent=["lat", 0]),
           "size": node("GetLatentSize", latent=["rm", 0]),
           "out": node("PreviewAny", source=["size", 2])}
    checked = await runner.validate(bad)
    assert checked.ok, checked.node_errors
    out = await runner.executor.execute(bad, "p2", outputs=checked.outputs, sink=lambda e: None)
    assert out.status != "success" and "joint_latent" in str(out.error)

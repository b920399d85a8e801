"""`Video Slice` (ComfyUI's nodes_video.py, 2026, shown as "Trim Video"): the frames and audio of
a time window; a negative start counts from the end; strict_duration refuses a short window."""
from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from comfy_core.video import VideoComponents, VideoFromComponents
from nodes.video_slice import video_slice
from tests.nodes.workflow_2026 import Runner, node


def ten_frames(fps: int = 5, audio: bool = True) -> VideoFromComponents:
    images = torch.arange(10, dtype=torch.float32).view(10, 1, 1, 1).expand(10, 2, 2, 3) / 10
    track = {"waveform": torch.arange(2000, dtype=torch.float32).view(1, 1, 2000), "sample_rate": 1000}
    return VideoFromComponents(VideoComponents(images=images, frame_rate=Fraction(fps), audio=track if audio else None))


def frame_ids(video) -> list[int]:
    return [round(float(v) * 10) for v in video.get_components().images[:, 0, 0, 0]]


@pytest.mark.parametrize("start, duration, frames", [
    (0.0, 0.0, list(range(10))), (0.4, 0.6, [2, 3, 4]), (1.0, 0.0, [5, 6, 7, 8, 9]),
    (-0.4, 0.0, [8, 9]), (1.5, 5.0, [8, 9]), (-10.0, 0.2, [0]),
])
def test_window_frames(start, duration, frames):
    (out,) = video_slice(ten_frames(), start, duration, False)
    assert frame_ids(out) == frames


def test_audio_follows_the_frames():
    (out,) = video_slice(ten_frames(), 0.4, 0.6, False)
    waveform = out.get_components().audio["waveform"]
    assert waveform.shape[-1] == 600 and waveform[0, 0, 0] == 400


def test_strict_duration_and_an_empty_window_fail():
    with pytest.raises(ValueError, match="Failed to slice video"):
        video_slice(ten_frames(), 1.5, 5.0, True)
    with pytest.raises(ValueError, match="Failed to slice video"):
        video_slice(ten_frames(), 3.0, 0.0, False)
    assert frame_ids(video_slice(ten_frames(), 1.0, 1.0, True)[0]) == [5, 6, 7, 8, 9]


def test_a_video_that_trims_itself_is_asked():
    class PackVideo:
        def as_trimmed(self, start_time, duration, strict_duration=False):
            return ("trimmed", start_time, duration, strict_duration)

    assert video_slice(PackVideo(), 1.0, 2.0, True) == (("trimmed", 1.0, 2.0, True),)


async def test_in_a_prompt(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"img": node("EmptyImage", width=8, height=8, batch_size=12, color=0),
              "v": node("CreateVideo", images=["img", 0], fps=4.0),
              "s": node("Video Slice", video=["v", 0], start_time=1.0, duration=1.0, strict_duration=True),
              "c": node("GetVideoComponents", video=["s", 0]),
              "n": node("GetImageSize", image=["c", 0]),
              "out": node("PreviewAny", source=["n", 2])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["4"]}

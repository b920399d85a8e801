"""Today's video editing (comfy_core/video/edit.py, nodes/video_slice.py, LoadVideo's `edit`):
ComfyUI's crop rectangle rule, VideoTrim / VideoCrop on the editor's VIDEO_EDIT values with their
previews, LoadVideo trimming and cropping on load, ConcatenateVideo's joins and refusals. The
`/object_info` entries are checked against their records by tests/nodes/test_object_info_2026.py."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from comfy_core.video import VideoFromFile
from comfy_core.video.edit import VideoEditError, crop_rect
from nodes.environment import Environment
from nodes.video_io import create_video, get_video_components, load_video, save_video
from nodes.video_slice import concatenate_video, video_crop, video_trim
from tests.nodes.node_context import folders_env, running_node


@pytest.fixture
def env(tmp_path: Path) -> Environment:
    return folders_env(tmp_path)


def frames(count: int = 8, height: int = 24, width: int = 32, offset: float = 0.0) -> torch.Tensor:
    """Each frame a flat grey of its own level (so frames can be told apart after a codec)."""
    levels = torch.linspace(0.1, 0.9, count) + offset
    return levels[:, None, None, None].expand(count, height, width, 3).contiguous()


def tone(seconds: float, rate: int = 8000, value: float = 0.25) -> dict:
    return {"waveform": torch.full((1, 1, int(seconds * rate)), value), "sample_rate": rate}


@pytest.mark.parametrize("rect, size, want", [
    ((0, 0, 0, 0), (32, 24), None),  # zero: no crop
    ((0, 0, 32, 24), (32, 24), None),  # the whole frame: no crop
    ((3, 5, 11, 9), (32, 24), (2, 4, 10, 8)),  # origin and size made even
    ((30, 20, 50, 50), (32, 24), (30, 20, 2, 4)),  # size clamped to the frame
    ((40, 40, 8, 8), (32, 24), (30, 22, 2, 2)),  # origin clamped into the frame
    ((31, 0, 1, 24), (32, 24), None),  # nothing left once even
])
def test_crop_rect_is_comfyuis_rule(rect, size, want):
    assert crop_rect(*rect, *size) == want


def test_video_trim_and_crop_nodes_edit_and_preview(env):
    with running_node("VideoTrim", env=env):
        (video,) = create_video(frames(), 4.0, tone(2.0), 10, "HDR")
        out = video_trim(video, {"trim": {"start_time": 0.5, "duration": 1.0}}, False)
    (trimmed,) = out["result"]
    components = trimmed.get_components()
    assert torch.equal(components.images, frames()[2:6])
    assert components.audio["waveform"].shape[-1] == 8000  # 0.5 s .. 1.5 s at 8 kHz
    assert (trimmed.get_bit_depth(), trimmed.get_color_space()) == (10, "HDR")
    (preview,) = out["ui"]["images"]
    assert preview["type"] == "temp" and (env.temp_dir / preview["subfolder"] / preview["filename"]).is_file()
    with running_node("VideoCrop", env=env):
        out = video_crop(trimmed, {"crop": {"x": 4, "y": 2, "width": 16, "height": 10}})
    (cropped,) = out["result"]
    assert torch.equal(cropped.get_components().images, frames()[2:6, 2:12, 4:20])
    with running_node("VideoCrop", env=env):
        (same,) = video_crop(trimmed, {"crop": {"x": 0, "y": 0, "width": 0, "height": 0}})["result"]
    assert same is trimmed
    with running_node("VideoTrim", env=env), pytest.raises(VideoEditError, match="Failed to trim video"):
        video_trim(video, {"trim": {"start_time": 1.0, "duration": 5.0}}, True)


def test_load_video_trims_and_crops_on_load(env):
    with running_node("SaveVideo", env=env):
        (made,) = create_video(frames(), 4.0, tone(2.0))
        record = save_video(made, "clip", "mp4", "h264")["ui"]["images"][0]
    os.replace(env.output_dir / record["subfolder"] / record["filename"], env.input_dir / "clip.mp4")
    with running_node("LoadVideo", env=env):
        plain = load_video("clip.mp4")
        edited = load_video("clip.mp4", {"trim": {"start_time": 1.0, "duration": 0.5},
                                         "crop": {"x": 8, "y": 4, "width": 16, "height": 12}})
    assert isinstance(plain["result"][0], VideoFromFile)
    assert plain["ui"]["images"] == [{"filename": "clip.mp4", "subfolder": "", "type": "input"}]
    images, audio, fps, _, _ = get_video_components(edited["result"][0])
    assert images.shape == (2, 12, 16, 3) and fps == 4.0
    decoded = get_video_components(plain["result"][0])[0]
    assert torch.allclose(images, decoded[4:6, 4:16, 8:24], atol=1e-6)
    assert audio["waveform"].shape[-1] == pytest.approx(0.5 * audio["sample_rate"], abs=2)
    assert edited["ui"]["images"][0]["type"] == "temp"


def test_concatenate_video_joins_in_socket_order(env):
    with running_node("ConcatenateVideo", env=env):
        (a,) = create_video(frames(4), 4.0, tone(1.0, value=0.25))
        (b,) = create_video(frames(4, offset=0.05), 4.0, tone(1.0, value=-0.25))
        (joined,) = concatenate_video({"video0": [a], "video1": [b]}, ["auto"], None)
    assert isinstance(joined, VideoFromFile)  # encoded at once, as ComfyUI's VideoFromList
    images, audio, fps, _, _ = get_video_components(joined)
    assert images.shape[0] == 8 and fps == 4.0
    means = images.mean(dim=(1, 2, 3))
    want = torch.cat([frames(4), frames(4, offset=0.05)]).mean(dim=(1, 2, 3))
    assert torch.allclose(means, want, atol=0.02)
    assert audio["waveform"].shape[-1] == pytest.approx(2 * audio["sample_rate"], rel=0.05)
    with running_node("ConcatenateVideo", env=env):
        (over,) = concatenate_video({"video0": [a], "video1": [b]}, ["auto"], [tone(5.0, value=0.1)])
    assert get_video_components(over)[1]["waveform"].shape[-1] == pytest.approx(2 * 8000, rel=0.05)
    with running_node("ConcatenateVideo", env=env):
        (small,) = create_video(frames(4, height=16), 4.0)
        with pytest.raises(VideoEditError, match="incompatible frame dimensions"):
            concatenate_video({"video0": [a], "video1": [small]}, ["auto"], None)
        (slow,) = create_video(frames(4), 8.0)
        with pytest.raises(VideoEditError, match="different frame rates"):
            concatenate_video({"video0": [a], "video1": [slow]}, ["auto"], None)
        (silent,) = create_video(frames(4), 4.0)
        with pytest.raises(VideoEditError, match="missing audio"):
            concatenate_video({"video0": [a], "video1": [silent]}, ["auto"], None)

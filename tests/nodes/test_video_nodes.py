"""LoadVideo, SaveVideo, CreateVideo, GetVideoComponents, SaveWEBM: files written through the
nodes decoded back with PyAV (frames, size, rate, pixels, audio, tags), ComfyUI's file naming and
UI record, --disable-metadata, LoadVideo's laziness, listing, validation and fingerprint, and the
errors of bad input (named node and input, the library's typed error as the cause)."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from comfy_core.video import UnreadableVideoError, VideoEncodingError, VideoFromFile
from nodes.environment import Environment
from nodes.errors import NodeInputError
from tests.nodes.node_context import folders_env, running_node
from nodes.video_io import (create_video, get_video_components, list_input_videos, load_video, save_video, save_webm,
                            video_exists, video_fingerprint)

PROMPT = {"3": {"class_type": "CreateVideo", "inputs": {"fps": 8}}}
EXTRA = {"workflow": {"nodes": [{"id": 3}]}}


@pytest.fixture
def env(tmp_path: Path) -> Environment:
    return folders_env(tmp_path)


def running_in(env: Environment, class_type: str = "SaveVideo"):
    return running_node(class_type, "7", env)


def frames(count: int = 9, height: int = 24, width: int = 32) -> torch.Tensor:
    ramp = torch.linspace(0.1, 0.9, width)[None, None, :, None].expand(count, height, width, 3)
    return (ramp * torch.tensor([1.0, 0.6, 0.3]) + torch.linspace(0, 0.1, count)[:, None, None, None]).contiguous()


def tone(seconds: float, rate: int = 16000) -> dict:
    t = torch.arange(int(seconds * rate)) / rate
    return {"waveform": (0.3 * torch.sin(2 * math.pi * 330 * t)).expand(1, 2, -1).contiguous(), "sample_rate": rate}


def saved_path(env: Environment, ui: dict) -> Path:
    (record,) = ui["ui"]["images"]
    assert record["type"] == "output" and ui["ui"]["animated"] == (True,)
    return env.output_dir / record["subfolder"] / record["filename"]


def test_create_then_save_video_writes_an_mp4_that_plays(env):
    images = frames()
    with running_in(env):
        (video,) = create_video(images, 8.0, tone(3.0))
        ui = save_video(video, "video/ComfyUI", "auto", "auto", prompt=PROMPT, extra_pnginfo=EXTRA)
    assert ui["ui"]["images"] == [{"filename": "ComfyUI_00001_.mp4", "subfolder": "video", "type": "output"}]
    path = saved_path(env, ui)
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        decoded = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(stream)])
        assert stream.average_rate == 8 and stream.codec_context.name == "h264"
        tags = dict(container.metadata)
        container.seek(0)
        samples = sum(f.samples for f in container.decode(container.streams.audio[0]))
    assert decoded.shape == (9, 24, 32, 3)
    assert np.abs(decoded / 255.0 - images.numpy()).mean() < 0.015
    assert json.loads(tags["prompt"]) == PROMPT and json.loads(tags["workflow"]) == EXTRA["workflow"]
    assert 16000 * 9 // 8 <= samples <= 16000 * 9 // 8 + 2048  # cut to the 1.125 s of frames
    with running_in(env):
        again = save_video(video, "video/ComfyUI", "mp4", "h264")
    assert again["ui"]["images"][0]["filename"] == "ComfyUI_00002_.mp4"


def test_disable_metadata_writes_no_prompt(env):
    env.disable_metadata = True
    with running_in(env):
        (video,) = create_video(frames(3), 4.0)
        path = saved_path(env, save_video(video, "clip", "auto", "auto", prompt=PROMPT, extra_pnginfo=EXTRA))
        webm = saved_path(env, save_webm(frames(3), "w", "vp9", 4.0, 30.0, prompt=PROMPT, extra_pnginfo=EXTRA))
    for file in (path, webm):
        with av.open(str(file)) as container:
            assert not {"prompt", "workflow"} & {k.lower() for k in container.metadata}


def test_load_video_is_lazy_and_get_video_components_decodes_it(env):
    with running_in(env):
        (short,) = create_video(frames(2), 12.0)
        os.replace(saved_path(env, save_video(short, "short", "auto", "auto")), env.input_dir / "clip.mp4")
        (made,) = create_video(frames(), 12.0, tone(1.0))
        full = saved_path(env, save_video(made, "src", "auto", "auto"))
    (env.input_dir / "notes.txt").write_text("x")
    (env.input_dir / "a.png").write_bytes(b"")
    assert list_input_videos(env) == ["clip.mp4"]
    with running_in(env, "LoadVideo"):
        (video,) = load_video("clip.mp4")["result"]
    assert isinstance(video, VideoFromFile)
    os.replace(full, env.input_dir / "clip.mp4")  # replaced after loading: nothing was decoded yet
    images, audio, fps, bit_depth, color_space = get_video_components(video)
    assert (bit_depth, color_space) == (8, "sRGB")  # CreateVideo's defaults, read back from the file
    assert images.shape == (9, 24, 32, 3) and fps == 12.0 and isinstance(fps, float)
    assert (images - frames()).abs().mean() < 0.015
    assert audio["sample_rate"] == 16000 and audio["waveform"].shape[1] == 2


def test_a_loaded_video_saves_by_copying_its_streams(env):
    with running_in(env):
        (made,) = create_video(frames(), 12.0)
        os.replace(saved_path(env, save_video(made, "src", "auto", "auto")), env.input_dir / "clip.mp4")
        (video,) = load_video("clip.mp4")["result"]
        path = saved_path(env, save_video(video, "copy", "auto", "auto", prompt=PROMPT))
    with av.open(str(env.input_dir / "clip.mp4")) as a, av.open(str(path)) as b:
        assert [bytes(p) for p in a.demux(video=0) if p.size] == [bytes(p) for p in b.demux(video=0) if p.size]
        assert json.loads(b.metadata["prompt"]) == PROMPT


def test_get_video_components_without_audio_gives_none(env):
    with running_in(env):
        (video,) = create_video(frames(2), 5.0)
    images, audio, fps, bit_depth, color_space = get_video_components(video)
    assert images.shape[0] == 2 and audio is None and fps == 5.0 and (bit_depth, color_space) == (8, "sRGB")


def test_load_video_validation_and_fingerprint(env):
    (env.input_dir / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 40)
    with running_in(env):
        (made,) = create_video(frames(2), 5.0)
        os.replace(saved_path(env, save_video(made, "ok", "auto", "auto")), env.input_dir / "ok.mp4")
    with running_in(env, "LoadVideo"):
        assert video_exists("ok.mp4") is True
        assert video_exists("absent.mp4") == "Invalid video file: absent.mp4"
        message = video_exists("broken.mp4")
        assert message.startswith("Invalid video file: broken.mp4: ")
        assert video_fingerprint("ok.mp4") == os.path.getmtime(env.input_dir / "ok.mp4")
        assert isinstance(video_exists("../escape.mp4"), str)
    assert video_exists("anything.mp4") is True  # outside a run the folders are unknown: left to the run
    assert math.isnan(video_fingerprint("ok.mp4"))


def test_a_corrupt_file_fails_downstream_with_the_file_named(env):
    (env.input_dir / "broken.mp4").write_bytes(b"not a video" * 30)
    with running_in(env, "LoadVideo"):
        (video,) = load_video("broken.mp4")["result"]
    with running_in(env, "GetVideoComponents"), pytest.raises(NodeInputError, match="broken.mp4") as info:
        get_video_components(video)
    assert "GetVideoComponents (node 7)" in str(info.value) and isinstance(info.value.__cause__, UnreadableVideoError)
    with running_in(env), pytest.raises(NodeInputError, match="broken.mp4"):
        save_video(video, "x", "auto", "auto")


def test_save_webm_vp9_and_av1(env):
    images = frames()
    for codec, counter in (("vp9", 1), ("av1", 2)):
        with running_in(env, "SaveWEBM"):
            ui = save_webm(images, "ComfyUI", codec, 24.0, 32.0, prompt=PROMPT, extra_pnginfo=EXTRA)
        path = saved_path(env, ui)
        assert path.name == f"ComfyUI_{counter:05}_.webm"
        with av.open(str(path)) as container:
            decoded = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
            assert container.streams.video[0].average_rate == 24
            tags = {k.lower(): v for k, v in container.metadata.items()}
        assert decoded.shape == (9, 24, 32, 3) and np.abs(decoded / 255.0 - images.numpy()).mean() < 0.03
        assert json.loads(tags["prompt"]) == PROMPT and json.loads(tags["workflow"]) == EXTRA["workflow"]


def test_bad_inputs_name_the_node_the_input_and_the_choices(env):
    with running_in(env):
        (video,) = create_video(frames(2, 25, 33), 5.0)
        with pytest.raises(NodeInputError, match="'format' expected one of \\['auto', 'mp4', 'mkv', 'webm'\\]"):
            save_video(video, "x", "avi", "auto")
        with pytest.raises(NodeInputError, match="'codec' expected one of \\['auto', 'h264', 'av1'\\]"):
            save_video(video, "x", "auto", "vp8")
        with pytest.raises(NodeInputError, match="width 33 and height 25") as info:
            save_video(video, "x", "auto", "auto")
        assert isinstance(info.value.__cause__, VideoEncodingError)
        with pytest.raises(NodeInputError, match="'video' expected a VIDEO"):
            save_video(frames(2), "x", "auto", "auto")
        with pytest.raises(NodeInputError, match="'images'"):
            create_video(torch.zeros(4, 4), 5.0)
        with pytest.raises(NodeInputError, match="'audio'"):
            create_video(frames(2), 5.0, {"waveform": torch.zeros(2, 10)})
        with pytest.raises(NodeInputError, match="'codec' expected one of \\['vp9', 'av1'\\]"):
            save_webm(frames(2), "x", "h265", 5.0, 30.0)
        with pytest.raises(NodeInputError, match="filename_prefix"):
            save_webm(frames(2), "../../out", "vp9", 5.0, 30.0)
    assert not list(env.output_dir.rglob("*.mp4"))


def test_the_combo_choices_are_the_librarys():
    from comfy_core.video import VideoCodec, VideoContainer
    from comfy_core.video.encode import WEBM_ENCODERS
    from nodes.video_io import CODECS, CONTAINERS, WEBM_CODECS

    assert CONTAINERS == VideoContainer.as_input() and CODECS == VideoCodec.as_input()
    assert WEBM_CODECS == list(WEBM_ENCODERS)


def test_the_video_nodes_load_as_comfy_extras_nodes_video(comfy_nodes):
    import comfy_extras.nodes_video as module

    assert {"LoadVideo", "SaveVideo", "CreateVideo", "GetVideoComponents", "SaveWEBM"} <= set(module.NODE_CLASS_MAPPINGS)


def _stream_tags(path):
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return (stream.format.name, int(stream.color_primaries), int(stream.color_trc), int(stream.colorspace),
                int(stream.color_range))


@pytest.mark.parametrize("color_space, bit_depth, want", [
    # (pixel format, primaries, transfer, matrix, range): BT.709 / sRGB / BT.709 for sRGB, BT.2020 / HLG or PQ /
    # BT.2020 non-constant for HDR, limited range (FFmpeg's AVColorPrimaries / AVColorTransferCharacteristic /
    # AVColorSpace / AVColorRange numbers)
    ("sRGB", "auto", ("yuv420p", 1, 13, 1, 1)),
    ("sRGB", 10, ("yuv420p10le", 1, 13, 1, 1)),
    ("HDR", "auto", ("yuv420p10le", 9, 18, 9, 1)),
    ("HDR PQ", 8, ("yuv420p", 9, 16, 9, 1)),
])
def test_create_video_encodes_its_bit_depth_and_color_space(env, color_space, bit_depth, want):
    with running_in(env):
        (made,) = create_video(frames(2), 12.0, None, bit_depth, color_space)
        path = saved_path(env, save_video(made, "hdr", "mp4", "h264"))
    assert _stream_tags(path) == want
    with running_in(env, "LoadVideo"):
        os.replace(path, env.input_dir / "hdr.mp4")
        (video,) = load_video("hdr.mp4")["result"]
    images, _, _, depth, space = get_video_components(video)
    assert (depth, space) == (10 if want[0].endswith("10le") else 8, color_space)
    assert images.shape == (2, 24, 32, 3)


def test_ten_bits_keep_what_eight_bits_round_away(env):
    """A gradient finer than 1/255 survives a 10-bit encode (within the codec's error) and not an
    8-bit one: the frames go in as 16-bit RGB, as ComfyUI's."""
    ramp = torch.linspace(0.5, 0.5 + 3 / 255, 32).view(1, 1, 32, 1).expand(2, 24, 32, 3).contiguous()
    levels = {}
    for depth in (8, 10):
        with running_in(env):
            (made,) = create_video(ramp, 12.0, None, depth, "sRGB")
            path = saved_path(env, save_video(made, f"ramp{depth}", "mkv", "h264"))
        with av.open(str(path)) as container:
            frame = next(container.decode(video=0))
            luma = frame.to_ndarray(format="gray16le" if depth == 10 else "gray")
        levels[depth] = len({int(v) for v in luma[12, 2:-2]})
    assert levels[10] > levels[8]


def test_create_video_with_a_codec_is_a_file_video_and_bad_choices_are_refused(env):
    with running_in(env):
        (made,) = create_video(frames(2), 12.0, None, "auto", "sRGB", "h264")
    assert isinstance(made, VideoFromFile) and made.get_container_format().startswith("matroska")
    with pytest.raises(NodeInputError, match="bit_depth"):
        create_video(frames(2), 12.0, None, "9-bit")
    with pytest.raises(NodeInputError, match="color_space"):
        create_video(frames(2), 12.0, None, "auto", "Rec.601")

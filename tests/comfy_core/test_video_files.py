"""comfy_core.video: MP4 (H.264 + AAC) and WEBM (VP9, AV1) written from frames and decoded back
with PyAV directly (frame count, size, rate, pixels within a lossy-codec bound, audio length and
channels, metadata tags), the lazy `VideoFromFile` (headers, components, stream copy, re-encode),
audio files (FLAC / MP3 / Opus), and the typed errors of bad files, choices and frames."""
from __future__ import annotations

import io
import json
import math
from fractions import Fraction
from types import SimpleNamespace

import av
import numpy as np
import pytest
import torch

from comfy_core.video import (UnknownChoiceError, UnreadableAudioError, UnreadableVideoError, VideoCodec,
                              VideoComponents, VideoContainer, VideoEncodingError, VideoFromComponents,
                              VideoFromFile)
from comfy_core.video.audio_files import encode_audio, opus_rate, read_audio
from comfy_core.video.encode import frames_uint8, write_webm
from comfy_core.video.media_types import content_kind, media_type

FRAMES, HEIGHT, WIDTH = 9, 24, 32


def gradient_frames(count: int = FRAMES, height: int = HEIGHT, width: int = WIDTH) -> torch.Tensor:
    """Smooth frames (lossy codecs keep them close): a horizontal ramp, brighter each frame."""
    ramp = torch.linspace(0.1, 0.9, width)[None, None, :, None]
    step = torch.linspace(0.0, 0.1, count)[:, None, None, None]
    rgb = torch.tensor([1.0, 0.7, 0.4])[None, None, None, :]
    return (ramp * rgb + step).expand(count, height, width, 3).clamp(0, 1).contiguous()


def tone(seconds: float = 0.5, rate: int = 16000, channels: int = 2) -> dict:
    t = torch.arange(int(seconds * rate)) / rate
    waves = [0.3 * torch.sin(2 * math.pi * (220 * (c + 1)) * t) for c in range(channels)]
    return {"waveform": torch.stack(waves)[None], "sample_rate": rate}


def decoded(path) -> tuple[np.ndarray, SimpleNamespace, dict]:
    """Frames (uint8 [T, H, W, 3]), the video stream's codec, pixel format and average rate, and
    the tags, read with PyAV itself (read while the file is open: PyAV 18.1.1 refuses a closed
    container's stream)."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(stream)])
        facts = SimpleNamespace(codec=stream.codec_context.name, pix_fmt=stream.codec_context.pix_fmt,
                                average_rate=stream.average_rate)
        return frames, facts, dict(container.metadata)


def test_components_save_as_h264_mp4_that_decodes_to_the_same_frames(tmp_path):
    images = gradient_frames()
    video = VideoFromComponents(VideoComponents(images=images, frame_rate=Fraction(24)))
    video.save_to(tmp_path / "v.mp4", metadata={"prompt": {"3": {"class_type": "KSampler"}}, "workflow": {"n": 1}})
    frames, stream, tags = decoded(tmp_path / "v.mp4")
    assert frames.shape == (FRAMES, HEIGHT, WIDTH, 3)
    assert stream.codec == "h264" and stream.pix_fmt == "yuv420p"
    assert stream.average_rate == 24
    assert np.abs(frames.astype(float) - frames_uint8(images).astype(float)).mean() < 3.0
    assert json.loads(tags["prompt"]) == {"3": {"class_type": "KSampler"}} and json.loads(tags["workflow"]) == {"n": 1}


def test_the_frame_rate_is_rounded_to_a_thousandth_as_comfyui(tmp_path):
    VideoFromComponents(VideoComponents(images=gradient_frames(4), frame_rate=Fraction(2997, 125))).save_to(
        tmp_path / "r.mp4")
    _, stream, _ = decoded(tmp_path / "r.mp4")
    assert stream.average_rate == Fraction(round(2997 / 125 * 1000), 1000)


def test_audio_is_muxed_as_aac_cut_to_the_frames_length(tmp_path):
    audio = tone(seconds=2.0, rate=16000)  # longer than 9 frames at 24 fps (0.375 s)
    VideoFromComponents(VideoComponents(images=gradient_frames(), frame_rate=Fraction(24), audio=audio)).save_to(
        tmp_path / "a.mp4")
    with av.open(str(tmp_path / "a.mp4")) as container:
        track = container.streams.audio[0]
        assert track.codec_context.name == "aac" and track.sample_rate == 16000 and track.channels == 2
        samples = sum(frame.samples for frame in container.decode(track))
    expected = math.ceil(16000 / 24 * FRAMES)  # 6000
    assert expected <= samples <= expected + 2048  # AAC pads to whole 1024-sample frames


def test_video_from_file_reads_headers_frames_audio_and_tags(tmp_path):
    images, audio = gradient_frames(), tone(rate=16000, channels=1)
    VideoFromComponents(VideoComponents(images=images, frame_rate=Fraction(12), audio=audio)).save_to(
        tmp_path / "f.mp4", metadata={"prompt": {"a": 1}})
    video = VideoFromFile(str(tmp_path / "f.mp4"))
    assert video.get_dimensions() == (WIDTH, HEIGHT)
    assert video.get_duration() == pytest.approx(FRAMES / 12, abs=0.1)
    assert "mp4" in video.get_container_format().split(",")
    components = video.get_components()
    assert components.images.shape == (FRAMES, HEIGHT, WIDTH, 3) and components.images.dtype == torch.float32
    assert (components.images - images).abs().mean() < 0.015
    assert components.frame_rate == 12
    assert components.audio["sample_rate"] == 16000 and components.audio["waveform"].shape[:2] == (1, 1)
    assert components.audio["waveform"].dtype == torch.float32
    assert json.loads(components.metadata["prompt"]) == {"a": 1}


def test_saving_a_file_video_copies_its_streams_and_replaces_the_metadata(tmp_path):
    VideoFromComponents(VideoComponents(images=gradient_frames(), frame_rate=Fraction(24), audio=tone())).save_to(
        tmp_path / "src.mp4", metadata={"prompt": {"old": 1}, "workflow": {"w": 1}})
    source = VideoFromFile(str(tmp_path / "src.mp4"))
    source.save_to(str(tmp_path / "copy.mp4"), metadata={"prompt": {"new": 2}})
    with av.open(str(tmp_path / "src.mp4")) as a, av.open(str(tmp_path / "copy.mp4")) as b:
        packets_a = [bytes(p) for p in a.demux(a.streams.video[0]) if p.size]
        packets_b = [bytes(p) for p in b.demux(b.streams.video[0]) if p.size]
        tags = dict(b.metadata)
        assert len(b.streams.audio) == 1
    assert packets_a == packets_b  # not re-encoded
    assert json.loads(tags["prompt"]) == {"new": 2} and json.loads(tags["workflow"]) == {"w": 1}


def test_a_file_video_saves_to_a_stream_and_a_webm_re_encodes_for_h264(tmp_path):
    write_webm(str(tmp_path / "s.webm"), gradient_frames(), "vp9", 24.0, 32.0)
    buffer = io.BytesIO()
    VideoFromFile(str(tmp_path / "s.webm")).save_to(buffer, format="mp4", codec="h264")
    buffer.seek(0)
    with av.open(buffer) as container:
        assert container.streams.video[0].codec_context.name == "h264"
        assert sum(1 for _ in container.decode(video=0)) == FRAMES
    again = VideoFromFile(io.BytesIO(buffer.getvalue()))
    assert again.get_dimensions() == (WIDTH, HEIGHT) and again.get_components().images.shape[0] == FRAMES


@pytest.mark.parametrize("codec, encoder, pix_fmt", [("vp9", "vp9", "yuv420p"), ("av1", "av1", "yuv420p10le")])
def test_webm_in_vp9_and_av1(tmp_path, codec, encoder, pix_fmt):
    images = gradient_frames()
    write_webm(str(tmp_path / "w.webm"), images, codec, 8.0, 20.0, {"prompt": {"p": 1}})
    frames, stream, tags = decoded(tmp_path / "w.webm")
    assert frames.shape == (FRAMES, HEIGHT, WIDTH, 3) and stream.average_rate == 8
    assert stream.codec in (encoder, "libdav1d", "libvpx-vp9")
    assert np.abs(frames.astype(float) - frames_uint8(images).astype(float)).mean() < 6.0
    assert json.loads({k.lower(): v for k, v in tags.items()}["prompt"]) == {"p": 1}  # Matroska upper-cases tags


def test_an_alpha_channel_is_dropped_and_pixels_truncate_as_comfyui():
    images = torch.full((1, 2, 2, 4), 0.999)
    assert frames_uint8(images).shape == (1, 2, 2, 3) and int(frames_uint8(images)[0, 0, 0, 0]) == 254


@pytest.mark.parametrize("content", [b"", b"not a video at all " * 50])
def test_an_unreadable_file_is_a_typed_error_naming_it(tmp_path, content):
    path = tmp_path / "broken.mp4"
    path.write_bytes(content)
    for call in (lambda v: v.get_components(), lambda v: v.get_dimensions(), lambda v: v.get_duration()):
        with pytest.raises(UnreadableVideoError, match="broken.mp4") as info:
            call(VideoFromFile(str(path)))
        assert isinstance(info.value, ValueError) and info.value.path == str(path)


def test_a_truncated_mp4_and_a_missing_file_are_unreadable(tmp_path):
    VideoFromComponents(VideoComponents(images=gradient_frames(), frame_rate=Fraction(24))).save_to(tmp_path / "v.mp4")
    data = (tmp_path / "v.mp4").read_bytes()
    (tmp_path / "cut.mp4").write_bytes(data[: len(data) // 2])
    with pytest.raises(UnreadableVideoError, match="cut.mp4"):
        VideoFromFile(str(tmp_path / "cut.mp4")).get_components()
    with pytest.raises(UnreadableVideoError, match="absent.mp4"):
        VideoFromFile(str(tmp_path / "absent.mp4")).get_dimensions()


def test_an_audio_only_file_is_no_video(tmp_path):
    (tmp_path / "a.flac").write_bytes(encode_audio(tone()["waveform"][0], 16000, "flac"))
    with pytest.raises(UnreadableVideoError, match="no video stream"):
        VideoFromFile(str(tmp_path / "a.flac")).get_components()


def test_unknown_containers_and_codecs_list_the_choices(tmp_path):
    video = VideoFromComponents(VideoComponents(images=gradient_frames(2), frame_rate=Fraction(1)))
    with pytest.raises(UnknownChoiceError, match=r"\['auto', 'mp4', 'mkv', 'webm'\]"):
        video.save_to(tmp_path / "x.avi", format="avi")
    with pytest.raises(UnknownChoiceError, match=r"\['auto', 'h264', 'av1'\]"):
        video.save_to(tmp_path / "x.mp4", codec="hevc")
    with pytest.raises(UnknownChoiceError, match=r"WebM file 'h264': the choices are \['auto', 'av1'\]"):
        video.save_to(tmp_path / "x.webm", format="webm", codec="h264")
    with pytest.raises(UnknownChoiceError, match=r"\['vp9', 'av1'\]"):
        write_webm(str(tmp_path / "x.webm"), gradient_frames(2), "theora", 1.0, 30.0)
    assert VideoContainer.get_extension(VideoContainer.AUTO) == "mp4" and VideoCodec.as_input() == ["auto", "h264", "av1"]
    assert VideoContainer.get_extension("mkv") == "mkv" and VideoContainer.get_extension(VideoContainer.WEBM) == "webm"
    assert not (tmp_path / "x.mp4").exists() and not (tmp_path / "x.webm").exists()


def test_odd_sides_for_h264_are_refused_with_the_sizes(tmp_path):
    video = VideoFromComponents(VideoComponents(images=gradient_frames(2, 25, 33), frame_rate=Fraction(8)))
    with pytest.raises(VideoEncodingError, match="width 33 and height 25"):
        video.save_to(tmp_path / "odd.mp4")
    write_webm(str(tmp_path / "odd.webm"), gradient_frames(2, 25, 33), "vp9", 8.0, 30.0)  # VP9 takes odd sides
    assert decoded(tmp_path / "odd.webm")[0].shape == (2, 25, 33, 3)


def test_av1_refuses_frames_narrower_than_svt_av1_takes(tmp_path):
    # SVT-AV1 corrupts the heap below 25 px wide (comfy_core/video/encode.py SVT_AV1_MIN_WIDTH)
    narrow = gradient_frames(2, 32, 24)
    with pytest.raises(VideoEncodingError, match="at least 32 pixels wide; these are 24"):
        VideoFromComponents(VideoComponents(images=narrow, frame_rate=Fraction(8))).save_to(
            tmp_path / "n.mp4", codec="av1")
    with pytest.raises(VideoEncodingError, match="at least 32 pixels wide"):
        write_webm(str(tmp_path / "n.webm"), narrow, "av1", 8.0, 30.0)
    write_webm(str(tmp_path / "n.webm"), narrow, "vp9", 8.0, 30.0)  # VP9 takes them
    assert not (tmp_path / "n.mp4").exists()


def test_bad_frames_and_audio_are_refused(tmp_path):
    with pytest.raises(VideoEncodingError, match="frames must be"):
        VideoFromComponents(VideoComponents(images=torch.zeros(0, 4, 4, 3), frame_rate=Fraction(1))).save_to(
            tmp_path / "e.mp4")
    with pytest.raises(VideoEncodingError, match="sample_rate"):
        VideoFromComponents(VideoComponents(images=gradient_frames(2), frame_rate=Fraction(1),
                                            audio={"waveform": torch.zeros(1, 1, 10), "sample_rate": 0})).save_to(
            tmp_path / "e.mp4")
    with pytest.raises(VideoEncodingError, match="1 \\(mono\\) or 2"):
        VideoFromComponents(VideoComponents(images=gradient_frames(2), frame_rate=Fraction(1),
                                            audio={"waveform": torch.zeros(1, 6, 100), "sample_rate": 8000})).save_to(
            tmp_path / "e.mp4")
    assert not (tmp_path / "e.mp4").exists()  # refused before the file is made


@pytest.mark.parametrize("format, quality, rate", [("flac", None, 44100), ("mp3", "V0", 44100),
                                                   ("mp3", "320k", 44100), ("opus", "64k", 48000)])
def test_audio_files_round_trip(tmp_path, format, quality, rate):
    clip = tone(seconds=0.5, rate=44100)["waveform"][0]
    data = encode_audio(clip, 44100, format, quality, {"prompt": '{"a": 1}'})
    (tmp_path / f"a.{format}").write_bytes(data)
    waveform, sample_rate = read_audio(tmp_path / f"a.{format}")
    assert sample_rate == rate and waveform.shape[0] == 2 and waveform.dtype == torch.float32
    expected = clip.shape[1] * rate // 44100
    assert expected <= waveform.shape[1] <= expected + 2 * 1152 + 960  # encoder padding
    if format == "flac":  # lossless up to 16-bit quantisation
        assert (waveform - clip).abs().max() < 1e-4
    with av.open(str(tmp_path / f"a.{format}")) as container:
        tags = {k.lower(): v for k, v in container.metadata.items()}
        tags.update({k.lower(): v for k, v in container.streams.audio[0].metadata.items()})
    assert tags["prompt"] == '{"a": 1}'


def test_opus_rates_go_up_to_the_next_supported_one():
    assert [opus_rate(r) for r in (8000, 11025, 22050, 44100, 96000)] == [8000, 12000, 24000, 48000, 48000]


def test_audio_read_of_a_packed_integer_wav_is_float_in_range(tmp_path):
    clip = tone(rate=8000)["waveform"][0]
    with av.open(str(tmp_path / "a.wav"), "w") as out:
        stream = out.add_stream("pcm_s16le", rate=8000, layout="stereo")
        from comfy_core.video.audio_frames import packed_frame

        out.mux(stream.encode(packed_frame(clip, 8000)))
        out.mux(stream.encode(None))
    waveform, rate = read_audio(tmp_path / "a.wav")
    assert rate == 8000 and waveform.shape == clip.shape and (waveform - clip).abs().max() < 1e-3


def test_unreadable_audio_and_bad_choices(tmp_path):
    (tmp_path / "x.mp3").write_bytes(b"nonsense" * 20)
    with pytest.raises(UnreadableAudioError, match="x.mp3"):
        read_audio(tmp_path / "x.mp3")
    VideoFromComponents(VideoComponents(images=gradient_frames(2), frame_rate=Fraction(4))).save_to(tmp_path / "v.mp4")
    with pytest.raises(UnreadableAudioError, match="no audio stream"):
        read_audio(tmp_path / "v.mp4")
    with pytest.raises(UnknownChoiceError, match="wav"):
        encode_audio(torch.zeros(1, 10), 8000, "wav")
    with pytest.raises(UnknownChoiceError, match=r"\['V0', '128k', '320k'\]"):
        encode_audio(torch.zeros(1, 10), 8000, "mp3", "999k")


def test_media_types_of_the_files_the_nodes_write():
    assert [media_type(f"a.{ext}") for ext in ("mp4", "webm", "webp", "png", "gif", "mp3", "flac", "opus", "wav")] == [
        "video/mp4", "video/webm", "image/webp", "image/png", "image/gif", "audio/mpeg", "audio/flac", "audio/ogg",
        "audio/wav"]
    assert content_kind("clip.MOV") == "video" and content_kind("x.unknownext") is None

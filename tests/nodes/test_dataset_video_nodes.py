"""The video dataset nodes of ComfyUI's comfy_extras/nodes_dataset.py (2026): tiny videos written
with comfy_core.video's writer into tmp folders, each node called as the executor calls it (list
inputs as lists), its frames checked against the file decoded here with PyAV directly and against
the grey level each frame was written with; plus folder confinement and one workflow through the
executor."""
from __future__ import annotations

import os
from fractions import Fraction

import av
import numpy as np
import pytest
import torch

from comfy_core.video import VideoComponents, VideoFromComponents, VideoFromFile
from comfy_core.video.encode import write_video
from nodes.dataset_video_nodes import (frame_count, frame_rate, load_video_dataset_from_folder,
                                       load_video_text_dataset_from_folder, shuffle_video_dataset,
                                       shuffle_video_text_dataset, video_frame_sample, video_random_temporal_crop,
                                       video_temporal_crop)
from nodes.errors import NodeInputError
from tests.nodes.node_context import folders_env, running_node
from tests.nodes.workflow_2026 import Runner, node

FRAMES = 10
FPS = 8


@pytest.fixture
def env(tmp_path):
    return folders_env(tmp_path)


def grey_level(i: int) -> int:
    return 10 + 24 * i  # frames 0..9: 10 .. 226, 24 apart (far beyond the codec's error)


def grey_frames(count: int = FRAMES, height: int = 32, width: int = 48) -> torch.Tensor:
    """`count` flat grey frames `[T, H, W, 3]`, frame i at `grey_level(i) / 255`."""
    levels = torch.tensor([grey_level(i) for i in range(count)], dtype=torch.float32) / 255.0
    return levels[:, None, None, None].expand(count, height, width, 3).clone()


def write(path, count: int = FRAMES, fps: int = FPS, **kwargs) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_video(str(path), grey_frames(count), Fraction(fps), **kwargs)
    return str(path)


def decoded_rgb24(path: str) -> np.ndarray:
    """Every frame of the file as PyAV decodes it to 8-bit RGB, `[T, H, W, 3]` (the reference)."""
    with av.open(path) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])])


def levels_of(images: torch.Tensor) -> list[int]:
    """The grey level index of each frame, read back from its mean."""
    means = (images.float().mean(dim=(1, 2, 3)) * 255.0).tolist()
    return [round((m - 10) / 24) for m in means]


# -- folders ---------------------------------------------------------------------------------------

def test_load_video_dataset_lists_the_folder_in_name_order_lazily(env):
    folder = env.input_dir / "clips"
    write(folder / "b.mp4", count=3)
    write(folder / "A.MKV", count=4, format="mkv")
    write(folder / "c.webm", count=5, format="webm", codec="av1")
    (folder / "notes.txt").write_text("not a video", encoding="utf-8")
    (folder / "sub.mp4").mkdir()
    with running_node("LoadVideoDataSetFromFolder", env=env):
        (videos,) = load_video_dataset_from_folder("clips")
    assert all(isinstance(v, VideoFromFile) for v in videos)
    assert [os.path.basename(v.get_stream_source()) for v in videos] == ["A.MKV", "b.mp4", "c.webm"]
    assert [frame_count(v) for v in videos] == [4, 3, 5]
    assert [len(decoded_rgb24(v.get_stream_source())) for v in videos] == [4, 3, 5]


def test_load_video_text_dataset_pairs_captions_and_repeats_kohya_folders(env):
    folder = env.input_dir / "set"
    write(folder / "one.mp4", count=2)
    (folder / "one.txt").write_text("  first clip \n", encoding="utf-8")
    write(folder / "two.mov", count=2, format="mp4")  # an .mov name: listed by its extension
    write(folder / "3_dog" / "x.mp4", count=2)
    (folder / "3_dog" / "x.txt").write_text("a dog", encoding="utf-8")
    write(folder / "misc" / "y.mp4", count=2)
    with running_node("LoadVideoTextDataSetFromFolder", env=env):
        videos, texts = load_video_text_dataset_from_folder("set")
    names = [os.path.relpath(v.get_stream_source(), folder) for v in videos]
    assert names == ["3_dog/x.mp4"] * 3 + ["misc/y.mp4", "one.mp4", "two.mov"]
    assert texts == ["a dog"] * 3 + ["", "first clip", ""]


@pytest.mark.parametrize("name", ["../outside", "/etc", "a/../../x"])
def test_folders_outside_the_input_folder_are_refused(env, name):
    write(env.input_dir.parent / "outside" / "v.mp4", count=2)
    with running_node("LoadVideoDataSetFromFolder", env=env), pytest.raises(NodeInputError, match="folder"):
        load_video_dataset_from_folder(name)
    with running_node("LoadVideoTextDataSetFromFolder", env=env), pytest.raises(NodeInputError, match="folder"):
        load_video_text_dataset_from_folder(name)


def test_a_folder_without_videos_is_an_input_error(env):
    (env.input_dir / "empty").mkdir()
    (env.input_dir / "empty" / "a.png").write_bytes(b"")
    with running_node("LoadVideoDataSetFromFolder", env=env), pytest.raises(NodeInputError, match="no video files"):
        load_video_dataset_from_folder("empty")
    with running_node("LoadVideoTextDataSetFromFolder", env=env), pytest.raises(NodeInputError, match="no video"):
        load_video_text_dataset_from_folder("empty")


# -- one video -------------------------------------------------------------------------------------

@pytest.fixture
def clip(tmp_path) -> VideoFromFile:
    return VideoFromFile(write(tmp_path / "clip.mp4"))


def test_frame_count_and_rate_of_a_file_and_of_components(clip):
    assert frame_count(clip) == FRAMES == len(decoded_rgb24(clip.get_stream_source()))
    assert frame_rate(clip) == Fraction(FPS)
    made = VideoFromComponents(VideoComponents(images=grey_frames(6), frame_rate=Fraction(25, 2)))
    assert (frame_count(made), frame_rate(made)) == (6, Fraction(25, 2))


@pytest.mark.parametrize("num_frames, expected", [(4, [0, 3, 6, 9]), (3, [0, 4, 9]), (1, [5]), (50, list(range(10)))])
def test_uniform_sampling_decodes_the_evenly_spaced_frames(clip, num_frames, expected):
    (out,) = video_frame_sample(clip, num_frames, "uniform", 0)
    parts = out.get_components()
    reference = decoded_rgb24(clip.get_stream_source())[expected]
    assert torch.equal(parts.images, torch.from_numpy(reference).float() / 255.0)
    assert levels_of(parts.images) == expected
    assert parts.frame_rate == Fraction(FPS) and parts.audio is None


@pytest.mark.parametrize("seed", [0, 7, 2**32 + 5])
def test_random_sampling_follows_numpys_legacy_generator(clip, seed):
    (out,) = video_frame_sample(clip, 4, "random", seed)
    expected = sorted(np.random.RandomState(seed % (2**32 - 1)).choice(FRAMES, size=4, replace=False).tolist())
    assert levels_of(out.get_components().images) == expected
    reference = decoded_rgb24(clip.get_stream_source())[expected]
    assert torch.equal(out.get_components().images, torch.from_numpy(reference).float() / 255.0)


@pytest.mark.parametrize("strategy, expected", [("head", [0, 1, 2]), ("tail", [7, 8, 9])])
def test_head_and_tail_are_time_trims(clip, strategy, expected):
    (out,) = video_frame_sample(clip, 3, strategy, 0)
    parts = out.get_components()
    assert levels_of(parts.images) == expected
    assert torch.equal(parts.images, clip.get_components().images[expected[0]:expected[-1] + 1])
    assert parts.frame_rate == Fraction(FPS)


def test_sampling_a_video_made_of_components_picks_its_own_frames():
    images = torch.rand(7, 4, 6, 3, generator=torch.Generator().manual_seed(3))
    made = VideoFromComponents(VideoComponents(images=images, frame_rate=Fraction(24)))
    (out,) = video_frame_sample(made, 3, "uniform", 0)
    assert torch.equal(out.get_components().images, images[[0, 3, 6]])
    (out,) = video_frame_sample(made, 2, "tail", 0)
    assert torch.equal(out.get_components().images, images[5:])


@pytest.mark.parametrize("start, length, expected", [(2, 3, [2, 3, 4]), (8, 5, [8, 9]), (40, 4, [9]), (0, 99, list(range(10)))])
def test_temporal_crop_keeps_the_frames_asked_for(clip, start, length, expected):
    (out,) = video_temporal_crop(clip, start, length)
    assert levels_of(out.get_components().images) == expected


@pytest.mark.parametrize("seed, length", [(0, 4), (3, 4), (11, 7), (5, 10), (5, 30)])
def test_random_temporal_crop_draws_its_start_with_the_seed(clip, seed, length):
    (out,) = video_random_temporal_crop(clip, length, seed)
    length = min(length, FRAMES)
    start = np.random.RandomState(seed % (2**32 - 1)).randint(0, FRAMES - length + 1) if length < FRAMES else 0
    assert levels_of(out.get_components().images) == list(range(start, start + length))


def test_trims_keep_the_audio_of_their_window(tmp_path):
    rate = 8000
    tone = torch.linspace(-0.5, 0.5, rate * FRAMES // FPS).reshape(1, 1, -1).repeat(1, 2, 1)
    images = grey_frames()
    made = VideoFromComponents(VideoComponents(images=images, frame_rate=Fraction(FPS),
                                               audio={"waveform": tone, "sample_rate": rate}))
    (out,) = video_temporal_crop(made, 4, 2)
    parts = out.get_components()
    assert torch.equal(parts.images, images[4:6])
    per_frame = rate // FPS
    assert torch.equal(parts.audio["waveform"], tone[..., 4 * per_frame:6 * per_frame])


def test_a_non_video_is_an_input_error():
    with running_node("VideoFrameSample"), pytest.raises(NodeInputError, match="video"):
        video_frame_sample(torch.zeros(2, 4, 4, 3), 2, "uniform", 0)


# -- lists -----------------------------------------------------------------------------------------

def legacy_permutation(seed: int, n: int) -> list[int]:
    np.random.seed(seed % (2**32 - 1))
    return np.random.permutation(n).tolist()


@pytest.mark.parametrize("seed", [0, 42, 2**40])
def test_shuffle_video_dataset_permutes_with_the_seed(seed):
    videos = [object() for _ in range(6)]
    (out,) = shuffle_video_dataset(videos, [seed])
    assert [videos.index(v) for v in out] == legacy_permutation(seed, 6)


def test_shuffle_video_text_dataset_keeps_pairs():
    videos = [object() for _ in range(5)]
    texts = [f"t{i}" for i in range(5)]
    out_videos, out_texts = shuffle_video_text_dataset(videos, texts, [9])
    order = legacy_permutation(9, 5)
    assert [videos.index(v) for v in out_videos] == order
    assert out_texts == [f"t{i}" for i in order]
    with running_node("ShuffleVideoTextDataset"), pytest.raises(NodeInputError, match="texts"):
        shuffle_video_text_dataset(videos, texts[:3], [9])


# -- through the executor --------------------------------------------------------------------------

async def test_a_video_dataset_workflow_runs_per_item(tmp_path):
    runner = Runner(tmp_path)
    folder = runner.env.input_dir / "set"
    write(folder / "a.mp4", count=6)
    write(folder / "b.mp4", count=9)
    (folder / "a.txt").write_text("first", encoding="utf-8")
    prompt = {
        "load": node("LoadVideoTextDataSetFromFolder", folder="set"),
        "shuffle": node("ShuffleVideoTextDataset", videos=["load", 0], texts=["load", 1], seed=1),
        "sample": node("VideoFrameSample", video=["shuffle", 0], num_frames=3, strategy="uniform", seed=0),
        "save": node("SaveVideo", video=["sample", 0], filename_prefix="clips/out", format="mp4"),
    }
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert runner.ran.count("sample") == 2 and runner.ran.count("save") == 2
    saved = sorted((runner.env.output_dir / "clips").iterdir())
    assert len(saved) == 2
    # each saved clip holds the uniform picks of its source: 6 frames -> [0, 2, 5], 9 -> [0, 4, 8]
    picks = sorted(levels_of(torch.from_numpy(decoded_rgb24(str(p))).float() / 255.0) for p in saved)
    assert picks == [[0, 2, 5], [0, 4, 8]]

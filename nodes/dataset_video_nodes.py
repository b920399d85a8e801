"""The video dataset nodes of ComfyUI's comfy_extras/nodes_dataset.py (2026), declared as ComfyUI's
V3 schema renders them (graph/v3_schema.py); behaviour read from that file, written here. The
image ones are in nodes/dataset_nodes.py (whose folder helpers these reuse), the text ones in
nodes/dataset_text_nodes.py.

Folders (a sub-folder of the input folder, confined to it as the image loaders are):
* LoadVideoDataSetFromFolder: the folder's .mp4/.avi/.mov/.webm/.mkv/.flv files (any case), in
  name order, each a lazy `VideoFromFile` (nothing decoded), as a list output.
* LoadVideoTextDataSetFromFolder: the same plus kohya-ss/sd-scripts' layout (a sub-folder
  `<N>_<name>` contributes its videos, name order, N times; any other sub-folder once) and the
  caption `<stem>.txt` beside each video (stripped; "" when missing).
A folder holding no video is an input error (ComfyUI's "No video files found").

Per video (ComfyUI's "lazy VideoInput in/out" nodes), with `total` the video's frame count and
`fps` its frame rate (a file: its header's frame count, else its duration x rate, else the frames
counted by decoding; its average rate):
* VideoFrameSample: `num_frames` (at most `total`) frames. "head" / "tail": the first / last ones,
  as a time trim of the video (audio kept). "uniform": frames `round(i (total - 1) / (n - 1))`
  (one frame: `total // 2`); "random": `n` distinct frames drawn by NumPy's legacy generator
  (`RandomState(seed % (2**32 - 1)).choice(total, n, replace=False)`), sorted. These two decode
  only the chosen frames (a file's as 8-bit RGB, /255) into a silent `VideoFromComponents` at
  the source's frame rate.
* VideoTemporalCrop: `length` frames from `start_frame` (clamped into the video), a time trim.
* VideoRandomTemporalCrop: `length` frames (at most `total`) from a start drawn by
  `RandomState(seed % (2**32 - 1)).randint(0, total - length + 1)` (0 when the clip is the
  whole video), a time trim.
Trims go through comfy_core/video/edit.py (`trimmed`: a VIDEO with its own `as_trimmed`, a pack's,
is asked to trim itself, as ComfyUI asks every VIDEO). Where ComfyUI's trimmed `VideoFromFile`
stays a lazy window on the file, the built-in VIDEOs here are decoded and cut into a
`VideoFromComponents`; the frames and audio are the same.
A VIDEO that is not a file (CreateVideo's) gives its own frames for "uniform"/"random", where
ComfyUI would encode it to H.264 in memory and decode that back (a lossy round trip).

Lists (`is_input_list`): ShuffleVideoDataset / ShuffleVideoTextDataset reorder the videos (and
their texts by the same permutation) by `np.random.seed(seed % (2**32 - 1))`'s permutation of the
videos' count, drawn here on a private legacy generator; fewer texts than videos is an error.
"""
from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path
from typing import Any

from graph.v3_schema import Combo, Int, Output, Socket, String, v3_node
from nodes.dataset_nodes import (LOAD_ALIASES, SEED_MAX, SHUFFLE_ALIASES, _first, _folder_combo, legacy_rng,
                                 read_caption, subfolder)
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_dataset"
VIDEO_EXTENSIONS = (".mp4", ".avi", ".mov", ".webm", ".mkv", ".flv")
LOAD_VIDEO_ALIASES = [alias if alias != "load images" else "load videos" for alias in LOAD_ALIASES]
CROP_VIDEO_ALIASES = ["crop", "crop video", "temporal crop", "truncate video"]
STRATEGIES = ["uniform", "head", "tail", "random"]


# -- folders ---------------------------------------------------------------------------------------

def _is_video_file(path: Path) -> bool:
    return path.name.lower().endswith(VIDEO_EXTENSIONS) and path.is_file()


def _input_folder(folder: Any) -> Path:
    root = subfolder(current_env().input_dir, folder, "folder")
    if not root.is_dir():
        raise NodeInputError("folder", "a sub-folder of the input folder", repr(folder))
    return root


def _no_videos(root: Path) -> NodeInputError:
    return NodeInputError("folder", "a folder holding .mp4, .avi, .mov, .webm, .mkv or .flv videos",
                          f"no video files found in {root}")


def kohya_video_files(root: Path) -> list[Path]:
    """The videos of a caption folder in name order; a sub-folder `<N>_<name>` adds its own
    videos (name order) N times, any other sub-folder once (ComfyUI's kohya-ss layout)."""
    found: list[Path] = []
    for name in sorted(os.listdir(root)):
        path = root / name
        if _is_video_file(path):
            found.append(path)
        elif path.is_dir():
            head = name.split("_")[0]
            repeat = int(head) if head.isdigit() else 1
            found.extend([path / n for n in sorted(os.listdir(path)) if _is_video_file(path / n)] * repeat)
    return found


def _lazy(paths: list[Path]) -> list:
    from comfy_core.video import VideoFromFile

    return [VideoFromFile(str(path)) for path in paths]


_VIDEOS_OUT = Output("VIDEO", "videos", is_list=True,
                     tooltip="Lazy video references; frames are decoded only when needed downstream.")


@v3_node("LoadVideoDataSetFromFolder", display_name="Load Video (from Folder)", category="video",
         python_module=MODULE, experimental=True, search_aliases=LOAD_VIDEO_ALIASES,
         description="Load a dataset of videos from a specified folder and return a list of videos. "
                     "Supported formats: MP4, AVI, MOV, WEBM, MKV, FLV.",
         inputs=[_folder_combo("The folder containing video files.")],
         outputs=[_VIDEOS_OUT])
def load_video_dataset_from_folder(folder: str) -> tuple[list]:
    """Every video file of the input sub-folder `folder`, in name order, as lazy VIDEOs."""
    root = _input_folder(folder)
    paths = [root / name for name in sorted(os.listdir(root)) if _is_video_file(root / name)]
    if not paths:
        raise _no_videos(root)
    return (_lazy(paths),)


@v3_node("LoadVideoTextDataSetFromFolder", display_name="Load Video-Text (from Folder)", category="video",
         python_module=MODULE, experimental=True, search_aliases=LOAD_VIDEO_ALIASES,
         description="Load a dataset of pairs of videos and text captions from a specified folder and return "
                     "them as a list. Supported formats: MP4, AVI, MOV, WEBM, MKV, FLV.",
         inputs=[_folder_combo("The folder containing video files and .txt captions.")],
         outputs=[_VIDEOS_OUT, Output("STRING", "texts", is_list=True, tooltip="List of text captions.")])
def load_video_text_dataset_from_folder(folder: str) -> tuple[list, list]:
    """The videos of the input sub-folder `folder` (kohya repeat folders included) and their captions."""
    root = _input_folder(folder)
    paths = kohya_video_files(root)
    if not paths:
        raise _no_videos(root)
    return (_lazy(paths), [read_caption(path) for path in paths])


# -- one video's frames ----------------------------------------------------------------------------

def _checked_video(value: Any, input_name: str = "video") -> Any:
    # Duck-typed, as ComfyUI: a pack's VIDEO need not subclass VideoInput.
    if not callable(getattr(value, "get_components", None)):
        raise NodeInputError(input_name, "a VIDEO", describe(value))
    return value


def _is_file_video(video: Any) -> bool:
    from comfy_core.video import VideoFromFile

    return isinstance(video, VideoFromFile)


def frame_rate(video: Any) -> Fraction:
    """The VIDEO's frame rate: its own `get_frame_rate()` when it has one (a pack's, ComfyUI's
    VideoInput API); a file's stream average rate, else frames / duration, else 1 (ComfyUI's
    `VideoFromFile.get_frame_rate`); the components' rate otherwise."""
    own = getattr(video, "get_frame_rate", None)
    if callable(own):
        return Fraction(own())
    if not _is_file_video(video):
        return Fraction(video.get_components().frame_rate)
    import av

    from comfy_core.video import decode

    source = video.get_stream_source()
    with decode.opened_video(source) as container:
        stream = decode.video_stream(container, source)
        if stream.average_rate:
            return Fraction(stream.average_rate)
        if stream.frames and container.duration:
            seconds = float(container.duration / av.time_base)
            if seconds > 0:
                return Fraction(stream.frames / seconds).limit_denominator()
    return Fraction(1)


def frame_count(video: Any) -> int:
    """The VIDEO's number of frames without decoding them where the file says (ComfyUI's
    `VideoFromFile.get_frame_count`: the stream's frame count, else its duration x average rate
    rounded, else the frames counted by decoding); a VIDEO's own `get_frame_count()` when it has
    one; the components' frames otherwise."""
    own = getattr(video, "get_frame_count", None)
    if callable(own):
        return int(own())
    if not _is_file_video(video):
        return int(video.get_components().images.shape[0])
    from comfy_core.video import decode

    source = video.get_stream_source()
    with decode.opened_video(source) as container:
        stream = decode.video_stream(container, source)
        if stream.frames and stream.frames > 0:
            return int(stream.frames)
        if stream.duration is not None and stream.time_base is not None and stream.average_rate:
            estimated = int(round(float(stream.duration * stream.time_base) * float(stream.average_rate)))
            if estimated > 0:
                return estimated
        return sum(1 for _ in container.decode(stream))


def decode_frames(video: Any, indices: list[int]) -> Any:
    """The frames `indices` (in that order, repeats allowed) as a silent `VideoFromComponents`
    at the video's frame rate (ComfyUI's `_decode_selected_frames`): a file is decoded once up to
    the last wanted frame, each kept frame as 8-bit RGB / 255; another VIDEO gives its frames."""
    import torch

    from comfy_core.video import VideoComponents, VideoFromComponents, decode

    rate = frame_rate(video)
    if not _is_file_video(video):
        images = video.get_components().images
        picked = images[torch.tensor(indices, dtype=torch.long)]
        return VideoFromComponents(VideoComponents(images=picked, frame_rate=rate))
    wanted = set(indices)
    last = max(wanted)
    found: dict[int, torch.Tensor] = {}
    source = video.get_stream_source()
    with decode.opened_video(source) as container:
        stream = decode.video_stream(container, source)
        for index, frame in enumerate(container.decode(stream)):
            if index in wanted:
                found[index] = torch.from_numpy(frame.to_ndarray(format="rgb24").copy()).float() / 255.0
            if index >= last:
                break
    missing = sorted(wanted - set(found))
    if missing:
        raise NodeInputError("video", f"a video with frame {missing[0]}", f"{len(found)} decodable frames")
    stacked = torch.stack([found[i] for i in indices])  # [n, H, W, 3]
    return VideoFromComponents(VideoComponents(images=stacked, frame_rate=rate))


def _trim_frames(video: Any, start: int, length: int, fps: float) -> Any:
    """Frames [start, start + length) as ComfyUI asks: `as_trimmed(start / fps, length / fps)`."""
    from comfy_core.video.edit import VideoEditError, trimmed

    try:
        return trimmed(video, start / fps, length / fps, strict_duration=False, verb="trim")
    except VideoEditError as error:
        raise NodeInputError("video", "a video holding the frames asked for", str(error)) from error


def _counted(video: Any) -> tuple[int, float]:
    total = frame_count(video)
    if total <= 0:
        raise NodeInputError("video", "a video with at least one frame", "a video with no frames")
    return total, float(frame_rate(video))


_VIDEO_IN = Socket("video", "VIDEO", tooltip="Input video.")


@v3_node("VideoFrameSample", display_name="Sample Video Frame", category="video", python_module=MODULE,
         experimental=True, search_aliases=["sample frames", "extract frames"],
         description="Sample a fixed number of frames from a video using various strategies.",
         inputs=[_VIDEO_IN,
                 Int("num_frames", default=16, min=1, max=9999, tooltip="Number of frames to sample."),
                 Combo("strategy", STRATEGIES, default="uniform",
                       tooltip="uniform: evenly spaced, head: first N, tail: last N, random: random sorted."),
                 Int("seed", default=0, min=0, max=SEED_MAX, tooltip="Random seed (only used with 'random' strategy).")],
         outputs=[Output("VIDEO", "video", tooltip="Sampled video.")])
def video_frame_sample(video: Any, num_frames: int, strategy: str, seed: int) -> tuple[Any]:
    """`num_frames` frames of the video by `strategy` (module docstring)."""
    video = _checked_video(video)
    if strategy not in STRATEGIES:
        raise NodeInputError("strategy", f"one of {STRATEGIES}", repr(strategy))
    total, fps = _counted(video)
    count = min(int(num_frames), total)
    if count < 1:
        raise NodeInputError("num_frames", "at least 1", repr(num_frames))
    if strategy == "head":
        return (_trim_frames(video, 0, count, fps),)
    if strategy == "tail":
        return (_trim_frames(video, total - count, count, fps),)
    if strategy == "uniform":
        indices = [total // 2] if count == 1 else [round(i * (total - 1) / (count - 1)) for i in range(count)]
    else:
        indices = sorted(int(i) for i in legacy_rng(seed).choice(total, size=count, replace=False))
    return (decode_frames(video, indices),)


@v3_node("VideoTemporalCrop", display_name="Crop Video (Temporal)", category="video/transform",
         python_module=MODULE, experimental=True, search_aliases=CROP_VIDEO_ALIASES,
         description="Crop a continuous range of frames from a video.",
         inputs=[_VIDEO_IN,
                 Int("start_frame", default=0, min=0, max=99999, tooltip="Starting frame index."),
                 Int("length", default=16, min=1, max=99999, tooltip="Number of frames to keep.")],
         outputs=[Output("VIDEO", "video", tooltip="Cropped video (lazy).")])
def video_temporal_crop(video: Any, start_frame: int, length: int) -> tuple[Any]:
    """`length` frames from `start_frame`; a start past the end is the last frame, a length past
    the end stops there."""
    video = _checked_video(video)
    total, fps = _counted(video)
    start = min(int(start_frame), max(total - 1, 0))
    return (_trim_frames(video, start, min(int(length), total - start), fps),)


@v3_node("VideoRandomTemporalCrop", display_name="Crop Video (Temporal Random)", category="video/transform",
         python_module=MODULE, experimental=True, search_aliases=CROP_VIDEO_ALIASES + ["random crop"],
         description="Randomly crop a continuous range of frames from a video.",
         inputs=[_VIDEO_IN,
                 Int("length", default=16, min=1, max=99999, tooltip="Number of frames to keep."),
                 Int("seed", default=0, min=0, max=SEED_MAX, tooltip="Random seed.")],
         outputs=[Output("VIDEO", "video", tooltip="Cropped video (lazy).")])
def video_random_temporal_crop(video: Any, length: int, seed: int) -> tuple[Any]:
    """`length` consecutive frames from a start drawn with the seed (module docstring)."""
    video = _checked_video(video)
    total, fps = _counted(video)
    length = min(int(length), total)
    latest = total - length
    start = int(legacy_rng(seed).randint(0, latest + 1)) if latest > 0 else 0
    return (_trim_frames(video, start, length, fps),)


# -- lists -----------------------------------------------------------------------------------------

def _video_list(videos: Any) -> list:
    if not isinstance(videos, list):
        raise NodeInputError("videos", "a list of VIDEOs", describe(videos))
    return list(videos)


@v3_node("ShuffleVideoDataset", display_name="Shuffle Videos List", category="video/batch", python_module=MODULE,
         experimental=True, input_is_list=True, search_aliases=SHUFFLE_ALIASES,
         description="Randomly shuffle the order of videos in a list.",
         inputs=[Socket("videos", "VIDEO", tooltip="List of videos to shuffle."),
                 Int("seed", default=0, min=0, max=SEED_MAX, tooltip="Random seed.")],
         outputs=[Output("VIDEO", "videos", is_list=True, tooltip="Shuffled videos")])
def shuffle_video_dataset(videos: list, seed: list) -> tuple[list]:
    """The videos in the order of NumPy's permutation for `seed`."""
    videos = _video_list(videos)
    order = legacy_rng(_first(seed)).permutation(len(videos))
    return ([videos[i] for i in order],)


@v3_node("ShuffleVideoTextDataset", display_name="Shuffle Pairs of Video-Text", category="video/batch",
         python_module=MODULE, experimental=True, input_is_list=True, search_aliases=SHUFFLE_ALIASES,
         description="Randomly shuffle the order of pairs of video-text in a list.",
         inputs=[Socket("videos", "VIDEO", tooltip="List of videos to shuffle."),
                 String("texts", tooltip="List of texts to shuffle."),
                 Int("seed", default=0, min=0, max=SEED_MAX, tooltip="Random seed.")],
         outputs=[Output("VIDEO", "videos", is_list=True, tooltip="Shuffled videos"),
                  Output("STRING", "texts", is_list=True, tooltip="Shuffled texts")])
def shuffle_video_text_dataset(videos: list, texts: list, seed: list) -> tuple[list, list]:
    """Videos and texts reordered by one permutation (of the videos' count), pairs kept together;
    fewer texts than videos is an error, extra texts are dropped, as in ComfyUI."""
    videos = _video_list(videos)
    texts = list(texts) if isinstance(texts, list) else [texts]
    if len(texts) < len(videos):
        raise NodeInputError("texts", f"a text for each of the {len(videos)} videos", f"{len(texts)} texts")
    order = legacy_rng(_first(seed)).permutation(len(videos))
    return ([videos[i] for i in order], [texts[i] for i in order])

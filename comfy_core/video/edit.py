"""Editing a VIDEO in time and space, as today's ComfyUI does for LoadVideo's `edit` widget,
VideoTrim, VideoCrop and `Video Slice` (comfy_extras/nodes_video.py; `VideoInput.as_trimmed` /
`as_cropped`, `comfy_api`'s `normalize_crop_rect`); written here.

- Trim: the frames whose time `i / fps` falls in `[start, start + duration)` (a negative start
  counts back from the end; duration 0 keeps the rest), the audio samples of the same span; with
  `strict_duration` a window the video cannot fill is an error, a window with no frame always is.
- Crop: ComfyUI's rectangle rule (`crop_rect`): a zero width or height is no crop; the origin is
  clamped into the frame and made even, the size clamped to the frame and made even (4:2:0 video);
  a rectangle that is the whole frame is no crop.

A VIDEO that trims or crops itself (a pack's, with `as_trimmed` / `as_cropped`) is asked to, as
ComfyUI asks; the built-in ones are edited on their components (decoded once) into a
`VideoFromComponents` that keeps the source's bit depth and colour space.
"""
from __future__ import annotations

import math
from typing import Any

from comfy_core.video.from_components import VideoFromComponents
from comfy_core.video.types import VideoComponents

_EPSILON = 1e-6  # frame times are compared with this slack (float seconds x fps)


class VideoEditError(ValueError):
    """A trim window or crop the video cannot give (the message is ComfyUI's)."""


def trim_failed(video_seconds: float, start_time: float, duration: float, verb: str = "slice") -> VideoEditError:
    return VideoEditError(f"Failed to {verb} video:\nSource duration: {video_seconds}\nStart time: {start_time}\n"
                          f"Target duration: {duration}")


def trim_components(components: VideoComponents, start_time: float, duration: float,
                    strict_duration: bool, verb: str = "slice") -> VideoComponents:
    """The components of the window [start, start + duration) (duration 0: to the end)."""
    fps = float(components.frame_rate)
    frames = int(components.images.shape[0])
    total = frames / fps
    start = max(total + start_time, 0.0) if start_time < 0 else start_time
    first = max(0, math.ceil(start * fps - _EPSILON))
    last = frames if duration <= 0 else min(frames, math.ceil((start + duration) * fps - _EPSILON))
    if first >= last or (strict_duration and duration > 0 and start + duration > total + _EPSILON):
        raise trim_failed(total, start_time, duration, verb)
    audio = components.audio
    if isinstance(audio, dict) and "waveform" in audio:
        rate = int(audio["sample_rate"])
        begin = int(round(first / fps * rate))
        end = int(round(last / fps * rate))
        audio = {**audio, "waveform": audio["waveform"][..., begin:end]}
    return VideoComponents(images=components.images[first:last], frame_rate=components.frame_rate, audio=audio,
                           metadata=components.metadata)


def crop_rect(x: int, y: int, width: int, height: int, source_width: int,
              source_height: int) -> tuple[int, int, int, int] | None:
    """(x, y, width, height) to cut from a `source_width` x `source_height` frame, or None for
    no crop (ComfyUI's `normalize_crop_rect`, module docstring)."""
    width, height = int(width), int(height)
    if width <= 0 or height <= 0:
        return None
    x = max(0, min(int(x), source_width - 1))
    y = max(0, min(int(y), source_height - 1))
    x -= x % 2
    y -= y % 2
    width = min(width, source_width - x)
    height = min(height, source_height - y)
    if x == 0 and y == 0 and width == source_width and height == source_height:
        return None
    width -= width % 2
    height -= height % 2
    if width <= 0 or height <= 0:
        return None
    return x, y, width, height


def _rebuilt(video: Any, components: VideoComponents) -> VideoFromComponents:
    """`components` as a VIDEO with `video`'s bit depth and colour space (8-bit sRGB for a pack's
    VIDEO that does not say)."""
    return VideoFromComponents(components, bit_depth=video.get_bit_depth() if hasattr(video, "get_bit_depth") else 8,
                               color_space=video.get_color_space() if hasattr(video, "get_color_space") else "sRGB")


def trimmed(video: Any, start_time: float, duration: float, strict_duration: bool = False,
            verb: str = "slice") -> Any:
    """`video`'s window (module docstring); `verb` names the action in the error ("slice", "trim")."""
    if duration < 0:
        raise VideoEditError(f"Trim duration must be >= 0, got {duration}")
    own = getattr(video, "as_trimmed", None)
    if callable(own):
        result = own(start_time, duration, strict_duration=strict_duration)
        if result is None:
            raise trim_failed(video.get_duration(), start_time, duration, verb)
        return result
    return _rebuilt(video, trim_components(video.get_components(), start_time, duration, strict_duration, verb))


def cropped(video: Any, x: int, y: int, width: int, height: int) -> Any:
    """`video` cut to ComfyUI's rectangle (module docstring); itself when that is no crop."""
    own = getattr(video, "as_cropped", None)
    if callable(own):
        return own(x, y, width, height)
    if int(width) <= 0 or int(height) <= 0:
        return video
    source_width, source_height = video.get_dimensions()
    rect = crop_rect(x, y, width, height, source_width, source_height)
    if rect is None:
        return video
    left, top, w, h = rect
    components = video.get_components()
    return _rebuilt(video, VideoComponents(images=components.images[:, top:top + h, left:left + w],
                                           frame_rate=components.frame_rate, audio=components.audio,
                                           metadata=components.metadata))


def concatenated(videos: list, complete_audio: Any = None) -> VideoFromComponents:
    """`videos` one after the other (ComfyUI's `VideoFromList.get_components`): their frame rates
    and frame sizes must agree; the audio is `complete_audio` (cut to the frames' length) when
    given, else the parts' tracks joined (all or none of them, the same rate and channels).
    Bit depth and colour space are the first part's."""
    import torch

    parts = [video.get_components() for video in videos]
    rate = parts[0].frame_rate
    if any(part.frame_rate != rate for part in parts[1:]):
        raise VideoEditError("Cannot materialize accumulated videos with different frame rates")
    sizes = [tuple(part.images.shape[1:3]) for part in parts]
    if any(size != sizes[0] for size in sizes[1:]):
        details = "; ".join(f"chunk {i} is {w}x{h}" for i, (h, w) in enumerate(sizes) if (h, w) != sizes[0])
        raise VideoEditError(f"Accumulated videos have incompatible frame dimensions: chunk 0 is "
                             f"{sizes[0][1]}x{sizes[0][0]}; {details}")
    images = torch.cat([part.images[..., :3] for part in parts])
    seconds = images.shape[0] / float(rate)
    audio = None
    if complete_audio is not None:
        sample_rate = int(complete_audio["sample_rate"])
        audio = {"waveform": complete_audio["waveform"][..., :round(seconds * sample_rate)], "sample_rate": sample_rate}
    elif any(part.audio is not None for part in parts):
        tracks = [part.audio for part in parts]
        if any(track is None for track in tracks):
            raise VideoEditError("Cannot materialize accumulated videos with missing audio segments")
        sample_rate, channels = int(tracks[0]["sample_rate"]), tracks[0]["waveform"].shape[1]
        if any(int(t["sample_rate"]) != sample_rate or t["waveform"].shape[1] != channels for t in tracks[1:]):
            raise VideoEditError("Cannot materialize accumulated videos with incompatible audio")
        waveform = torch.cat([t["waveform"] for t in tracks], dim=-1)[..., :round(seconds * sample_rate)]
        audio = {"waveform": waveform, "sample_rate": sample_rate}
    return _rebuilt(videos[0], VideoComponents(images=images, frame_rate=rate, audio=audio, metadata=parts[0].metadata))

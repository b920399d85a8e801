"""`Video Slice` ("Trim Video") of ComfyUI's comfy_extras/nodes_video.py (2026), declared as
ComfyUI's V3 schema renders it (graph/v3_schema.py); behaviour read from that file, written here.

The class name has a space, as ComfyUI's. The node keeps `duration` seconds of the video from
`start_time` (a negative start counts back from the end; duration 0 keeps the rest). ComfyUI asks
the VIDEO for `as_trimmed(start_time, duration, strict_duration)`; a VIDEO here that has that
method (a pack's) is asked the same, and the built-in ones are trimmed on their components: the
frames whose time `i / fps` falls in the window, and the audio samples of the same span. With
`strict_duration`, a window that the video cannot fill is an error; a window that holds no frame
always is (ComfyUI's "Failed to slice video").
"""
from __future__ import annotations

import math
from typing import Any

from comfy_core.video.from_components import VideoFromComponents
from comfy_core.video.types import VideoComponents
from graph.v3_schema import Boolean, Float, Output, Socket, v3_node
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_video"
_EPSILON = 1e-6  # frame times are compared with this slack (float seconds x fps)


def _fail(video_seconds: float, start_time: float, duration: float) -> ValueError:
    return ValueError(f"Failed to slice video:\nSource duration: {video_seconds}\nStart time: {start_time}\n"
                      f"Target duration: {duration}")


def trim_components(components: VideoComponents, start_time: float, duration: float,
                    strict_duration: bool) -> VideoComponents:
    """The components of the window [start, start + duration) (duration 0: to the end)."""
    fps = float(components.frame_rate)
    frames = int(components.images.shape[0])
    total = frames / fps
    start = max(total + start_time, 0.0) if start_time < 0 else start_time
    first = max(0, math.ceil(start * fps - _EPSILON))
    last = frames if duration <= 0 else min(frames, math.ceil((start + duration) * fps - _EPSILON))
    if first >= last or (strict_duration and duration > 0 and start + duration > total + _EPSILON):
        raise _fail(total, start_time, duration)
    audio = components.audio
    if isinstance(audio, dict) and "waveform" in audio:
        rate = int(audio["sample_rate"])
        begin = int(round(first / fps * rate))
        end = int(round(last / fps * rate))
        audio = {**audio, "waveform": audio["waveform"][..., begin:end]}
    return VideoComponents(images=components.images[first:last], frame_rate=components.frame_rate, audio=audio)


@v3_node("Video Slice", display_name="Trim Video", category="video", python_module=MODULE,
         essentials_category="Video Tools",
         search_aliases=["trim video duration", "skip first frames", "frame load cap", "start time"],
         inputs=[Socket("video", "VIDEO"),
                 Float("start_time", default=0.0, max=1e5, min=-1e5, step=0.001, tooltip="Start time in seconds"),
                 Float("duration", default=0.0, min=0.0, step=0.001,
                       tooltip="Duration in seconds, or 0 for unlimited duration"),
                 Boolean("strict_duration", default=False,
                         tooltip="If True, when the specified duration is not possible, an error will be raised.")],
         outputs=[Output("VIDEO")])
def video_slice(video: Any, start_time: float, duration: float, strict_duration: bool) -> tuple[Any]:
    """The video's window of `duration` seconds from `start_time`."""
    if duration < 0:
        raise NodeInputError("duration", "seconds >= 0", repr(duration))
    trim = getattr(video, "as_trimmed", None)
    if callable(trim):  # a pack's VIDEO trims itself, as in ComfyUI
        trimmed = trim(start_time, duration, strict_duration=strict_duration)
        if trimmed is None:
            raise _fail(video.get_duration(), start_time, duration)
        return (trimmed,)
    if not callable(getattr(video, "get_components", None)):
        raise NodeInputError("video", "a VIDEO", describe(video))
    return (VideoFromComponents(trim_components(video.get_components(), start_time, duration, strict_duration)),)

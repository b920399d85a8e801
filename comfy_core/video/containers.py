"""Opening video containers with PyAV for reading: a kept BytesIO is rewound each time, and any
PyAV failure while opening or reading (a corrupt, truncated, missing or non-video file) becomes
an `UnreadableVideoError` naming the file (ComfyUI lets PyAV's bare error through)."""
from __future__ import annotations

import io
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from comfy_core.video.errors import UnreadableVideoError

if TYPE_CHECKING:
    from av.container import InputContainer


def rewound(source: Any) -> Any:
    """A BytesIO source is read from its start each time (it is kept and re-read)."""
    if isinstance(source, io.BytesIO):
        source.seek(0)
    return source


@contextmanager
def opened_video(source: Any) -> Iterator[InputContainer]:
    """The container of `source` (a path or a binary stream), open for reading; PyAV's errors
    while opening or reading inside the block become `UnreadableVideoError` naming the file."""
    import av

    try:
        with av.open(rewound(source), mode="r") as container:
            yield container
    except av.FFmpegError as exc:
        raise UnreadableVideoError(source, str(exc)) from exc
    except (EOFError, UnicodeDecodeError) as exc:  # truncated headers, undecodable metadata
        raise UnreadableVideoError(source, f"{type(exc).__name__}: {exc}") from exc


def video_stream(container: InputContainer, source: Any) -> Any:
    streams = container.streams.video
    if not streams:
        raise UnreadableVideoError(source, "it has no video stream")
    return streams[0]


def container_format(source: Any) -> str:
    """FFmpeg's name of the container format (`"mov,mp4,m4a,3gp,3g2,mj2"`, `"matroska,webm"`)."""
    with opened_video(source) as container:
        return container.format.name

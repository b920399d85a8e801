"""Copying a video file's streams into a new container without re-encoding, with new metadata:
ComfyUI's `VideoFromFile.save_to` when the streams can stay as they are. The original tags are
kept unless the new metadata has the key; new values are JSON-encoded unless they are strings;
video, audio and subtitle streams are copied packet by packet (packets without a DTS, the
demuxer's flush markers, are skipped)."""
from __future__ import annotations

import io
import os
from typing import Any

from comfy_core.video.encode import MUXERS, is_path, muxer_options, write_metadata
from comfy_core.video.types import VideoContainer

# The codecs a WebM file may hold, by stream type (ComfyUI's WEBM_STREAM_CODECS).
WEBM_STREAM_CODECS = {"video": {"av1", "vp8", "vp9"}, "audio": {"opus", "vorbis"}, "subtitle": {"webvtt"}}


def output_format(container_format: str | None, wanted: VideoContainer) -> str | None:
    """The one muxer name for writing to a stream: the wanted container, else the first of the
    input's comma list (`"mov,mp4,m4a,..."` -> `"mov"`); None lets PyAV pick from a file name."""
    name = container_format if wanted == VideoContainer.AUTO else MUXERS[wanted]
    return name.split(",")[0].lower() if name else None


def stream_codec(stream: Any) -> str | None:
    """FFmpeg's canonical codec name of a stream (`"av1"` whatever decoder reads it), or None."""
    context = stream.codec_context
    if context is None:
        return None
    return context.codec.canonical_name


def webm_compatible(container: Any) -> bool:
    """Whether every stream may go into a WebM file as it is."""
    for stream in container.streams:
        allowed = WEBM_STREAM_CODECS.get(stream.type)
        if allowed is not None and stream.codec_context is not None and stream_codec(stream) not in allowed:
            return False
    return True


def copy_streams(container: Any, dest: Any, container_format: str, wanted: VideoContainer,
                 metadata: dict | None) -> None:
    import av
    from av.subtitles.stream import SubtitleStream

    kwargs: dict[str, Any] = {"mode": "w"}
    if isinstance(dest, io.IOBase) or not is_path(dest):  # no file name to infer the muxer from
        kwargs["format"] = muxer = output_format(container_format, wanted)
    elif wanted != VideoContainer.AUTO:
        kwargs["format"] = muxer = MUXERS[wanted]
    else:
        muxer = os.path.splitext(os.fsdecode(os.fspath(dest)))[1].lower().lstrip(".")
    kwargs["options"] = muxer_options(dest, muxer)
    with av.open(dest, **kwargs) as output:
        for key, value in container.metadata.items():
            if metadata is None or key not in metadata:
                output.metadata[key] = value
        write_metadata(output, metadata, encode_strings=False)
        mapping = {}
        for stream in container.streams:
            copyable = isinstance(stream, (av.VideoStream, av.AudioStream, SubtitleStream))
            if copyable and stream.codec_context is not None:  # no codec context: no template (ComfyUI skips it)
                mapping[stream] = output.add_stream_from_template(template=stream, opaque=True)
        for packet in container.demux():
            if packet.stream in mapping and packet.dts is not None:
                packet.stream = mapping[packet.stream]
                output.mux(packet)

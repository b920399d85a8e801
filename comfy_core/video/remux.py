"""Copying a video file's streams into a new container without re-encoding, with new metadata:
ComfyUI's `VideoFromFile.save_to` when the container and codec stay (0.3.64). The original tags
are kept unless the new metadata has the key; new values are JSON-encoded unless they are
strings; video, audio and subtitle streams are copied packet by packet (packets without a DTS,
the demuxer's flush markers, are skipped)."""
from __future__ import annotations

import io
from typing import Any

from comfy_core.video.encode import MP4_OPTIONS, write_metadata
from comfy_core.video.types import VideoContainer


def output_format(container_format: str | None, wanted: VideoContainer) -> str | None:
    """The one muxer name for writing to a stream: the wanted container, else the first of the
    input's comma list (`"mov,mp4,m4a,..."` -> `"mov"`); None lets PyAV pick from a file name."""
    name = container_format if wanted == VideoContainer.AUTO else wanted.value
    return name.split(",")[0].lower() if name else None


def copy_streams(container: Any, dest: Any, container_format: str, wanted: VideoContainer,
                 metadata: dict | None) -> None:
    import av
    from av.subtitles.stream import SubtitleStream

    kwargs: dict[str, Any] = {"mode": "w", "options": dict(MP4_OPTIONS)}
    if isinstance(dest, io.IOBase):  # no file name to infer the muxer from
        kwargs["format"] = output_format(container_format, wanted)
    with av.open(dest, **kwargs) as output:
        for key, value in container.metadata.items():
            if metadata is None or key not in metadata:
                output.metadata[key] = value
        write_metadata(output, metadata, encode_strings=False)
        mapping = {}
        for stream in container.streams:
            if isinstance(stream, (av.VideoStream, av.AudioStream, SubtitleStream)):
                mapping[stream] = output.add_stream_from_template(template=stream, opaque=True)
        for packet in container.demux():
            if packet.stream in mapping and packet.dts is not None:
                packet.stream = mapping[packet.stream]
                output.mux(packet)

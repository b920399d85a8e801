"""Writing videos with PyAV, as ComfyUI does: `VideoFromComponents.save_to` (comfy_api/latest/
_input_impl/video_types.py, 2026: H.264 or AV1 in MP4, MKV or WebM, an optional constant-quality
`crf`) and SaveWEBM (VP9 or AV1; comfy_extras/nodes_video.py).

- Container and codec: `auto` container is the file name's (`.mkv`, `.webm`), else MP4; `auto`
  codec is AV1 in WebM, else H.264; WebM takes AV1 only (ComfyUI's `video_output_config`).
  Encoders: H.264 (libx264) and SVT-AV1, 8-bit yuv420p; `crf` goes to the encoder as is (AV1's crf 0 is
  SVT's lossless mode), refused outside the codec's range (H.264 0..51, AV1 0..63).
- Frames become uint8 by `clamp(255 x)` and truncation, as ComfyUI; an alpha channel is dropped.
- The frame rate is rounded to 1/1000 (`Fraction(round(fps * 1000), 1000)`), as ComfyUI.
- Metadata: each value JSON-encoded into the container's tags (MP4 with
  `movflags=use_metadata_tags`, plus `faststart` for a file, so any key survives), so `prompt` /
  `workflow` read back as ComfyUI writes them (Matroska upper-cases the keys).
- Audio is cut to the frames' length (`ceil(rate / fps * frames)` samples) and encoded from one
  packed float frame, mono or stereo as given (ComfyUI's stream defaults to stereo); the first
  item of the batch is the track. AAC in MP4 and MKV at its own rate, Opus at 48 kHz in WebM.
- H.264 and AV1 in 4:2:0 need even sides: ComfyUI hands odd sizes to the encoder, which fails
  with FFmpeg's opaque "Generic error in an external library"; here the same refusal is a
  `VideoEncodingError` that says which side is odd (nothing is cropped behind the user's back).
  Every refusal comes before the file is created.
- Bit depth and colour space (today's CreateVideo / `VideoFromComponents`): 10 bits encode
  yuv420p10le from 16-bit RGB (`clamp(65535 x)` truncated, so the float frames keep their
  precision), 8 bits yuv420p from `clamp(255 x)`; a colour space converts RGB to YCbCr with its
  matrix (BT.709 for sRGB, BT.2020 non-constant for HDR / HDR PQ) and tags the stream and frames
  with its primaries, transfer (sRGB's IEC 61966-2-1, HLG's ARIB STD-B67, PQ's SMPTE 2084) and the
  limited (MPEG) range. The frames are taken as already in that transfer (no tone mapping), as
  ComfyUI. Without a colour space (a file transcoded) nothing is tagged, FFmpeg's default matrix.
"""
from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from comfy_core.video.audio_frames import LAYOUTS, check_audio, packed_frame
from comfy_core.video.errors import UnknownChoiceError, VideoEncodingError
from comfy_core.video.types import (HDR_COLOR_SPACES, VideoCodec, VideoContainer, check_bit_depth,
                                    check_color_space)

if TYPE_CHECKING:
    import numpy as np
    import torch

# SaveWEBM's codec choices and the FFmpeg encoders behind them (ComfyUI's codec_map).
WEBM_ENCODERS = {"vp9": "libvpx-vp9", "av1": "libsvtav1"}
# SaveVideo's codecs and containers: FFmpeg's encoder and muxer names (ComfyUI's VIDEO_ENCODERS,
# VIDEO_CONTAINER_FORMATS) and the crf range of each encoder (SaveVideo's re-encode inputs).
VIDEO_ENCODERS = {VideoCodec.H264: "h264", VideoCodec.AV1: "libsvtav1"}
MUXERS = {VideoContainer.MP4: "mp4", VideoContainer.MKV: "matroska", VideoContainer.WEBM: "webm"}
CRF_RANGES = {VideoCodec.H264: (0, 51), VideoCodec.AV1: (0, 63)}
WEBM_AUDIO_RATE = 48000
BT709_NCL, BT2020_NCL = 1, 9  # FFmpeg's matrix coefficients (AVColorSpace)


def frame_rate_of(fps: Any) -> Fraction:
    """`fps` as the rational rate an encoder gets: rounded to 1/1000, > 0."""
    if isinstance(fps, bool) or not isinstance(fps, (int, float, Fraction)) or not fps > 0 or not math.isfinite(fps):
        raise VideoEncodingError(f"the frame rate must be a number > 0, received {fps!r}")
    rate = Fraction(round(fps * 1000), 1000)
    if rate <= 0:
        raise VideoEncodingError(f"the frame rate {fps!r} rounds to 0 at 1/1000")
    return rate


def _rgb(images: Any) -> np.ndarray:
    """IMAGE frames `[T, H, W, C]` (C >= 3) as float32 RGB `[T, H, W, 3]` on the CPU (checked)."""
    import torch

    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[-1] < 3 or 0 in images.shape:
        raise VideoEncodingError("frames must be an IMAGE tensor [frames, height, width, 3 or 4] with at least one "
                                 f"frame, received {type(images).__name__} of shape {list(getattr(images, 'shape', []))}")
    return images[..., :3].detach().to("cpu", torch.float32).numpy()


def frames_uint8(images: Any) -> np.ndarray:
    """IMAGE frames `[T, H, W, C]` (C >= 3) as uint8 RGB `[T, H, W, 3]` (`clamp(255 x)` truncated)."""
    import numpy as np

    return np.clip(255.0 * _rgb(images), 0, 255).astype(np.uint8)


def frames_uint16(images: Any) -> np.ndarray:
    """IMAGE frames `[T, H, W, C]` (C >= 3) as uint16 RGB `[T, H, W, 3]` (`clamp(65535 x)` truncated)."""
    import numpy as np

    return np.clip(65535.0 * _rgb(images), 0, 65535).astype(np.uint16)


def check_even_sides(width: int, height: int, codec: str) -> None:
    odd = [f"{name} {value}" for name, value in (("width", width), ("height", height)) if value % 2]
    if odd:
        raise VideoEncodingError(f"{codec} in 4:2:0 chroma needs an even width and height; {' and '.join(odd)} "
                                 f"is odd (frames are {width}x{height}): crop or scale the frames first")


# SVT-AV1 (the build in PyAV's wheels) writes outside its buffers for narrow frames: measured by
# encoding AVIF stills and sequences under glibc's malloc checking, PyAV 18.1.0's build corrupts
# the heap at widths 4-24 and not at 25-48, 18.1.1's at width 8 and not at 16 (heights down to 4
# are fine with both). A corrupted heap aborts the process at a later, unrelated allocation: a
# server would die. Narrower frames are refused before the encoder opens, with a margin.
SVT_AV1_MIN_WIDTH = 32


def check_svt_av1_width(width: int, what: str = "AV1") -> None:
    """Refuse a frame SVT-AV1 would encode by corrupting memory (see SVT_AV1_MIN_WIDTH)."""
    if width < SVT_AV1_MIN_WIDTH:
        raise VideoEncodingError(f"{what} (the SVT-AV1 encoder) needs frames at least {SVT_AV1_MIN_WIDTH} pixels "
                                 f"wide; these are {width}: scale or pad the images first")


def write_metadata(container: Any, metadata: dict | None, *, encode_strings: bool = True) -> None:
    """Container tags from `metadata`: values JSON-encoded (strings too, unless `encode_strings`
    is false, as ComfyUI's remux keeps them)."""
    for key, value in (metadata or {}).items():
        container.metadata[str(key)] = value if isinstance(value, str) and not encode_strings else json.dumps(value)


def is_path(dest: Any) -> bool:
    return isinstance(dest, (str, bytes)) or hasattr(dest, "__fspath__")


def resolve_output(dest: Any, format: Any, codec: Any) -> tuple[VideoContainer, VideoCodec]:  # noqa: A002
    """The container and codec a file gets: `auto` container from `dest`'s extension (`.mkv`,
    `.webm`) else MP4, `auto` codec AV1 in WebM else H.264; WebM with H.264 is refused."""
    import os

    format, codec = VideoContainer.parse(format), VideoCodec.parse(codec)
    if format == VideoContainer.AUTO:
        extension = os.path.splitext(os.fsdecode(os.fspath(dest)))[1].lower() if is_path(dest) else ""
        format = {".mkv": VideoContainer.MKV, ".webm": VideoContainer.WEBM}.get(extension, VideoContainer.MP4)
    if codec == VideoCodec.AUTO:
        codec = VideoCodec.AV1 if format == VideoContainer.WEBM else VideoCodec.H264
    if format == VideoContainer.WEBM and codec != VideoCodec.AV1:
        raise UnknownChoiceError("video codec for a WebM file", codec.value,
                                 [VideoCodec.AUTO.value, VideoCodec.AV1.value])
    return format, codec


def check_crf(crf: Any, codec: VideoCodec) -> float | None:
    """`crf` as a number in the codec's range (None: the encoder's default quality)."""
    if crf is None:
        return None
    low, high = CRF_RANGES[codec]
    if isinstance(crf, bool) or not isinstance(crf, (int, float)) or not low <= crf <= high:
        raise VideoEncodingError(f"crf for {codec.value} must be a number in {low}..{high}, received {crf!r}")
    return crf


def encoder_options(codec: VideoCodec, crf: float | None) -> dict[str, str]:
    """The encoder's options for a constant quality `crf` (ComfyUI's `video_encoder_options`)."""
    if crf is None:
        return {}
    if codec == VideoCodec.AV1 and crf == 0:
        return {"svtav1-params": "lossless=1"}
    return {"crf": str(crf)}


def muxer_options(dest: Any, muxer: str) -> dict[str, str]:
    """MP4 / MOV keep any metadata key; a file also gets its index up front (ComfyUI's faststart,
    which reopens the file by name, so not for a stream)."""
    if muxer not in ("mp4", "mov"):
        return {}
    return {"movflags": "use_metadata_tags+faststart" if is_path(dest) else "use_metadata_tags"}


def _audio_track(audio: Any, rate: Fraction, count: int, container: VideoContainer) -> tuple[Any, int] | None:
    """The first item's waveform `[C, S]` cut to the frames' length, at the rate its encoder gets."""
    if audio is None:
        return None
    from comfy_core.video.audio_resample import resample

    waveform, sample_rate = check_audio(audio)
    if waveform.shape[1] not in LAYOUTS:  # refused before any file is created
        raise VideoEncodingError(f"audio must have 1 (mono) or 2 (stereo) channels, received {waveform.shape[1]}")
    track = waveform[:1, :, :math.ceil(sample_rate / rate * count)]
    if container == VideoContainer.WEBM and sample_rate != WEBM_AUDIO_RATE:  # Opus takes 48 kHz
        track, sample_rate = resample(track, sample_rate, WEBM_AUDIO_RATE), WEBM_AUDIO_RATE
    return track[0], sample_rate


def set_color_properties(target: Any, color_space: str) -> None:
    """Tag a codec context or a frame with `color_space`'s primaries, transfer, matrix and range."""
    from av.video.reformatter import ColorPrimaries, ColorRange, ColorTrc

    hdr = color_space in HDR_COLOR_SPACES
    target.color_primaries = ColorPrimaries.BT2020 if hdr else ColorPrimaries.BT709
    target.color_trc = {"sRGB": ColorTrc.IEC61966_2_1, "HDR": ColorTrc.ARIB_STD_B67,
                        "HDR PQ": ColorTrc.SMPTE2084}[color_space]
    target.colorspace = BT2020_NCL if hdr else BT709_NCL
    target.color_range = ColorRange.MPEG


def write_video(dest: Any, images: Any, frame_rate: Any, audio: Any = None, metadata: dict | None = None, *,
                format: Any = VideoContainer.AUTO, codec: Any = VideoCodec.AUTO,  # noqa: A002
                crf: float | None = None, source_tags: dict | None = None, encode_strings: bool = True,
                bit_depth: int = 8, color_space: str | None = None) -> None:
    """`images` at `frame_rate` in the container and codec asked for (`resolve_output`), with
    `audio`, into `dest` (a path, or a binary stream), at 10 bits for a `bit_depth` of 10 or more (else 8), tagged with
    `color_space` (module docstring). `source_tags` (a decoded file's tags) are written first, as
    they are; `metadata` over them, JSON-encoded (strings too unless `encode_strings` is false)."""
    import av

    container, codec = resolve_output(dest, format, codec)
    crf = check_crf(crf, codec)
    bit_depth = check_bit_depth(bit_depth)
    if color_space is not None:
        check_color_space(color_space)
    ten_bit = bit_depth >= 10
    pixels = frames_uint16(images) if ten_bit else frames_uint8(images)
    pix_fmt, rgb_format = ("yuv420p10le", "rgb48le") if ten_bit else ("yuv420p", "rgb24")
    matrix = None if color_space is None else (BT2020_NCL if color_space in HDR_COLOR_SPACES else BT709_NCL)
    count, height, width = pixels.shape[:3]
    check_even_sides(width, height, "H.264" if codec == VideoCodec.H264 else "AV1")
    if codec == VideoCodec.AV1:
        check_svt_av1_width(width)
    rate = frame_rate_of(frame_rate)
    track = _audio_track(audio, rate, count, container)
    muxer = MUXERS[container]
    with av.open(dest, mode="w", format=muxer, options=muxer_options(dest, muxer)) as output:
        for key, value in (source_tags or {}).items():
            if metadata is None or key not in metadata:
                output.metadata[key] = value
        write_metadata(output, metadata, encode_strings=encode_strings)
        stream = output.add_stream(VIDEO_ENCODERS[codec], rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        stream.options = encoder_options(codec, crf)
        if color_space is not None:
            set_color_properties(stream.codec_context, color_space)
        # The track's own layout: ComfyUI leaves PyAV's default (stereo), which turns mono into two channels.
        audio_stream = None
        if track is not None:
            encoder = "libopus" if container == VideoContainer.WEBM else "aac"
            layout = LAYOUTS.get(int(track[0].shape[0]), "stereo")
            audio_stream = output.add_stream(encoder, rate=track[1], layout=layout)
        for frame in pixels:
            picture = av.VideoFrame.from_ndarray(frame, format=rgb_format).reformat(format=pix_fmt,
                                                                                  dst_colorspace=matrix)
            if color_space is not None:
                set_color_properties(picture, color_space)
            output.mux(stream.encode(picture))
        output.mux(stream.encode(None))
        if audio_stream is not None:
            output.mux(audio_stream.encode(packed_frame(*track)))
            output.mux(audio_stream.encode(None))


def write_mp4(dest: Any, images: Any, frame_rate: Any, audio: Any = None, metadata: dict | None = None) -> None:
    """`images` at `frame_rate` as H.264 (yuv420p) in MP4, with `audio` as AAC, into `dest`
    (a path, or a binary stream): 0.3.64's only VIDEO file."""
    write_video(dest, images, frame_rate, audio, metadata, format=VideoContainer.MP4, codec=VideoCodec.H264)


def write_webm(dest: Any, images: Any, codec: str, fps: Any, crf: float, metadata: dict | None = None) -> None:
    """SaveWEBM's file: `images` as VP9 (yuv420p) or AV1 (yuv420p10le, SVT preset 6) at
    constant quality `crf`, metadata values JSON-encoded."""
    import av

    if codec not in WEBM_ENCODERS:
        raise UnknownChoiceError("WEBM codec", codec, list(WEBM_ENCODERS))
    pixels = frames_uint8(images)
    height, width = pixels.shape[1:3]
    if codec == "av1":
        check_even_sides(width, height, "AV1")
        check_svt_av1_width(width)
    rate = frame_rate_of(fps)
    kwargs = {} if isinstance(dest, (str, bytes)) or hasattr(dest, "__fspath__") else {"format": "webm"}
    with av.open(dest, mode="w", **kwargs) as output:
        write_metadata(output, metadata)
        stream = output.add_stream(WEBM_ENCODERS[codec], rate=rate)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p10le" if codec == "av1" else "yuv420p"
        stream.bit_rate = 0
        stream.options = {"crf": str(crf), **({"preset": "6"} if codec == "av1" else {})}
        for frame in pixels:
            output.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        output.mux(stream.encode(None))

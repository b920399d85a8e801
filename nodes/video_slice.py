"""Today's video editing nodes of ComfyUI's comfy_extras/nodes_video.py: `Video Slice` ("Trim
Video"), VideoTrim and VideoCrop (the editor's VIDEO_EDIT widget: a trim window, a crop rectangle)
and ConcatenateVideo, declared as ComfyUI's V3 schema renders them (graph/v3_schema.py); behaviour
read from that file, written here (the edits themselves: comfy_core/video/edit.py).

ConcatenateVideo: the videos in socket order, one after the other (their frame rates, sizes and
audio must agree; `complete_audio` replaces their tracks, cut to the frames' length), encoded with
`codec` into a Matroska file in memory as ComfyUI's `VideoFromList` encodes a video that is no
file (here every part is decoded and the whole re-encoded, where ComfyUI copies compatible file
streams as they are).

The class name has a space, as ComfyUI's. The node keeps `duration` seconds of the video from
`start_time` (a negative start counts back from the end; duration 0 keeps the rest). ComfyUI asks
the VIDEO for `as_trimmed(start_time, duration, strict_duration)`; a VIDEO here that has that
method (a pack's) is asked the same, and the built-in ones are trimmed on their components: the
frames whose time `i / fps` falls in the window, and the audio samples of the same span
(comfy_core/video/edit.py). With `strict_duration`, a window that the video cannot fill is an
error; a window that holds no frame always is (ComfyUI's "Failed to slice video").
"""
from __future__ import annotations

from typing import Any

from graph.spec import OPTIONAL, REQUIRED
from graph.v3_schema import Autogrow, Boolean, Combo, Float, FrontendWidget, Output, Socket, v3_node
from nodes._media_files import preview_video
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_video"
CODECS = ["auto", "h264", "av1"]  # comfy_core.video.VideoCodec.as_input()
TRIM_DEFAULT = {"start_time": 0.0, "duration": 0.0}
CROP_DEFAULT = {"x": 0, "y": 0, "width": 0, "height": 0}


def video_edit_widget(name: str, features: tuple[str, ...], tooltip: str, *, optional: bool = False) -> FrontendWidget:
    """V3's `VideoEdit.Input`: the editor's VIDEO_EDIT widget (socketless), its value
    `{"trim": {...}, "crop": {...}}` for the `features` it shows."""
    default = {**({"trim": dict(TRIM_DEFAULT)} if "trim" in features else {}),
               **({"crop": dict(CROP_DEFAULT)} if "crop" in features else {})}
    return FrontendWidget(name, "VIDEO_EDIT", OPTIONAL if optional else REQUIRED,
                          {"tooltip": tooltip, "default": default, "socketless": True, "features": list(features)})


def edit_section(value: Any, section: str, input_name: str) -> dict:
    """The `trim` / `crop` part of a VIDEO_EDIT value ({} when absent), its numbers checked."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise NodeInputError(input_name, "a video edit ({'trim': {...}, 'crop': {...}})", describe(value))
    part = value.get(section) or {}
    keys = TRIM_DEFAULT if section == "trim" else CROP_DEFAULT
    if not isinstance(part, dict) or any(isinstance(part.get(k, 0), bool) or not isinstance(part.get(k, 0), (int, float))
                                         for k in keys):
        raise NodeInputError(input_name, f"a video edit whose {section} has numbers {sorted(keys)}", repr(part)[:200])
    return part


def apply_edit(video: Any, edit: Any, input_name: str = "edit", strict_duration: bool = False,
               verb: str = "trim") -> Any:
    """`video` trimmed then cropped as a VIDEO_EDIT value says (ComfyUI's apply_video_trim /
    apply_video_crop); the same object when it says nothing."""
    from comfy_core.video.edit import cropped, trimmed

    trim, crop = edit_section(edit, "trim", input_name), edit_section(edit, "crop", input_name)
    start, duration = float(trim.get("start_time", 0.0)), float(trim.get("duration", 0.0))
    if start != 0.0 or duration != 0.0:
        video = trimmed(video, start, duration, strict_duration, verb)
    return cropped(video, int(crop.get("x", 0)), int(crop.get("y", 0)), int(crop.get("width", 0)),
                   int(crop.get("height", 0)))


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
    """The video's window of `duration` seconds from `start_time` (comfy_core/video/edit.py)."""
    from comfy_core.video.edit import trimmed

    if duration < 0:
        raise NodeInputError("duration", "seconds >= 0", repr(duration))
    return (trimmed(_video(video), start_time, duration, strict_duration),)


def _video(value: Any) -> Any:
    if not callable(getattr(value, "as_trimmed", None)) and not callable(getattr(value, "get_components", None)):
        raise NodeInputError("video", "a VIDEO", describe(value))
    return value


_EDIT_NODE = dict(category="video", python_module=MODULE, experimental=True, output_node=True,
                  essentials_category="Video Tools", has_intermediate_output=True)


@v3_node("VideoTrim", display_name="Trim Video (Advanced)",
         search_aliases=["trim video duration", "skip first frames", "cut video", "start time"], **_EDIT_NODE,
         inputs=[Socket("video", "VIDEO"),
                 video_edit_widget("trim", ("trim",), "Trim window in seconds. Duration 0 keeps the video until the end."),
                 Boolean("strict_duration", default=False, advanced=True,
                         tooltip="If True, when the specified duration is not possible, an error will be raised.")],
         outputs=[Output("VIDEO")])
def video_trim(video: Any, trim: Any, strict_duration: bool = False, **_hidden: Any) -> dict:
    """The trim window of the editor's widget, previewed."""
    trimmed_video = apply_edit(_video(video), {"trim": edit_section(trim, "trim", "trim")}, "trim", strict_duration)
    return {"ui": preview_video(trimmed_video), "result": (trimmed_video,)}


@v3_node("VideoCrop", display_name="Crop Video", search_aliases=["crop video", "cut region", "spatial crop"],
         **_EDIT_NODE,
         inputs=[Socket("video", "VIDEO"),
                 video_edit_widget("crop", ("crop",), "Crop region in pixels. Zero width/height keeps the full frame.")],
         outputs=[Output("VIDEO")])
def video_crop(video: Any, crop: Any, **_hidden: Any) -> dict:
    """The crop rectangle of the editor's widget, previewed."""
    cropped_video = apply_edit(_video(video), {"crop": edit_section(crop, "crop", "crop")}, "crop")
    return {"ui": preview_video(cropped_video), "result": (cropped_video,)}


@v3_node("ConcatenateVideo", display_name="Concatenate Video", category="video", python_module=MODULE,
         essentials_category="Video Tools", input_is_list=True,
         description="Concatenates videos in order without decoding compatible encoded inputs.",
         inputs=[Autogrow("videos", Socket("video", "VIDEO", tooltip="A video segment to append."), prefix="video",
                          min=1, max=100, tooltip="Video segments to concatenate in input order."),
                 Combo("codec", CODECS, default="auto", advanced=True,
                       tooltip="Codec used to encode videos tensors. Auto uses H.264; already encoded videos remain "
                               "unchanged."),
                 Socket("complete_audio", "AUDIO", optional=True, advanced=True,
                        tooltip="Optional complete soundtrack for the concatenated video. Overrides audio carried by "
                                "the input videos.")],
         outputs=[Output("VIDEO", tooltip="The concatenated video.")])
def concatenate_video(videos: dict, codec: Any = None, complete_audio: Any = None) -> tuple[Any]:
    """See the module docstring."""
    import io

    from comfy_core.video import VideoContainer, VideoFromFile
    from comfy_core.video.edit import concatenated

    parts = [_video(video) for group in videos.values() for video in group]
    if not parts:
        raise NodeInputError("videos", "at least one VIDEO", "none")
    codec = (codec or ["auto"])[0]
    if codec not in CODECS:
        raise NodeInputError("codec", f"one of {CODECS}", repr(codec))
    audio = complete_audio[0] if complete_audio else None
    whole = concatenated(parts, audio)
    buffer = io.BytesIO()
    whole.save_to(buffer, format=VideoContainer.MKV, codec=codec)
    return (VideoFromFile(buffer),)

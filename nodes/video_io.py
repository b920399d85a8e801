"""The video nodes of ComfyUI's comfy_extras/nodes_video.py (0.3.64): LoadVideo, SaveVideo,
CreateVideo, GetVideoComponents, SaveWEBM. Thin: the VIDEO values and the encoding live in
comfy_core.video (PyAV).

- VIDEO is a `comfy_core.video.VideoInput`: LoadVideo gives a lazy `VideoFromFile` (nothing is
  decoded until frames are asked for), CreateVideo a `VideoFromComponents`.
- SaveVideo writes `<prefix>_00001_.mp4` in the output folder (ComfyUI's counter; `%width%` /
  `%height%` are the video's) and returns ComfyUI's `ui.PreviewVideo` record,
  `{"images": [{filename, subfolder, type}], "animated": (True,)}`, which the editor previews.
  A file video in its own container and codec is copied stream by stream, not re-encoded.
- Metadata: SaveVideo writes the workflow (each `extra_pnginfo` key) and `prompt` as JSON tags,
  SaveWEBM `prompt` then the extra keys, as ComfyUI; `--disable-metadata` drops them for both
  (ComfyUI's SaveWEBM ignores the flag; honoured here).
- Today's ComfyUI: SaveVideo passes its VIDEO on (output `video`), SaveWEBM its images (`images`).
- LoadVideo's validation decodes the first frame, so a corrupt or non-video file refuses the
  prompt (a 400 naming the file) instead of failing later in a downstream node; change detection
  is the file's mtime, as ComfyUI.
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graph.native import Combo, Float, Hidden, Input, Output, node
from nodes.checks import choice, image_batch  # not `from nodes import checks`: see _media_files
from nodes._media_files import input_files_of, media_errors, modification_time, validate_file
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe, image_input_errors
from nodes.image import annotated_path

if TYPE_CHECKING:
    import torch

# PyAV and torch are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import them (server start-up).

MODULE = "comfy_extras.nodes_video"
CATEGORY = "image/video"
CONTAINERS = ["auto", "mp4"]  # comfy_core.video.VideoContainer.as_input()
CODECS = ["auto", "h264"]  # comfy_core.video.VideoCodec.as_input()
WEBM_CODECS = ["vp9", "av1"]
PREFIX_TIP = ("The prefix for the file to save. This may include formatting information such as "
              "%date:yyyy-MM-dd% or %Empty Latent Image.width% to include values from nodes.")
list_input_videos = input_files_of(("video",))


def _location(filename_prefix: Any, width: int, height: int) -> tuple[Path, str, int, str]:
    from comfy_core.image.file_names import save_location

    if not isinstance(filename_prefix, str):
        raise NodeInputError("filename_prefix", "a STRING", describe(filename_prefix))
    with image_input_errors():
        return save_location(Path(current_env().output_dir), filename_prefix, width, height)


def _video(value: Any) -> Any:
    # Duck-typed, as ComfyUI: a pack's own VIDEO class need not subclass VideoInput.
    if not all(callable(getattr(value, name, None)) for name in ("get_components", "get_dimensions", "save_to")):
        raise NodeInputError("video", "a VIDEO (from LoadVideo or CreateVideo)", describe(value))
    return value


def _saved(name: str, subfolder: str) -> dict:
    return {"ui": {"images": [{"filename": name, "subfolder": subfolder, "type": "output"}], "animated": (True,)}}


def _probe_video(path: str) -> Any:
    from comfy_core.video.decode import probe

    return probe(path)


def video_exists(file: str) -> bool | str:
    return validate_file(file, "file", "video", probe=_probe_video)


def video_fingerprint(file: str, **_: Any) -> float:
    return modification_time(file, "file")


@node("LoadVideo", category=CATEGORY, display_name="Load Video", python_module=MODULE,
      inputs=[Combo("file", list_input_videos, video_upload=True)],
      outputs=[Output("VIDEO")], is_changed=video_fingerprint, validate_inputs=video_exists)
def load_video(file: str) -> tuple[Any]:
    """The file as a lazy VIDEO (its frames are decoded when a node asks for them)."""
    from comfy_core.video import VideoFromFile

    return (VideoFromFile(str(annotated_path(current_env(), file, input_name="file"))),)


# Today's ComfyUI passes the video on (an output "video", "The input video, unchanged."): templates go on
# from it (Wan-Animate-2's "Video Stitch" subgraph). Its 2026 inputs (a `format` DynamicCombo of
# auto / mp4 / mkv / webm, each with a `codec` DynamicCombo and an h264 / av1 re-encode `crf`) are
# not built here yet: this keeps 0.3.64's format / codec combos.
@node("SaveVideo", category=CATEGORY, display_name="Save Video", output_node=True, python_module=MODULE,
      description="Saves the input images to your ComfyUI output directory.",
      outputs=[Output("VIDEO", "video", tooltip="The input video, unchanged.")],
      inputs=[Input("video", "VIDEO", tooltip="The video to save."),
              Input("filename_prefix", "STRING", default="video/ComfyUI", multiline=False, tooltip=PREFIX_TIP),
              Combo("format", CONTAINERS, default="auto", tooltip="The format to save the video as."),
              Combo("codec", CODECS, default="auto", tooltip="The codec to use for the video."),
              Hidden("prompt", "PROMPT"), Hidden("extra_pnginfo", "EXTRA_PNGINFO")])
def save_video(video: Any, filename_prefix: str, format: str, codec: str,  # noqa: A002
               prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    from comfy_core.video import VideoCodec, VideoContainer

    video = _video(video)
    with media_errors("format"):
        extension = VideoContainer.get_extension(format)
    with media_errors("codec"):
        VideoCodec.parse(codec)
    with media_errors("video"):
        width, height = video.get_dimensions()
    folder, filename, counter, subfolder = _location(filename_prefix, width, height)
    metadata = None
    if not current_env().disable_metadata:
        values = dict(extra_pnginfo) if isinstance(extra_pnginfo, dict) else {}
        if prompt is not None:
            values["prompt"] = prompt
        metadata = values or None
    name = f"{filename}_{counter:05}_.{extension}"
    with media_errors("video"):
        video.save_to(str(folder / name), format=format, codec=codec, metadata=metadata)
    return {**_saved(name, subfolder), "result": (video,)}


@node("CreateVideo", category=CATEGORY, display_name="Create Video", python_module=MODULE,
      description="Create a video from images.",
      inputs=[Input("images", "IMAGE", tooltip="The images to create a video from."),
              Float("fps", default=30.0, min=1.0, max=120.0, step=1.0),
              Input("audio", "AUDIO", optional=True, tooltip="The audio to add to the video.")],
      outputs=[Output("VIDEO")])
def create_video(images: torch.Tensor, fps: float, audio: Any = None) -> tuple[Any]:
    """A VIDEO of the frames at `fps`, with `audio` as its track."""
    from comfy_core.video import VideoComponents, VideoFromComponents
    from comfy_core.video.audio_frames import check_audio

    images = image_batch(images)
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        raise NodeInputError("fps", "a FLOAT > 0", repr(fps))
    if audio is not None:
        with media_errors("audio"):
            check_audio(audio)
    return (VideoFromComponents(VideoComponents(images=images, audio=audio, frame_rate=Fraction(fps))),)


@node("GetVideoComponents", category=CATEGORY, display_name="Get Video Components", python_module=MODULE,
      description="Extracts all components from a video: frames, audio, and framerate.",
      inputs=[Input("video", "VIDEO", tooltip="The video to extract components from.")],
      outputs=[Output("IMAGE", "images"), Output("AUDIO", "audio"), Output("FLOAT", "fps")])
def get_video_components(video: Any) -> tuple[Any, Any, float]:
    """Frames `[T, H, W, 3]`, the audio (None without a track) and the frame rate."""
    with media_errors("video"):
        components = _video(video).get_components()
    return components.images, components.audio, float(components.frame_rate)


# Today's SaveWEBM passes its images on (an IMAGE output "images").
@node("SaveWEBM", category=CATEGORY, display_name=None, experimental=True, output_node=True, python_module=MODULE,
      outputs=[Output("IMAGE", "images")],
      inputs=[Input("images", "IMAGE"), Input("filename_prefix", "STRING", default="ComfyUI", multiline=False),
              Combo("codec", WEBM_CODECS),
              Float("fps", default=24.0, min=0.01, max=1000.0, step=0.01),
              Float("crf", default=32.0, min=0, max=63.0, step=1,
                    tooltip="Higher crf means lower quality with a smaller file size, lower crf means higher quality "
                            "higher filesize."),
              Hidden("prompt", "PROMPT"), Hidden("extra_pnginfo", "EXTRA_PNGINFO")])
def save_webm(images: torch.Tensor, filename_prefix: str, codec: str, fps: float, crf: float,
              prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """The batch as a WEBM, VP9 or AV1 at constant quality `crf`."""
    from comfy_core.video.encode import write_webm

    images = image_batch(images)
    codec = choice(codec, WEBM_CODECS, "codec")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        raise NodeInputError("fps", "a FLOAT > 0", repr(fps))
    if isinstance(crf, bool) or not isinstance(crf, (int, float)) or not 0 <= crf <= 63:
        raise NodeInputError("crf", "a FLOAT in 0..63", repr(crf))
    folder, filename, counter, subfolder = _location(filename_prefix, int(images.shape[2]), int(images.shape[1]))
    metadata: dict = {}
    if not current_env().disable_metadata:
        if prompt is not None:
            metadata["prompt"] = prompt
        if isinstance(extra_pnginfo, dict):
            metadata.update(extra_pnginfo)
    name = f"{filename}_{counter:05}_.webm"
    with media_errors("images"):
        write_webm(str(folder / name), images, codec, fps, crf, metadata)
    return {**_saved(name, subfolder), "result": (images,)}


__all__ = ["load_video", "save_video", "create_video", "get_video_components", "save_webm"]

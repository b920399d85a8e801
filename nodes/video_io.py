"""The video nodes of ComfyUI's comfy_extras/nodes_video.py (0.3.64; SaveVideo 2026): LoadVideo, SaveVideo,
CreateVideo, GetVideoComponents, SaveWEBM. Thin: the VIDEO values and the encoding live in
comfy_core.video (PyAV).

- VIDEO is a `comfy_core.video.VideoInput`: LoadVideo gives a lazy `VideoFromFile` (nothing is
  decoded until frames are asked for), CreateVideo a `VideoFromComponents`.
- SaveVideo is today's (2026, V3 schema): a `format` dynamic combo (auto / mp4 / mkv / webm), each
  option with its `codec` dynamic combo (auto / h264 / av1; WebM auto / av1), each codec with an
  `encoding` mode (auto, or re-encode at a `crf`); `auto` is WebM for AV1 and MP4 otherwise. A
  hidden top-level `codec` takes 0.3.64's flat prompts (`format: "mp4", codec: "h264"`), which
  still run. It writes `<prefix>_00001_.<ext>` in the output folder (ComfyUI's counter;
  `%width%` / `%height%` are the video's) and returns ComfyUI's `ui.PreviewVideo` record,
  `{"images": [{filename, subfolder, type}], "animated": (True,)}`, which the editor previews.
  A file video whose streams fit the choice (and no crf asked) is copied stream by stream.
- Metadata: SaveVideo writes the workflow (each `extra_pnginfo` key) and `prompt` as JSON tags,
  SaveWEBM `prompt` then the extra keys, as ComfyUI; `--disable-metadata` drops them for both
  (ComfyUI's SaveWEBM ignores the flag; honoured here).
- Today's ComfyUI: SaveVideo passes its VIDEO on (output `video`), SaveWEBM its images (`images`).
- LoadVideo's validation decodes the first frame, so a corrupt or non-video file refuses the
  prompt (a 400 naming the file) instead of failing later in a downstream node; change detection
  is the file's mtime, as ComfyUI.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graph import v3_schema as v3
from graph.spec import REQUIRED, InputSpec
from graph.native import Combo, Float, Hidden, Input, Output, node
from nodes.checks import choice, image_batch  # not `from nodes import checks`: see _media_files
from nodes._media_files import input_files_of, media_errors, modification_time, preview_video, validate_file
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe, image_input_errors
from nodes.image import annotated_path
from nodes.video_slice import apply_edit, video_edit_widget

if TYPE_CHECKING:
    import torch

# PyAV and torch are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import them (server start-up).

MODULE = "comfy_extras.nodes_video"
CATEGORY = "image/video"
CONTAINERS = ["auto", "mp4", "mkv", "webm"]  # comfy_core.video.VideoContainer.as_input()
CODECS = ["auto", "h264", "av1"]  # comfy_core.video.VideoCodec.as_input()
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


def _input_preview(file: str) -> dict:
    """The loaded file itself as the preview (ComfyUI's `preview_input_video`)."""
    from comfy_core.image.file_names import split_annotation

    name, folder_type = split_annotation(file)
    subfolder, _, filename = name.replace("\\", "/").rpartition("/")
    return {"images": [{"filename": filename, "subfolder": subfolder, "type": folder_type}], "animated": (True,)}


# Today's LoadVideo (comfy_extras/nodes_video.py): the editor's VIDEO_EDIT widget trims and crops on load.
@v3.v3_node("LoadVideo", display_name="Load Video", category="video", python_module=MODULE,
            search_aliases=["import video", "open video", "video file"], essentials_category="Basics",
            has_intermediate_output=True,
            inputs=[InputSpec("file", list_input_videos, REQUIRED, {"multiselect": False, "video_upload": True}),
                    video_edit_widget("edit", ("trim", "crop"), "Trim (seconds) and crop (pixels) applied on load. "
                                      "Zero values leave the video unchanged.", optional=True)],
            outputs=[v3.Output("VIDEO")], is_changed=video_fingerprint, validate_inputs=video_exists)
def load_video(file: str, edit: Any = None) -> dict:
    """The file as a lazy VIDEO (its frames are decoded when a node asks for them), trimmed and
    cropped as `edit` says (decoded then), with its preview."""
    from comfy_core.video import VideoFromFile

    source = VideoFromFile(str(annotated_path(current_env(), file, input_name="file")))
    with media_errors("file"):
        video = apply_edit(source, edit)
        preview = _input_preview(file) if video is source else preview_video(video)
    return {"ui": preview, "result": (video,)}


# -- SaveVideo, as today's ComfyUI declares it (V3 schema, comfy_extras/nodes_video.py, 2026) ------------------

CRF_TIP = "Lower values produce higher quality and larger files."
CODEC_TIP = ("The output video codec. Auto preserves a compatible source stream. H.264 and AV1 re-encoding support "
             "SDR, HDR (HLG), and HDR PQ.")
FORMAT_TIP = ("The output container. Auto uses MP4 for Auto/H.264 and WebM for AV1. MP4, MKV, and WebM select a "
              "specific container.")
# Each codec's label in its tooltip and its re-encode crf (default, max), as ComfyUI's.
_ENCODINGS = {"h264": ("H.264", 23.0, 51.0), "av1": ("AV1", 30.0, 63.0)}


@dataclass(frozen=True)
class PresentOnlyCombo(v3.DynamicCombo):
    """SaveVideo's `codec` and `encoding` dynamic combos, with what ComfyUI does for them that
    graph/v3_schema.py's `DynamicCombo` does not:

    * absent from the prompt, the combo has no value (None), as ComfyUI expands only the dynamic
      inputs a prompt has: 0.3.64's prompts (`format: "mp4", codec: "h264"`) have no
      `format.codec`, and the hidden top-level `codec` is absent from today's;
    * `hidden` renders as ComfyUI's `extra_dict={"hidden": True}` (the top-level `codec` that
      only old prompts fill);
    * a number that options share with different ranges (crf: 0..51 for H.264, 0..63 for AV1)
      is validated against their union, the chosen codec's own range checked when the node runs.
    """

    hidden: bool = False

    def render(self, env: Any = None) -> tuple[str, list]:
        section, (kind, options) = super().render(env)
        if self.hidden:
            options = {**options, "hidden": True}
        return section, [kind, options]

    def flat(self) -> list:
        ranges: dict[str, tuple[float, float]] = {}
        for spec in (s for option in self.options for s in _flat_inputs(option.inputs)):
            low, high = spec.options.get("min"), spec.options.get("max")
            if spec.type in ("INT", "FLOAT") and low is not None and high is not None:
                known = ranges.get(spec.name, (low, high))
                ranges[spec.name] = (min(known[0], low), max(known[1], high))
        specs = super().flat()
        for i, spec in enumerate(specs):
            widened = ranges.get(spec.name[len(self.name) + 1:])
            if widened is not None:
                specs[i] = dataclasses.replace(spec, options={**spec.options, "min": widened[0], "max": widened[1]})
        return specs

    def nest(self, flat: dict[str, Any], listed: bool = False) -> dict[str, Any] | None:
        if self.name not in flat:
            for name in [n for n in flat if n.startswith(f"{self.name}.")]:
                del flat[name]  # sub-inputs of an absent combo mean nothing
            return None
        return super().nest(flat, listed)


def _flat_inputs(inputs: Any) -> list:
    """An option's inputs as the names its combo's `flat` gives them (`encoding.crf`)."""
    return [s for spec in inputs for s in (spec.flat() if isinstance(spec, v3.DynamicCombo) else [spec])]


def _codec_input(codecs: tuple[str, ...], *, optional: bool = False, hidden: bool = False) -> PresentOnlyCombo:
    options = []
    for codec in codecs:
        if codec not in _ENCODINGS:
            options.append(v3.ComboOption(codec))
            continue
        label, default, high = _ENCODINGS[codec]
        encoding = PresentOnlyCombo("encoding", display_name="encoding mode", optional=True, tooltip=(
            f"Automatic preserves compatible {label} streams. Re-encode applies custom encoding options."), options=(
            v3.ComboOption("auto"),
            v3.ComboOption("re-encode", (v3.Float("crf", default=default, min=0.0, max=high, step=1.0,
                                                  tooltip=CRF_TIP),))))
        options.append(v3.ComboOption(codec, (encoding,)))
    return PresentOnlyCombo("codec", tuple(options), tooltip=CODEC_TIP, optional=optional, hidden=hidden)


ALL_CODECS = ("auto", "h264", "av1")
WEBM_CODECS_2026 = ("auto", "av1")  # comfy_core.video.encode.resolve_output: WebM takes AV1 only
SAVE_FORMAT = v3.DynamicCombo("format", tooltip=FORMAT_TIP, options=tuple(
    v3.ComboOption(container, (_codec_input(WEBM_CODECS_2026 if container == "webm" else ALL_CODECS),))
    for container in CONTAINERS))


def _choice(value: Any, key: str, name: str) -> dict:
    """A dynamic combo's value: its dict, or a bare choice as 0.3.64's prompts and callers give it."""
    if isinstance(value, str):
        return {key: value}
    if not isinstance(value, dict) or not isinstance(value.get(key), str):
        raise NodeInputError(name, f"a {key} choice (a string, or {{{key!r}: choice, ...}})", describe(value))
    return value


def save_options(format: Any, codec: Any) -> tuple[str, str, float | None]:  # noqa: A002
    """(container, codec, crf) from SaveVideo's inputs, as today's ComfyUI reads them: the codec
    chosen inside `format`, else the top-level `codec` (0.3.64's prompts), else auto; an `auto`
    container is WebM for AV1 and MP4 otherwise; crf only when `re-encode` is chosen."""
    format = _choice(format, "format", "format")
    container = format["format"]
    if container not in CONTAINERS:
        raise NodeInputError("format", f"one of {CONTAINERS}", repr(container))
    where = "format.codec" if format.get("codec") else "codec"
    codec = _choice(format.get("codec") or codec or "auto", "codec", where)
    name = codec["codec"]
    allowed = list(WEBM_CODECS_2026 if container == "webm" else ALL_CODECS)
    if name not in allowed:
        raise NodeInputError(where, f"one of {allowed} when format is {container!r}", repr(name))
    if container == "auto":
        container = "webm" if name == "av1" else "mp4"
    crf = None
    encoding = codec.get("encoding")
    if encoding is not None and name in _ENCODINGS:
        encoding = _choice(encoding, "encoding", f"{where}.encoding")
        if encoding["encoding"] not in ("auto", "re-encode"):
            raise NodeInputError(f"{where}.encoding", "one of ['auto', 're-encode']", repr(encoding["encoding"]))
        if encoding["encoding"] == "re-encode":
            crf, high = encoding.get("crf"), _ENCODINGS[name][2]
            if isinstance(crf, bool) or not isinstance(crf, (int, float)) or not 0 <= crf <= high:
                raise NodeInputError(f"{where}.encoding.crf", f"a FLOAT in 0..{high:g} for {name}", repr(crf))
    return container, name, crf


# Today's ComfyUI passes the video on (an output "video", "The input video, unchanged."): templates go on
# from it (Wan-Animate-2's "Video Stitch" subgraph).
@v3.v3_node("SaveVideo", display_name="Save Video", category="video", python_module=MODULE, output_node=True,
            description="Saves the input videos to your ComfyUI output directory.",
            search_aliases=["export video"], essentials_category="Basics",
            inputs=[v3.Socket("video", "VIDEO", tooltip="The video to save."),
                    v3.String("filename_prefix", default="video/ComfyUI", tooltip=PREFIX_TIP),
                    SAVE_FORMAT,
                    _codec_input(ALL_CODECS, optional=True, hidden=True)],
            outputs=[v3.Output("VIDEO", "video", tooltip="The input video, unchanged.")])
def save_video(video: Any, filename_prefix: str, format: Any, codec: Any = None,  # noqa: A002
               prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """The video as `<prefix>_<counter>_.<ext>` in the container and codec chosen (a file video
    is copied stream by stream when it can be, as ComfyUI), re-encoded at `crf` when asked."""
    from comfy_core.video import VideoCodec, VideoContainer

    container, codec_name, crf = save_options(format, codec)
    video = _video(video)
    with media_errors("video"):
        width, height = video.get_dimensions()
    folder, filename, counter, subfolder = _location(filename_prefix, width, height)
    metadata = None
    if not current_env().disable_metadata:
        values = dict(extra_pnginfo) if isinstance(extra_pnginfo, dict) else {}
        if prompt is not None:
            values["prompt"] = prompt
        metadata = values or None
    name = f"{filename}_{counter:05}_.{container}"
    options = {"format": VideoContainer(container), "codec": VideoCodec(codec_name), "metadata": metadata}
    if crf is not None:  # only then: a pack's VIDEO class may predate the argument
        options["crf"] = crf
    with media_errors("video"):
        video.save_to(str(folder / name), **options)
    return {**_saved(name, subfolder), "result": (video,)}


BIT_DEPTH_CHOICES = ["auto", 8, 10]
COLOR_SPACE_CHOICES = ["sRGB", "HDR", "HDR PQ"]  # comfy_core.video.types.COLOR_SPACES
CODEC_CHOICES = ["none", "auto", "h264", "av1"]  # "none", then comfy_core.video.types.VideoCodec's


# Today's CreateVideo (comfy_extras/nodes_video.py): the bit depth and colour space the frames are
# encoded with ("auto": 10 bits for HDR, else 8), and `codec` to encode them at once (a file video).
@v3.v3_node("CreateVideo", display_name="Create Video", category="video", python_module=MODULE,
            description="Create a video from images.", search_aliases=["images to video"],
            essentials_category="Video Tools",
            inputs=[v3.Socket("images", "IMAGE", tooltip="The images to create a video from."),
                    v3.Float("fps", default=30.0, min=1.0, max=120.0, step=1.0),
                    v3.Socket("audio", "AUDIO", optional=True, tooltip="The audio to add to the video."),
                    v3.Combo("bit_depth", BIT_DEPTH_CHOICES, default="auto", optional=True,
                             tooltip="Auto uses 8-bit for sRGB and 10-bit for HDR. Explicit 8-bit and 10-bit choices "
                                     "are independent of colorspace."),
                    v3.Combo("color_space", COLOR_SPACE_CHOICES, default="sRGB", optional=True,
                             tooltip="Colorspace of the input images. HDR selects BT.2020/HLG and HDR PQ selects "
                                     "BT.2020/PQ."),
                    v3.Combo("codec", CODEC_CHOICES, default="none", optional=True, advanced=True,
                             tooltip="Optionally encode the video immediately. None keeps the images in tensor form; "
                                     "Auto uses H.264.")],
            outputs=[v3.Output("VIDEO")])
def create_video(images: torch.Tensor, fps: float, audio: Any = None, bit_depth: Any = "auto",
                 color_space: str = "sRGB", codec: str = "none") -> tuple[Any]:
    """A VIDEO of the frames at `fps`, with `audio` as its track, to be encoded at `bit_depth` in
    `color_space`; with a `codec`, encoded now (a Matroska file in memory, as ComfyUI's
    VideoFromList does for a video that is no file)."""
    import io

    from comfy_core.video import VideoComponents, VideoContainer, VideoFromComponents, VideoFromFile
    from comfy_core.video.audio_frames import check_audio

    images = image_batch(images)
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        raise NodeInputError("fps", "a FLOAT > 0", repr(fps))
    if audio is not None:
        with media_errors("audio"):
            check_audio(audio)
    color_space = choice(color_space, COLOR_SPACE_CHOICES, "color_space")
    codec = choice(codec, CODEC_CHOICES, "codec")
    if bit_depth == "auto":
        bit_depth = 10 if color_space in ("HDR", "HDR PQ") else 8
    elif isinstance(bit_depth, bool) or not isinstance(bit_depth, int) or bit_depth < 1:
        # a linked value may be any depth a file has (GetVideoComponents: 12 for a 12-bit file)
        raise NodeInputError("bit_depth", "'auto' or a number of bits (8, 10, ...)", repr(bit_depth))
    video = VideoFromComponents(VideoComponents(images=images, audio=audio, frame_rate=Fraction(fps)),
                                bit_depth=bit_depth, color_space=color_space)
    if codec != "none":
        buffer = io.BytesIO()
        with media_errors("images"):
            video.save_to(buffer, format=VideoContainer.MKV, codec=codec)
        video = VideoFromFile(buffer)
    return (video,)


# Today's GetVideoComponents also gives the bit depth and colour space (COMBO outputs that link to
# CreateVideo's inputs of those names).
@v3.v3_node("GetVideoComponents", display_name="Get Video Components", category="video", python_module=MODULE,
            description="Extracts video frames, audio, frame rate, bit depth, and color space.",
            search_aliases=["extract frames", "split video", "video to images", "demux"],
            inputs=[v3.Socket("video", "VIDEO", tooltip="The video to extract components from.")],
            outputs=[v3.Output("IMAGE", "images"), v3.Output("AUDIO", "audio"), v3.Output("FLOAT", "fps"),
                     v3.Output("COMBO", "bit_depth"), v3.Output("COMBO", "color_space")])
def get_video_components(video: Any) -> tuple[Any, Any, float, int, str]:
    """Frames `[T, H, W, 3]`, the audio (None without a track), the frame rate, the bit depth
    (8, 10, ...) and the colour space ("sRGB", "HDR", "HDR PQ")."""
    video = _video(video)
    with media_errors("video"):
        components = video.get_components()
        return (components.images, components.audio, float(components.frame_rate), video.get_bit_depth(),
                video.get_color_space())


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

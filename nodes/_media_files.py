"""What the video and audio nodes share: the input-folder listing by content type (ComfyUI's
`folder_paths.filter_files_content_types`), the annotated-file checks of their validation, and
the turning of comfy_core.video's errors into the node's `NodeInputError` (naming node and
input; the library's error stays chained as `__cause__`).

Submodules are imported as `from nodes.x import y`, never `from nodes import x`: under a compat
session the package's `__getattr__` answers names it lacks with ComfyUI's node facades, which
imports every node module (a cycle when this one is the first imported)."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from comfy_core.video.errors import MediaFileError, UnknownChoiceError, VideoEncodingError
from comfy_core.video.media_types import content_kind
from graph.context import current
import nodes.checks  # noqa: F401  (before nodes.image, whose `from nodes import checks` needs it loaded)
from nodes.environment import Environment, current_env
from nodes.errors import NodeInputError
from nodes.image import annotated_path


def input_files_of(kinds: tuple[str, ...]) -> Callable[[Any], list[str]]:
    """A combo's file list: the files directly in the input folder whose content type is one of
    `kinds` ("video", "audio"), sorted."""
    def listing(env: Environment | None) -> list[str]:
        env = env if isinstance(env, Environment) else current_env()
        folder = env.input_dir
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if p.is_file() and content_kind(p.name) in kinds)
    return listing


def context_env() -> Environment | None:
    ctx = current()
    return ctx.env if ctx is not None and isinstance(ctx.env, Environment) else None


def validate_file(name: Any, input_name: str, what: str, probe: Callable[[str], Any] | None = None) -> bool | str:
    """VALIDATE_INPUTS of the loaders: True, or ComfyUI's message ("Invalid video file: x.mp4")
    when the (annotated) file is missing; `probe(path)` may refuse a file that exists but cannot
    be read (its MediaFileError's message is appended), so the prompt is refused with a 400
    before it is queued. Without a context the folders are unknown: left to the run."""
    env = context_env()
    if env is None:
        return True
    try:
        path = annotated_path(env, name, input_name=input_name)
    except NodeInputError as exc:
        return str(exc)
    if not path.is_file():
        return f"Invalid {what} file: {name}"
    if probe is not None:
        try:
            probe(str(path))
        except MediaFileError as exc:
            return f"Invalid {what} file: {name}: {exc.reason}"
    return True


def modification_time(name: Any, input_name: str) -> float:
    """LoadVideo's fingerprint: the file's mtime (ComfyUI does not hash large videos); NaN
    without a context (run every time)."""
    env = context_env()
    if env is None:
        return float("nan")
    return os.path.getmtime(annotated_path(env, name, input_name=input_name))


@contextmanager
def media_errors(input_name: str) -> Iterator[None]:
    """comfy_core.video's errors as the running node's `NodeInputError` on `input_name`."""
    try:
        yield
    except MediaFileError as exc:
        raise NodeInputError(input_name, f"a readable {exc.kind} file", str(exc)) from exc
    except UnknownChoiceError as exc:
        raise NodeInputError(input_name, f"one of {exc.choices}", repr(exc.value)) from exc
    except VideoEncodingError as exc:
        raise NodeInputError(input_name, "frames and audio the encoder takes", str(exc)) from exc


def preview_video(video: Any) -> dict:
    """A VIDEO's preview for the editor (ComfyUI's `save_video_preview`): saved as MP4 (codec auto)
    to the temp folder as `ComfyUI_temp_video_<counter>_.mp4`."""
    from pathlib import Path

    from comfy_core.image.file_names import save_location
    from comfy_core.video import VideoCodec, VideoContainer

    with media_errors("video"):
        folder, filename, counter, subfolder = save_location(Path(current_env().temp_dir), "ComfyUI_temp_video", 0, 0)
        name = f"{filename}_{counter:05}_.mp4"
        video.save_to(str(folder / name), format=VideoContainer.MP4, codec=VideoCodec.AUTO)
    return {"images": [{"filename": name, "subfolder": subfolder, "type": "temp"}], "animated": (True,)}

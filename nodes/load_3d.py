"""ComfyUI's 3-D viewer nodes (comfy_extras/nodes_load_3d.py, 0.3.64): Load3D, Load3DAnimation,
Preview3D and Preview3DAnimation; written here.

The editor draws the model in a three.js canvas on the node. When a prompt is queued, its LOAD_3D /
LOAD_3D_ANIMATION widget uploads the canvas renders (the image, its mask, the normal and lineart
passes, and any recorded video) and sends them as the widget's value, a dict: `{"image": "threed/
scene_….png [temp]", "mask": …, "normal": …, "lineart": …, "camera_info": {...}, "recording": ""}`.
The loaders read those files as LoadImage does (annotated names, confined to their folder; the
mask from the mask render's alpha) and pass the model's own path on as `mesh_path` for Preview3D.
Preview3D only shows a model file: its UI result is `[model_file, camera_info]`, which the editor
loads into its canvas.
"""
from __future__ import annotations

from typing import Any

from graph.native import Combo, Input, Int, Output, node
from nodes.environment import Environment, current_env
from nodes.errors import NodeInputError, describe

CATEGORY = "3d"
MODULE = "comfy_extras.nodes_load_3d"
INPUT_SUBFOLDER = "3d"  # the loaders list `input/3d/` (created when listed, as ComfyUI does)
MODEL_SUFFIXES = (".gltf", ".glb", ".obj", ".fbx", ".stl")
ANIMATED_SUFFIXES = (".gltf", ".glb", ".fbx")  # the formats that carry animations
MAX_SIZE = 4096


def _model_files(suffixes: tuple[str, ...]):
    def listing(env: Environment | None) -> list[str]:
        """`3d/…` names of the model files under the input folder's `3d/`, sorted."""
        env = env if isinstance(env, Environment) else current_env()
        folder = env.input_dir / INPUT_SUBFOLDER
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return []
        return sorted(path.relative_to(env.input_dir).as_posix() for path in folder.rglob("*")
                      if path.is_file() and path.suffix.lower() in suffixes)
    return listing


def _render(value: Any, key: str, input_name: str) -> str:
    """The annotated file name of one canvas render in the widget's dict."""
    if not isinstance(value, dict):
        raise NodeInputError(input_name, "the 3-D canvas's renders (a dict the editor sends)", describe(value))
    name = value.get(key)
    if not isinstance(name, str) or not name:
        raise NodeInputError(input_name, f"a {key!r} render file name in the canvas dict", describe(name))
    return name


def _load_renders(image: Any, passes: tuple[str, ...]) -> dict[str, Any]:
    """Each render pass of the widget's dict as LoadImage reads it: `{pass: (IMAGE, MASK)}`; and
    the recording (a VIDEO) when the canvas recorded one."""
    from comfy_core.image.decode import load_image_frames
    from nodes.image import annotated_path

    env = current_env()
    loaded = {key: load_image_frames(annotated_path(env, _render(image, key, "image"), input_name="image"))
              for key in passes}
    recording = image.get("recording") or ""
    if recording:
        from comfy_core.video import VideoFromFile

        if not isinstance(recording, str):
            raise NodeInputError("image", "a recording file name", describe(recording))
        loaded["recording"] = VideoFromFile(str(annotated_path(env, recording, input_name="image")))
    else:
        loaded["recording"] = None
    return loaded


def _size_inputs() -> list:
    return [Int("width", default=1024, min=1, max=MAX_SIZE, step=1),
            Int("height", default=1024, min=1, max=MAX_SIZE, step=1)]


@node("Load3D", category=CATEGORY, display_name="Load 3D", python_module=MODULE, experimental=True,
      description="Loads a 3-D model into the editor's canvas; outputs the canvas renders and the model's path.",
      inputs=[Combo("model_file", _model_files(MODEL_SUFFIXES), file_upload=True), Input("image", "LOAD_3D"),
              *_size_inputs()],
      outputs=[Output("IMAGE", "image"), Output("MASK", "mask"), Output("STRING", "mesh_path"),
               Output("IMAGE", "normal"), Output("IMAGE", "lineart"), Output("LOAD3D_CAMERA", "camera_info"),
               Output("VIDEO", "recording_video")])
def load_3d(model_file: str, image: Any, width: int = 1024, height: int = 1024) -> tuple:
    renders = _load_renders(image, ("image", "mask", "normal", "lineart"))
    return (renders["image"][0], renders["mask"][1], model_file, renders["normal"][0], renders["lineart"][0],
            image.get("camera_info"), renders["recording"])


@node("Load3DAnimation", category=CATEGORY, display_name="Load 3D - Animation", python_module=MODULE,
      experimental=True,
      description="Loads an animated 3-D model into the editor's canvas; outputs the canvas renders and the model's path.",
      inputs=[Combo("model_file", _model_files(ANIMATED_SUFFIXES), file_upload=True),
              Input("image", "LOAD_3D_ANIMATION"), *_size_inputs()],
      outputs=[Output("IMAGE", "image"), Output("MASK", "mask"), Output("STRING", "mesh_path"),
               Output("IMAGE", "normal"), Output("LOAD3D_CAMERA", "camera_info"), Output("VIDEO", "recording_video")])
def load_3d_animation(model_file: str, image: Any, width: int = 1024, height: int = 1024) -> tuple:
    renders = _load_renders(image, ("image", "mask", "normal"))
    return (renders["image"][0], renders["mask"][1], model_file, renders["normal"][0], image.get("camera_info"),
            renders["recording"])


def _preview(model_file: str, camera_info: Any = None) -> dict:
    return {"ui": {"result": [model_file, camera_info]}}


@node("Preview3D", category=CATEGORY, display_name="Preview 3D", python_module=MODULE, experimental=True,
      output_node=True, description="Shows a 3-D model file (a path under the output folder) in the editor.",
      inputs=[Input("model_file", "STRING", default="", multiline=False),
              Input("camera_info", "LOAD3D_CAMERA", optional=True)])
def preview_3d(model_file: str, camera_info: Any = None) -> dict:
    return _preview(model_file, camera_info)


@node("Preview3DAnimation", category=CATEGORY, display_name="Preview 3D - Animation", python_module=MODULE,
      experimental=True, output_node=True,
      description="Shows an animated 3-D model file (a path under the output folder) in the editor.",
      inputs=[Input("model_file", "STRING", default="", multiline=False),
              Input("camera_info", "LOAD3D_CAMERA", optional=True)])
def preview_3d_animation(model_file: str, camera_info: Any = None) -> dict:
    return _preview(model_file, camera_info)

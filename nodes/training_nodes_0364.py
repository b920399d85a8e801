"""ComfyUI 0.3.64's names of the LoRA-saving and training-set nodes (comfy_extras/nodes_train.py
@a125cd84b054a57729b5eecab930ca9408719832, V1 nodes there), kept so workflows saved then still
run; declared as 0.3.64's /object_info shows them. Today's ComfyUI renamed or replaced them
(SaveLoRA, LoadImageDataSetFromFolder, LoadImageTextDataSetFromFolder: nodes/training_nodes.py,
nodes/dataset_nodes.py); these run on the same code:

* SaveLoRANode: SaveLoRA's saving (`<prefix>_<counter>_.safetensors`, or
  `<prefix>_<steps>_steps_<counter>_.safetensors` given the steps, in the output folder).
* LoadImageSetFromFolderNode: the .png/.jpg/.jpeg/.webp files of a sub-folder of the input folder
  (name order; ComfyUI takes the directory's listing order) as ONE IMAGE batch, sized as the first
  image, others fitted by `resize_method` (comfy_core/training/image_sets.py).
* LoadImageTextSetFromFolderNode: the same over the caption layout (kohya-ss' `<N>_<name>`
  sub-folders repeated N times), batch size `width` x `height` when set (-1: the first image's),
  and a CONDITIONING with one entry per image: its `<stem>.txt` caption encoded by `clip` ("" when
  it has none). (0.3.64 adds, for an image without a caption, the empty caption's whole
  conditioning list as one more malformed entry before its encoding; here each image gets exactly
  one entry, which TrainLoraNode pairs with its latent.)
"""
from __future__ import annotations

from typing import Any

from graph.native import Combo, Input, Int, Output, String, node
from graph.spec import REQUIRED, InputSpec
import nodes.checks as checks
from nodes.dataset_nodes import _folder_images, input_subfolders, kohya_image_files, read_caption, subfolder
from nodes.environment import current_env
from nodes.errors import NodeInputError
from nodes.training_nodes import MODULE, save_lora

RESIZE_METHODS = ["None", "Stretch", "Crop", "Pad"]  # comfy_core.training.image_sets's, spelled here (no torch)


def _folder(tooltip: str) -> InputSpec:
    return InputSpec("folder", input_subfolders, REQUIRED, {"tooltip": tooltip})


def _image_set(paths: list, resize_method: str, width: int | None = None, height: int | None = None) -> Any:
    from comfy_core.training.image_sets import ImageSetError, load_image_set

    checks.choice(resize_method, RESIZE_METHODS, "resize_method")
    try:
        return load_image_set(paths, resize_method, width, height)
    except ImageSetError as exc:
        raise NodeInputError("folder", "images that fit one batch", str(exc)) from exc


@node("SaveLoRANode", category="loaders", display_name="Save LoRA Weights", python_module=MODULE,
      experimental=True, output_node=True,
      inputs=[Input("lora", "LORA_MODEL", tooltip="The LoRA model to save. Do not use the model with LoRA layers."),
              String("prefix", default="loras/ComfyUI_trained_lora",
                     tooltip="The prefix to use for the saved LoRA file."),
              Input("steps", "INT", optional=True, forceInput=True,
                    tooltip="Optional: The number of steps to LoRA has been trained for, used to name the saved "
                            "file.")],
      outputs=[])
def save_lora_node(lora: Any, prefix: str, steps: int | None = None) -> tuple:
    """SaveLoRA under 0.3.64's name."""
    return save_lora(lora, prefix, steps)


@node("LoadImageSetFromFolderNode", category="loaders", display_name="Load Image Dataset from Folder",
      python_module=MODULE, experimental=True,
      description="Loads a batch of images from a directory for training.",
      inputs=[_folder("The folder to load images from."),
              Combo("resize_method", RESIZE_METHODS, default="None", optional=True)],
      outputs=[Output("IMAGE")])
def load_image_set_from_folder(folder: str, resize_method: str = "None") -> tuple[Any]:
    """The folder's images as one batch."""
    _root, paths = _folder_images(folder)
    return (_image_set(paths, resize_method),)


@node("LoadImageTextSetFromFolderNode", category="loaders", display_name="Load Image and Text Dataset from Folder",
      python_module=MODULE, experimental=True,
      description="Loads a batch of images and caption from a directory for training.",
      inputs=[_folder("The folder to load images from."),
              Input("clip", "CLIP", tooltip="The CLIP model used for encoding the text."),
              Combo("resize_method", RESIZE_METHODS, default="None", optional=True),
              Int("width", default=-1, min=-1, max=10000, step=1, optional=True,
                  tooltip="The width to resize the images to. -1 means use the original width."),
              Int("height", default=-1, min=-1, max=10000, step=1, optional=True,
                  tooltip="The height to resize the images to. -1 means use the original height.")],
      outputs=[Output("IMAGE"), Output("CONDITIONING")])
def load_image_text_set_from_folder(folder: str, clip: Any, resize_method: str = "None", width: int = -1,
                                    height: int = -1) -> tuple[Any, list]:
    """The folder's images as one batch and their captions encoded, one CONDITIONING entry each."""
    clip = checks.clip(clip)
    width = checks.integer(width, "width", -1, 10000)
    height = checks.integer(height, "height", -1, 10000)
    root = subfolder(current_env().input_dir, folder, "folder")
    if not root.is_dir():
        raise NodeInputError("folder", "a sub-folder of the input folder", repr(folder))
    paths = kohya_image_files(root)
    images = _image_set(paths, resize_method, width if width > 0 else None, height if height > 0 else None)
    from nodes.conditioning import clip_text_encode

    conditioning: list = []
    for path in paths:
        conditioning.extend(clip_text_encode(read_caption(path), clip)[0])
    return (images, conditioning)

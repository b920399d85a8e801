"""Background removal nodes, V3 schemas as today's ComfyUI declares them
(`comfy_extras/nodes_bg_removal.py`); written here, the network and its pre- / post-processing in
comfy_core/models/birefnet/.

- LoadBackgroundRemovalModel: a file of the `background_removal` folder (a BiRefNet, told by
  ComfyUI's marker tensor `bb.layers.1.blocks.0.attn.relative_position_index`) -> BACKGROUND_REMOVAL.
- RemoveBackground: each image resized to `resolution` x `resolution` (1024 for BiRefNet, 2048 for
  BiRefNet_HR), through the network, the foreground probability resized back -> MASK [B, H, W].
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.environment import model_devices, model_file, model_files, report_progress
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_bg_removal"
KIND = "background_removal"
BACKGROUND_REMOVAL = "BACKGROUND_REMOVAL"

_model_files = model_files(KIND)  # the loader combo's live options


@v3_node("LoadBackgroundRemovalModel", display_name="Load Background Removal Model", category="model/loaders",
         python_module=MODULE,
         inputs=[InputSpec("bg_removal_name", _model_files, REQUIRED,  # a live V3 combo
                           {"tooltip": "The model used to remove backgrounds from images", "multiselect": False})],
         outputs=[Output(BACKGROUND_REMOVAL, "bg_model")])
def load_background_removal_model(bg_removal_name: str) -> tuple[Any]:
    """See the module docstring."""
    from comfy_core.models.birefnet.model import load_background_removal
    from comfy_core.models.birefnet.network import BiRefNetWeightsError

    path = model_file(KIND, bg_removal_name, "bg_removal_name")
    device, offload = model_devices()
    try:
        return (load_background_removal(path, load_device=device, offload_device=offload),)
    except BiRefNetWeightsError as exc:
        raise NodeInputError("bg_removal_name", "a background removal model (BiRefNet)", str(exc)) from None


@v3_node("RemoveBackground", display_name="Remove Background", category="image/background removal",
         python_module=MODULE,
         description="Generates a foreground mask to remove the background from an image using a background "
                     "removal model.",
         inputs=[
             Socket("bg_removal_model", BACKGROUND_REMOVAL, tooltip="Background removal model used to generate the mask"),
             Socket("image", "IMAGE", tooltip="Input image to remove the background from"),
             Int("resolution", default=1024, min=256, max=4096, step=32, optional=True, advanced=True,
                 tooltip="Square size the image is resized to before inference. Use the size the model was "
                         "trained at, e.g. 1024 for BiRefNet and 2048 for BiRefNet_HR."),
         ],
         outputs=[Output("MASK", "mask", tooltip="Generated foreground mask")])
def remove_background(bg_removal_model: Any, image: "torch.Tensor", resolution: int = 1024) -> tuple["torch.Tensor"]:
    """See the module docstring."""
    from comfy_core.models.birefnet.model import BackgroundRemovalModel

    if not isinstance(bg_removal_model, BackgroundRemovalModel):
        raise NodeInputError("bg_removal_model", "a BACKGROUND_REMOVAL (from LoadBackgroundRemovalModel)",
                             describe(bg_removal_model))
    image = checks.image_batch(image, "image")
    resolution = checks.integer(resolution, "resolution", 256, 4096)
    if resolution % 32:
        raise NodeInputError("resolution", "a multiple of 32 (the network's deepest level is 1/32 of it)",
                             str(resolution))
    return (bg_removal_model.encode_image(image, image_size=resolution, on_image=report_progress),)

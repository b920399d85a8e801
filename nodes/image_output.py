"""LoadImageOutput: an image from the output folder, ComfyUI's `nodes.LoadImageOutput`.

ComfyUI 0.3.64 declares it as a subclass of LoadImage with one `COMBO` input whose options the
editor fetches itself: `image_folder: "output"` (the upload button writes there), and `remote`
(the list comes from `/internal/files/output`, newest first, with a refresh button that selects
the first file). The editor sends the chosen file annotated, `"name.png [output]"`; loading,
validation and change detection are LoadImage's (`get_annotated_filepath`: an annotated name is
looked up in its folder, a bare one in the input folder), so this node uses nodes/image.py's
`annotated_path`, `image_exists` and `hash_image`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from comfy_core.image.decode import load_image_frames
from graph.native import Input, Output, node
from nodes.environment import current_env
from nodes.image import annotated_path, hash_image, image_exists

if TYPE_CHECKING:
    import torch

OUTPUT_FILES_ROUTE = "/internal/files/output"


@node("LoadImageOutput", category="image", display_name="Load Image (from Outputs)", experimental=True,
      description="Load an image from the output folder. When the refresh button is clicked, the node will update "
                  "the image list and automatically select the first image, allowing for easy iteration.",
      inputs=[Input("image", "COMBO", image_upload=True, image_folder="output",
                    remote={"route": OUTPUT_FILES_ROUTE, "refresh_button": True, "control_after_refresh": "first"})],
      outputs=[Output("IMAGE"), Output("MASK")],
      is_changed=hash_image, validate_inputs=image_exists)  # LoadImage's rules
def load_image_output(image: str) -> tuple["torch.Tensor", "torch.Tensor"]:
    return load_image_frames(annotated_path(current_env(), image))

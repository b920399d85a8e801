"""WebcamCapture, ComfyUI 0.3.64's webcam node (comfy_extras/nodes_webcam.py): the editor's WEBCAM
widget captures a frame, uploads it (to `input/webcam/` as a temp file) and fills `image` with the
annotated name; the node then loads it as LoadImage does. `width` and `height` only size the
capture in the editor, and `capture_on_queue` tells the editor to capture again at each queue, so
neither reaches the image here (as in ComfyUI); the file's hash decides whether the node re-runs.
"""
from __future__ import annotations

from graph.native import MAX_RESOLUTION, Boolean, Input, Int, Output, node
from nodes.image import hash_image, image_exists, load_image


@node("WebcamCapture", category="image", display_name="Webcam Capture", python_module="comfy_extras.nodes_webcam",
      inputs=[Input("image", "WEBCAM"), Int("width", default=0, min=0, max=MAX_RESOLUTION, step=1),
              Int("height", default=0, min=0, max=MAX_RESOLUTION, step=1),
              Boolean("capture_on_queue", default=True)],
      outputs=[Output("IMAGE")],
      is_changed=hash_image, validate_inputs=image_exists)
def webcam_capture(image: str, width: int = 0, height: int = 0, capture_on_queue: bool = True) -> tuple:
    """The captured frame (LoadImage's IMAGE; the alpha mask is not an output here, as in ComfyUI)."""
    return (load_image(image)[0],)

"""ImageCompare (ComfyUI's comfy_extras/nodes_image_compare.py, 2026): an output node that shows
two images in the editor's before/after slider. Each image is written to the temp folder as
PreviewImage does (prefixes "comfy.compare.a" / "comfy.compare.b", no workflow metadata, as
ComfyUI calls PreviewImage without it) and the node's UI output lists them as `a_images` and
`b_images`. `compare_view` is the editor's slider widget; its value carries nothing here.
"""
from __future__ import annotations

from typing import Any

from comfy_core.image.png import preview_target, write_image_batch
from graph.v3_schema import Socket, Widget, v3_node
from nodes.environment import current_env
from nodes.errors import image_input_errors
from nodes.image import metadata_enabled

MODULE = "comfy_extras.nodes_image_compare"


def _preview(images: Any, prefix: str) -> list[dict]:
    if images is None or len(images) == 0:
        return []
    env = current_env()
    with image_input_errors():
        saved = write_image_batch(images, prefix, preview_target(env.temp_dir), metadata=metadata_enabled(env))
    return saved["ui"]["images"]


@v3_node("ImageCompare", display_name="Image Compare", category="image", python_module=MODULE,
         description="Compares two images side by side with a slider.", experimental=True, output_node=True,
         inputs=[Socket("image_a", "IMAGE", optional=True), Socket("image_b", "IMAGE", optional=True),
                 Widget("compare_view", "IMAGECOMPARE")])
def image_compare(image_a: Any = None, image_b: Any = None, compare_view: Any = None, prompt: Any = None,
                  extra_pnginfo: Any = None) -> dict:
    """Preview files of both images, for the editor's compare widget."""
    return {"ui": {"a_images": _preview(image_a, "comfy.compare.a"), "b_images": _preview(image_b, "comfy.compare.b")}}

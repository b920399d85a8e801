"""V1 nodes of the example pack.

`torch` is imported inside the node methods, not at the top: the server imports every pack
before it answers /object_info, and a top-level `import torch` would make that start-up wait
seconds for it (the engine loads torch in the background once it listens). Node methods only
run after that, so the import there is free.
"""
import comfy.model_management
import comfy.utils
from comfy_execution.graph_utils import GraphBuilder
from server import PromptServer

import nodes


class ExampleInvertImage:
    """Inverts each image of a batch, reporting one progress step per image."""

    CATEGORY = "example_pack"
    DESCRIPTION = "Inverts the colours of every image in the batch."
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "invert"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)},
                "hidden": {"unique_id": "UNIQUE_ID"}}

    def invert(self, image, unique_id=None):
        import torch  # here, not at the top: see the module docstring

        bar = comfy.utils.ProgressBar(image.shape[0])
        out = []
        for single in image:
            comfy.model_management.throw_exception_if_processing_interrupted()
            out.append(1.0 - single)
            bar.update(1)
        PromptServer.instance.send_sync("example_pack.inverted",
                                        {"node": unique_id, "count": int(image.shape[0])},
                                        PromptServer.instance.client_id)
        return (torch.stack(out),)


class ExampleRepeatInvert:
    """Expands into `times` chained ExampleInvertImage nodes (a GraphBuilder expansion)."""

    CATEGORY = "example_pack"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "expand"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",),
                             "times": ("INT", {"default": 2, "min": 1, "max": 16})}}

    def expand(self, image, times):
        graph = GraphBuilder()
        current = image
        for _ in range(times):
            step = graph.node("ExampleInvertImage", image=current)
            current = step.out(0)
        return {"result": (current,), "expand": graph.finalize()}


class ExampleSolidImage:
    """A solid colour image (uses the engine's MAX_RESOLUTION like ComfyUI's core nodes)."""

    CATEGORY = "example_pack"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"width": ("INT", {"default": 64, "min": 1, "max": nodes.MAX_RESOLUTION}),
                             "height": ("INT", {"default": 64, "min": 1, "max": nodes.MAX_RESOLUTION}),
                             "value": ("FLOAT", {"default": 0.25, "min": 0.0, "max": 1.0, "step": 0.01})}}

    def make(self, width, height, value):
        import torch  # here, not at the top: see the module docstring

        return (torch.full((1, height, width, 3), float(value)),)


NODE_CLASS_MAPPINGS = {
    "ExampleInvertImage": ExampleInvertImage,
    "ExampleRepeatInvert": ExampleRepeatInvert,
    "ExampleSolidImage": ExampleSolidImage,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ExampleInvertImage": "Invert Image (example)",
    "ExampleRepeatInvert": "Repeat Invert (example)",
    "ExampleSolidImage": "Solid Image (example)",
}

"""A pack that subclasses `nodes.SaveImage` / `nodes.PreviewImage` the way packs do
(tests/nodes/test_save_image_facade.py): attributes set in `__init__` say where and how to write."""
import os
import random

import folder_paths
import nodes


class PackPreview(nodes.SaveImage):
    """ComfyUI's own PreviewImage pattern, copied by many packs: temp folder, type "temp"."""

    def __init__(self):
        self.output_dir = folder_paths.get_temp_directory()
        self.type = "temp"
        self.prefix_append = "_temp_" + "".join(random.choice("abcdefghijklmnopqrstupvxyz") for _ in range(5))
        self.compress_level = 1

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"images": ("IMAGE",)},
                "hidden": {"prompt": "PROMPT", "extra_pnginfo": "EXTRA_PNGINFO"}}


class PackSubfolderSave(nodes.SaveImage):
    """Calls `super().__init__()`, then writes into its own folder, with a suffix and level 9,
    through `self.save_images` from its own FUNCTION, and passes the images on."""

    def __init__(self):
        super().__init__()
        self.output_dir = os.path.join(folder_paths.get_output_directory(), "pack_saves")
        os.makedirs(self.output_dir, exist_ok=True)
        self.prefix_append = "_pack"
        self.compress_level = 9

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"images": ("IMAGE",), "filename_prefix": ("STRING", {"default": "mine"})},
                "hidden": {"prompt": "PROMPT", "extra_pnginfo": "EXTRA_PNGINFO"}}

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "save_and_pass"

    def save_and_pass(self, images, filename_prefix, prompt=None, extra_pnginfo=None):
        saved = self.save_images(images, filename_prefix, prompt, extra_pnginfo)
        return {"ui": saved["ui"], "result": (images,)}


class PackPlainPreview(nodes.PreviewImage):
    """Inherits everything from PreviewImage."""

    CATEGORY = "pack"


NODE_CLASS_MAPPINGS = {
    "PackPreview": PackPreview,
    "PackSubfolderSave": PackSubfolderSave,
    "PackPlainPreview": PackPlainPreview,
}

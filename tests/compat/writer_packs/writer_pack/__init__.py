"""A fixture pack that writes files at import the ways real packs do (tests/compat/test_compat_pack_writes.py):

- into its own folder: a settings file (Impact-Pack's `impact-pack.ini`, WAS's
  `was_suite_config.json`) and a folder of its own data (wildcards);
- into ComfyUI's old `web/extensions/` beside `custom_nodes/`, found from its own path
  (smZNodes' `setup_web_extension`: the pack folder's grandparent);
- into `web/extensions/` beside `folder_paths.py` (older ComfyUI-Custom-Scripts: the folder of
  `folder_paths.__file__`, ComfyUI's root there).

`WRITTEN` lists the files it wrote."""
import os
import shutil

import folder_paths

HERE = os.path.dirname(os.path.abspath(__file__))
WRITTEN = []


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    WRITTEN.append(path)


_write(os.path.join(HERE, "writer_pack.ini"), "[default]\nwildcards = wildcards\n")
_write(os.path.join(HERE, "wildcards", "colour.txt"), "red\ngreen\n")

_js = os.path.join(HERE, "js", "writer.js")
_write(_js, "// the pack's editor extension\n")
for root in (os.path.dirname(os.path.dirname(HERE)), os.path.dirname(folder_paths.__file__)):
    target = os.path.join(root, "web", "extensions", "writer_pack")
    if os.path.exists(target):
        shutil.rmtree(target)
    os.makedirs(target)
    shutil.copy(_js, target)
    WRITTEN.append(os.path.join(target, "writer.js"))


class WriterNode:
    CATEGORY = "writer_pack"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"x": ("INT", {"default": 1})}}

    def run(self, x):
        return (x,)


NODE_CLASS_MAPPINGS = {"WriterNode": WriterNode}

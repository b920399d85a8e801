"""SaveText, "Save Text" (today's ComfyUI, comfy_extras/nodes_text.py, the version with csv among
its formats): a STRING written to the output folder as `<prefix>_<counter:05>.<format>` (txt,
csv, md or json), and passed on unchanged.

The prefix is SaveImage's (comfy_core.image.file_names.save_location, ComfyUI's
`get_save_image_path` with width and height 1): subfolders in it are created inside the output
folder, one leading out of it is refused, `%year%` and the other server-side tokens are filled.
As SaveImageAdvanced's names (nodes/save_image_advanced.py), these have no `_` after the digits,
which ComfyUI's counter rule reads as counter 0, so ComfyUI's node writes `_00001` again and
overwrites the last file; here the counter also counts these names (`next_plain_counter`) and
every earlier file is kept, a deliberate difference.

`json`: text that parses as JSON is written pretty-printed (indent 2, non-ASCII kept as it is);
other text is written as it is. The editor gets the text (`ui.text`) and the file (`ui.files`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graph.v3_schema import Combo, Output, String, v3_node
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe, image_input_errors

MODULE = "comfy_extras.nodes_text"
FORMATS = ["txt", "csv", "md", "json"]


def text_file_content(text: str, format: str) -> str:  # noqa: A002 -- ComfyUI's input name
    """What the file holds: `text`, or for json valid JSON re-indented by 2 (see the module)."""
    if format == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except json.JSONDecodeError:
            return text
    return text


@v3_node("SaveText", display_name="Save Text", category="text", python_module=MODULE, output_node=True,
         description="Save text content to a file in the output directory.",
         search_aliases=("save text", "write text", "export text"),
         inputs=[String("text", forceInput=True), String("filename_prefix", default="ComfyUI"),
                 Combo("format", FORMATS, default="txt")],
         outputs=[Output("STRING", "text")])
def save_text(text: str, filename_prefix: str, format: str, prompt: Any = None,  # noqa: A002
              extra_pnginfo: Any = None) -> dict:
    """Write `text` (see the module docstring); returns it and the saved file for the editor."""
    from comfy_core.image.file_names import save_location
    from nodes.save_image_advanced import next_plain_counter

    if not isinstance(text, str):
        raise NodeInputError("text", "a STRING", describe(text))
    if not isinstance(filename_prefix, str):
        raise NodeInputError("filename_prefix", "a STRING", describe(filename_prefix))
    if format not in FORMATS:
        raise NodeInputError("format", f"one of {FORMATS}", repr(format))
    env = current_env()
    with image_input_errors():
        folder, filename, counter, subfolder = save_location(Path(env.output_dir), filename_prefix, 1, 1)
    counter = max(counter, next_plain_counter(folder, filename))
    name = f"{filename}_{counter:05}.{format}"
    with open(folder / name, "w", encoding="utf-8") as handle:
        handle.write(text_file_content(text, format))
    return {"ui": {"text": (text,), "files": [{"filename": name, "subfolder": subfolder, "type": "output"}]},
            "result": (text,)}

"""SaveConditioning and LoadConditioning (today's ComfyUI, comfy_extras/nodes_cond.py, 2026, the
version whose Load Conditioning reads `.conditioning` files from the input folder): a CONDITIONING
kept in a file so that a prompt is encoded once and reused, e.g. without loading the text encoder.

The file format is ComfyUI's (comfy_core/text_encoders/conditioning_files.py writes and reads it): a
safetensors file named `<prefix>_<counter:05>_.conditioning` in
the output folder (SaveImage's prefix and counter rules, comfy_core.image.file_names), whose
metadata key `comfy_conditioning` holds a JSON description of the CONDITIONING (`{"version": 1,
"entries": [{"cond": ..., "extra": ...}, ...]}`) and whose tensors are `t0`, `t1`, ... in the
order the description meets them. A value is described as `{"t": "tensor", "k": "t3"}`,
`{"t": "nested", "s": [...]}` (a nested tensor, e.g. LTX-2's [video, audio], by its parts),
`{"t": "dict", "v": {...}}`, `{"t": "list", "v": [...]}`, `{"t": "tuple", "v": [...]}` or
`{"t": "lit", "v": value}` (None, booleans, numbers, strings); anything else in a conditioning
(a control net, hooks, ...) cannot be saved and the node says which option holds it. A
conditioning without tensors still gets an empty `t0`. The prompt and the editor's workflow go into
the metadata too, unless the host runs with `--disable-metadata`. Loading gives back the same
entries: equal tensors (on the CPU, their dtypes kept), dicts, lists, tuples and values.

Load Conditioning offers the `.conditioning` files directly in the input folder ("copy the file
into input/"); like LoadImage it also takes `name [output]`, and every name is confined to its
folder (`..`, absolute paths and symlinks out are refused). The older format, a `conditioning`
tensor in a safetensors file of the embeddings folder, stays with ConditioningLoader
(nodes/conditioning_loader.py, comfy_core/text_encoders/conditioning_files.py).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from comfy_core.image.file_names import split_annotation
from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.environment import Environment, current_env
from nodes.errors import NodeInputError, describe, image_input_errors
from nodes.image import annotated_path, file_sha256, metadata_enabled

MODULE = "comfy_extras.nodes_cond"
SUFFIX = ".conditioning"


# -- the nodes --------------------------------------------------------------------------------------

@v3_node("SaveConditioning", display_name="Save Conditioning", category="model/conditioning", python_module=MODULE,
         description="Save CONDITIONING (embeddings and extras) to skip re-encoding later. Copy the file into "
                     "input/ to load it.",
         search_aliases=("export conditioning", "cache prompt", "save clip"), output_node=True,
         inputs=[Socket("conditioning", "CONDITIONING"),
                 String("filename_prefix", default="conditioning/ComfyUI")],
         outputs=[Output("CONDITIONING")])
def save_conditioning(conditioning: list, filename_prefix: str = "conditioning/ComfyUI", prompt: Any = None,
                      extra_pnginfo: Any = None) -> dict:
    """Write `<prefix>_<counter:05>_.conditioning` (see the module docstring); the conditioning
    is passed on and the file listed for the editor."""
    from comfy_core.image.file_names import save_location
    from comfy_core.text_encoders.conditioning_files import ConditioningPackError, write_conditioning_file

    conditioning = checks.conditioning(conditioning)
    if not isinstance(filename_prefix, str):
        raise NodeInputError("filename_prefix", "a STRING", describe(filename_prefix))
    env = current_env()
    with image_input_errors():
        folder, filename, counter, subfolder = save_location(Path(env.output_dir), filename_prefix, 0, 0)
    metadata = {}
    if metadata_enabled(env):
        if prompt is not None:
            metadata["prompt"] = json.dumps(prompt)
        if isinstance(extra_pnginfo, dict):
            metadata.update({str(k): json.dumps(v) for k, v in extra_pnginfo.items()})
    name = f"{filename}_{counter:05}_{SUFFIX}"
    try:
        write_conditioning_file(folder / name, conditioning, metadata)
    except ConditioningPackError as exc:
        raise NodeInputError("conditioning", "a CONDITIONING of tensors and plain values", str(exc)) from None
    return {"ui": {"files": [{"filename": name, "subfolder": subfolder, "type": "output"}]},
            "result": (conditioning,)}


def list_conditioning_files(env: Any = None) -> list[str]:
    """`.conditioning` files directly in the input folder, sorted (LoadConditioning's combo)."""
    environment = env if isinstance(env, Environment) else current_env()
    folder = Path(environment.input_dir)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.name.endswith(SUFFIX))


def _conditioning_path(conditioning: Any) -> Path:
    """The file a name means (`x.conditioning`, `sub/x.conditioning`, `x.conditioning [output]`),
    confined to its folder; names of other files are refused."""
    if not isinstance(conditioning, str):
        raise NodeInputError("conditioning", f"a {SUFFIX} file name", describe(conditioning))
    if not split_annotation(conditioning)[0].endswith(SUFFIX):
        raise NodeInputError("conditioning", f"a {SUFFIX} file name", repr(conditioning))
    return annotated_path(current_env(), conditioning, input_name="conditioning")


def _conditioning_hash(conditioning: Any, **_: Any) -> str:
    return file_sha256(_conditioning_path(conditioning))


def _conditioning_exists(conditioning: Any) -> bool | str:
    try:
        path = _conditioning_path(conditioning)
    except ValueError:
        return f"Invalid conditioning file: {conditioning}"
    return True if path.is_file() else f"Invalid conditioning file: {conditioning}"


@v3_node("LoadConditioning", display_name="Load Conditioning", category="model/conditioning", python_module=MODULE,
         description="Load CONDITIONING saved by Save Conditioning. Place the .conditioning file in input/.",
         search_aliases=("import conditioning", "open conditioning", "cached prompt"),
         inputs=[InputSpec("conditioning", list_conditioning_files, REQUIRED, {"multiselect": False})],
         outputs=[Output("CONDITIONING")],
         is_changed=_conditioning_hash, validate_inputs=_conditioning_exists)
def load_conditioning(conditioning: str) -> tuple[list]:
    """The CONDITIONING stored in the named `.conditioning` file (see the module docstring)."""
    from comfy_core.latent.nested import NestedTensor
    from comfy_core.text_encoders.conditioning_files import ConditioningPackError, read_conditioning_file

    path = _conditioning_path(conditioning)
    if not path.is_file():
        raise NodeInputError("conditioning", f"a {SUFFIX} file in the input folder", f"{conditioning!r}, not found")
    try:
        return (read_conditioning_file(path, NestedTensor),)
    except ConditioningPackError as exc:
        raise NodeInputError("conditioning", "a conditioning file written by Save Conditioning", str(exc)) from None

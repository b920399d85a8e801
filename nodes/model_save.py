"""Save nodes of ComfyUI's comfy_extras/nodes_model_merging.py (0.3.64): CheckpointSave, ModelSave,
CLIPSave, VAESave.

Each writes `.safetensors` files into the output folder with every patch applied (a merge, a
LoRA: what the model computes is what the file holds), named as SaveImage names images
(`<prefix>_00001_.safetensors`, the next free counter, subfolders in the prefix, never outside the
folder). Layouts are ComfyUI's (see `comfy_core.saving`):

- CheckpointSave: one file, `model.diffusion_model.*`, the family's text-encoder prefixes and
  `first_stage_model.*` (CheckpointLoaderSimple loads it back);
- ModelSave: the same file with the diffusion model only;
- CLIPSave: one file per text encoder, `<prefix>_<slot>_00001_.safetensors` (`clip_l`, `clip_g`,
  ...), in transformers' layout without the slot prefix;
- VAESave: the VAE's own keys (`encoder.*`, `decoder.*`, ...).

Metadata as ComfyUI writes it: the prompt and each `extra_pnginfo` entry (the workflow) as JSON
text, unless the host runs with `--disable-metadata`; CheckpointSave and ModelSave add
`modelspec.*` (always), CLIPSave `format: pt`. The nodes show nothing in the editor (ComfyUI's
return `{}`).

CheckpointSave and ModelSave write their file as ComfyUI's do, through `comfy.sd.save_checkpoint`
when a pack has replaced it (the `save_checkpoint` extension point: `write(path, model, clip, vae,
clip_vision, metadata=, extra_keys=)`), else with comfy_core.saving's.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graph.native import Hidden, Input, String, node
import nodes.checks as checks
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe, image_input_errors

# torch (through comfy_core.saving) is imported inside the functions that run: registering these
# nodes and rendering /object_info stays torch-free (server start-up).

MODULE = "comfy_extras.nodes_model_merging"
CATEGORY = "advanced/model_merging"
SUFFIX = ".safetensors"


def _hidden() -> list:
    return [Hidden("prompt", "PROMPT"), Hidden("extra_pnginfo", "EXTRA_PNGINFO")]


def prompt_metadata(prompt: Any, extra_pnginfo: Any) -> dict[str, str]:
    """ComfyUI's text metadata: `prompt` (JSON, "" without one) and each `extra_pnginfo` entry as
    JSON; nothing under `--disable-metadata`."""
    if getattr(current_env(), "disable_metadata", False):
        return {}
    if extra_pnginfo is not None and not isinstance(extra_pnginfo, dict):
        raise NodeInputError("extra_pnginfo", "an object (extra_data.extra_pnginfo)", describe(extra_pnginfo))
    metadata = {"prompt": json.dumps(prompt) if prompt is not None else ""}
    for key, value in (extra_pnginfo or {}).items():
        metadata[str(key)] = json.dumps(value)
    return metadata


def output_file(filename_prefix: Any, output_dir: Any = None) -> tuple[Path, str, int]:
    """`(path, file name stem, counter)` of the next `<prefix>_<counter>_.safetensors` in
    `output_dir` (default: the output folder; ComfyUI's get_save_image_path rule, width and height 0)."""
    from comfy_core.image.file_names import save_location

    checks.text(filename_prefix, "filename_prefix")
    folder = Path(current_env().output_dir if output_dir is None else output_dir)
    with image_input_errors():
        folder, filename, counter, _subfolder = save_location(folder, filename_prefix, 0, 0)
    return folder / f"{filename}_{counter:05}_{SUFFIX}", filename, counter


def save_checkpoint_file(model: Any, clip: Any, vae: Any, filename_prefix: str, prompt: Any, extra_pnginfo: Any, *,
                         clip_vision: Any = None, output_dir: Any = None, write: Any = None) -> Path:
    """ComfyUI's `comfy_extras.nodes_model_merging.save_checkpoint`: the next
    `<prefix>_<counter>_.safetensors` with ComfyUI's metadata, written by `write` (ComfyUI's
    `comfy.sd.save_checkpoint` signature), else by the `save_checkpoint` extension point in force,
    else by comfy_core.saving (which saves no CLIP_VISION); returns the path."""
    from comfy_core import extension_points
    from comfy_core.saving import SaveLayoutError, checkpoint_metadata, marker_tensors, save_checkpoint

    text = prompt_metadata(prompt, extra_pnginfo)
    path, filename, counter = output_file(filename_prefix, output_dir)
    metadata = {**checkpoint_metadata(model, f"{filename} {counter}"), **text}
    write = write or extension_points.current().save_checkpoint
    try:
        if write is not None:
            write(str(path), model, clip, vae, clip_vision, metadata=metadata, extra_keys=marker_tensors(model))
            return path
        if clip_vision is not None:
            raise NodeInputError("clip_vision", "None (this writer saves MODEL, CLIP and VAE)", describe(clip_vision))
        return save_checkpoint(path, model, clip, vae, metadata)
    except SaveLayoutError as exc:
        raise NodeInputError("clip", "text encoders of a family with a checkpoint layout", str(exc)) from exc


@node("CheckpointSave", display_name="Save Checkpoint", category=CATEGORY, python_module=MODULE, output_node=True,
      inputs=[Input("model", "MODEL"), Input("clip", "CLIP"), Input("vae", "VAE"),
              String("filename_prefix", default="checkpoints/ComfyUI"), *_hidden()])
def checkpoint_save(model: Any, clip: Any, vae: Any, filename_prefix: str, prompt: Any = None,
                    extra_pnginfo: Any = None) -> dict:
    """The model, text encoders and VAE as one checkpoint file."""
    model = checks.model(model)
    clip = checks.clip(clip, encoders=True)
    vae = checks.vae(vae)
    save_checkpoint_file(model, clip, vae, filename_prefix, prompt, extra_pnginfo)
    return {}


@node("ModelSave", display_name="ModelSave", category=CATEGORY, python_module=MODULE, output_node=True,
      inputs=[Input("model", "MODEL"), String("filename_prefix", default="diffusion_models/ComfyUI"), *_hidden()])
def model_save(model: Any, filename_prefix: str, prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """The diffusion model alone, in the checkpoint layout (`model.diffusion_model.*`)."""
    save_checkpoint_file(checks.model(model), None, None, filename_prefix, prompt, extra_pnginfo)
    return {}


@node("CLIPSave", display_name="CLIPSave", category=CATEGORY, python_module=MODULE, output_node=True,
      inputs=[Input("clip", "CLIP"), String("filename_prefix", default="clip/ComfyUI"), *_hidden()])
def clip_save(clip: Any, filename_prefix: str, prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """One file per text encoder, `<prefix>_<slot>_00001_.safetensors`."""
    from comfy_core.checkpoint.save import write_safetensors
    from comfy_core.saving import text_encoder_tensors

    clip = checks.clip(clip, encoders=True)
    checks.text(filename_prefix, "filename_prefix")
    text = prompt_metadata(prompt, extra_pnginfo)
    metadata = {"format": "pt", **text} if text else {}
    with text_encoder_tensors(clip) as files:
        for slot, tensors in files.items():
            path, _filename, _counter = output_file(f"{filename_prefix}_{slot}")
            write_safetensors(path, tensors, metadata)
    return {}


@node("VAESave", display_name="VAESave", category=CATEGORY, python_module=MODULE, output_node=True,
      inputs=[Input("vae", "VAE"), String("filename_prefix", default="vae/ComfyUI_vae"), *_hidden()])
def vae_save(vae: Any, filename_prefix: str, prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """The VAE as a standalone file (VAELoader loads it)."""
    from comfy_core.checkpoint.save import write_safetensors
    from comfy_core.saving import vae_tensors

    vae = checks.vae(vae)
    text = prompt_metadata(prompt, extra_pnginfo)
    path, _filename, _counter = output_file(filename_prefix)
    with vae_tensors(vae) as tensors:
        write_safetensors(path, tensors, text)
    return {}

"""ComfyUI's two `save_checkpoint` functions, over our checkpoint saving (comfy_core.saving) and the
CheckpointSave node's file naming and metadata (nodes/model_save.py).

- `save_checkpoint(output_path, model, clip=None, vae=None, clip_vision=None, metadata=None,
  extra_keys={})` (ComfyUI's `comfy.sd.save_checkpoint`): the patched model, text encoders, VAE and
  image encoder in the family's single-file layout (`comfy_core.saving.checkpoint_tensors`, the
  image encoder's hf names under the family's `clip_vision_prefix`), `extra_keys` added, written as
  safetensors with `metadata`. It is the built-in of the `save_checkpoint` extension point: a pack
  assigning `comfy.sd.save_checkpoint` (art-venture's fp16 wrapper) changes what CheckpointSave
  and ModelSave write with, for the session.
- `model_merging_save_checkpoint(model, clip=None, vae=None, clip_vision=None, filename_prefix=None,
  output_dir=None, prompt=None, extra_pnginfo=None)` (ComfyUI's
  `comfy_extras.nodes_model_merging.save_checkpoint`, which mikey_nodes calls): CheckpointSave's
  file (`<prefix>_<counter:05>_.safetensors`, modelspec metadata, prompt / workflow unless
  `--disable-metadata`, the v-prediction / EDM marker tensors as `extra_keys`) written through
  `comfy.sd.save_checkpoint` as the session has it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional


def save_checkpoint(output_path: Any, model: Any, clip: Any = None, vae: Any = None, clip_vision: Any = None,
                    metadata: Optional[Mapping[str, str]] = None, extra_keys: Mapping[str, Any] = {}) -> Path:
    """See the module docstring; returns the path written."""
    import contextlib

    from comfy_core.checkpoint.save import write_safetensors
    from comfy_core.saving import checkpoint_tensors

    with contextlib.ExitStack() as stack:
        tensors = dict(stack.enter_context(checkpoint_tensors(model, clip, vae)))
        if clip_vision is not None:
            family = getattr(model.model, "family", None)
            prefix = getattr(family, "clip_vision_prefix", None) or "clip_vision."
            stack.enter_context(clip_vision.patcher.applied())
            tensors.update({prefix + k: v for k, v in clip_vision.get_sd().items()})
        tensors.update(extra_keys)
        tensors = {k: t.contiguous() for k, t in tensors.items()}
        return write_safetensors(Path(output_path), tensors, dict(metadata) if metadata else None)


def model_merging_save_checkpoint(model: Any, clip: Any = None, vae: Any = None, clip_vision: Any = None,
                                  filename_prefix: Any = None, output_dir: Any = None, prompt: Any = None,
                                  extra_pnginfo: Any = None) -> None:
    """See the module docstring (ComfyUI's returns nothing)."""
    from compat.facade import active_points
    from nodes.model_save import save_checkpoint_file

    write = active_points().save_checkpoint or save_checkpoint
    save_checkpoint_file(model, clip, vae, filename_prefix, prompt, extra_pnginfo, clip_vision=clip_vision,
                         output_dir=output_dir, write=write)

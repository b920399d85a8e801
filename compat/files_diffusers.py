"""ComfyUI's `comfy.diffusers_load` for packs (ComfyUI_ExtraModels' MiaoBi loader calls
`load_diffusers`): a diffusers pipeline folder -> `(model, clip, vae)`, loaded by the engine's own
diffusers-folder loader (comfy_core/split/diffusers_folder.py, the DiffusersLoader node's), with
what the built-in loader nodes give what they load (compat/files_sd.py `_finish`: default attention
backend, embedding lookup over `embedding_directory`, memory tracking)."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Iterable


def first_file(path: str | os.PathLike, filenames: Iterable[str]) -> str | None:
    """The first of `filenames` that exists in folder `path` (its full path), else None."""
    for name in filenames:
        candidate = os.path.join(path, name)
        if os.path.exists(candidate):
            return candidate
    return None


def load_diffusers(model_path: str | os.PathLike, output_vae: bool = True, output_clip: bool = True,
                   embedding_directory: Any = None) -> tuple[Any, Any, Any]:
    """The UNet (`ModelPatcher`), text encoders (`CLIP`, None unless `output_clip`) and VAE (None
    unless `output_vae`) of the diffusers folder `model_path` (`unet/`, `text_encoder/`,
    `text_encoder_2/`, `vae/`, fp16 weight files first), as ComfyUI's `load_diffusers`."""
    from comfy_core.split import load_diffusers as ours
    from compat.files_sd import _finish, _options

    options = dataclasses.replace(_options(), output_vae=bool(output_vae), output_clip=bool(output_clip))
    model, clip, vae = ours(Path(model_path), options)
    _finish(model, clip, vae, embedding_directory)
    return model, clip, vae

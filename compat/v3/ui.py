"""`comfy_api.latest.ui`: UI outputs for V3 nodes (ComfyUI's comfy_api/latest/_ui.py behaviour).

Each helper has `as_dict()`, the node's `"ui"` record (`{"images": [...]}`, `{"text": [...]}`).
`PreviewImage` writes PNGs into the server's temp folder, like the PreviewImage node.

torch and numpy are imported where images are saved, not at the top: packs import
`comfy_api.latest` at start-up, before the server answers /object_info, and start-up stays
torch-free (torch loads in the background once the server listens, web/warmup.py).
"""
from __future__ import annotations

import json
import os
import random
from typing import TYPE_CHECKING, Any

from compat.v3.io import FolderType  # noqa: F401 -- ComfyUI's ui re-exports it

if TYPE_CHECKING:
    import torch


class SavedResult(dict):
    """`{"filename", "subfolder", "type"}`, the file record the editor shows (`type` a folder
    name or ComfyUI's `io.FolderType`, stored as its string)."""

    def __init__(self, filename: str, subfolder: str, type: Any) -> None:  # noqa: A002
        super().__init__(filename=filename, subfolder=subfolder, type=getattr(type, "value", type))

    @property
    def filename(self) -> str:
        return self["filename"]

    @property
    def subfolder(self) -> str:
        return self["subfolder"]


class _UIOutput:
    def as_dict(self) -> dict:
        raise NotImplementedError


class SavedImages(_UIOutput):
    def __init__(self, results: list, is_animated: bool = False) -> None:
        self.results = list(results)
        self.is_animated = is_animated

    def as_dict(self) -> dict:
        return {"images": [dict(r) for r in self.results], "animated": [self.is_animated]}


def _png_metadata(cls: Any, env: Any) -> Any:
    """ComfyUI's `ImageSaveHelper._create_png_metadata`: the prompt and every extra_pnginfo entry
    as JSON text chunks, from the node's hidden inputs; None with `--disable-metadata`, or when
    the node declares neither."""
    from PIL.PngImagePlugin import PngInfo

    hidden = getattr(cls, "hidden", None) if cls is not None else None
    if hidden is None or getattr(env, "disable_metadata", False):
        return None
    prompt, extra = getattr(hidden, "prompt", None), getattr(hidden, "extra_pnginfo", None)
    if not prompt and not extra:
        return None
    info = PngInfo()
    if prompt:
        info.add_text("prompt", json.dumps(prompt))
    for key, value in (extra or {}).items():
        info.add_text(key, json.dumps(value))
    return info


def _save_pngs(images: torch.Tensor, folder_type: str, prefix: str, cls: Any = None) -> list[SavedResult]:
    import numpy as np
    import torch
    from PIL import Image

    from compat.folders import get_save_image_path
    from compat.session import active

    if not isinstance(images, torch.Tensor) or images.ndim != 4:
        raise TypeError(f"ui.PreviewImage: expected an IMAGE tensor [B, H, W, C], got "
                        f"{getattr(images, 'shape', type(images).__name__)}")
    session = active()
    root = str(session.directory(folder_type))
    folder, filename, counter, subfolder, _ = get_save_image_path(prefix, root, images.shape[2], images.shape[1])
    metadata = _png_metadata(cls, session.env)
    results = []
    for image in images:  # [H, W, C]
        pixels = np.clip(255.0 * image.detach().cpu().float().numpy(), 0, 255).astype(np.uint8)
        name = f"{filename}_{counter:05}_.png"
        Image.fromarray(pixels.squeeze(-1) if pixels.shape[-1] == 1 else pixels).save(
            os.path.join(folder, name), pnginfo=metadata, compress_level=1)
        results.append(SavedResult(name, subfolder, folder_type))
        counter += 1
    return results


class PreviewImage(_UIOutput):
    """Temp-folder previews of an IMAGE batch `[B, H, W, C]`."""

    def __init__(self, image: torch.Tensor, animated: bool = False, cls: Any = None, **kwargs: Any) -> None:
        suffix = "".join(random.choice("abcdefghijklmnopqrstupvxyz") for _ in range(5))
        self.values = _save_pngs(image, "temp", f"ComfyUI_temp_{suffix}", cls)
        self.animated = animated

    def as_dict(self) -> dict:
        return {"images": [dict(v) for v in self.values], "animated": [self.animated]}


class PreviewMask(PreviewImage):
    """A MASK `[B, H, W]` previewed as a grey image."""

    def __init__(self, mask: torch.Tensor, animated: bool = False, cls: Any = None, **kwargs: Any) -> None:
        import torch

        if not isinstance(mask, torch.Tensor) or mask.ndim not in (2, 3):
            raise TypeError(f"ui.PreviewMask: expected a MASK tensor [B, H, W], got {getattr(mask, 'shape', mask)!r}")
        mask = mask.reshape(-1, mask.shape[-2], mask.shape[-1])
        super().__init__(mask.unsqueeze(-1).expand(-1, -1, -1, 3), animated, cls)


class PreviewText(_UIOutput):
    def __init__(self, value: str, **kwargs: Any) -> None:
        self.value = value

    def as_dict(self) -> dict:
        return {"text": [self.value]}


class PreviewVideo(_UIOutput):
    """Saved video files shown on the node (ComfyUI's `ui.PreviewVideo`: `{"images": [...],
    "animated": (True,)}`; the editor plays them)."""

    def __init__(self, values: list, **kwargs: Any) -> None:
        self.values = list(values)

    def as_dict(self) -> dict:
        return {"images": [dict(v) for v in self.values], "animated": (True,)}


class PreviewAudio(_UIOutput):
    """ComfyUI's `ui.PreviewAudio(audio, cls)`: each batch item saved as FLAC in the temp folder
    (nodes/audio.py, PyAV), previewed by the editor's audio widget."""

    def __init__(self, audio: dict, cls: Any = None, **kwargs: Any) -> None:
        from nodes.audio import write_audio_files

        suffix = "".join(random.choice("abcdefghijklmnopqrstupvxyz") for _ in range(5))
        self.values = write_audio_files(audio, f"ComfyUI_temp_{suffix}", "temp", "flac", None, None, None)["ui"]["audio"]

    def as_dict(self) -> dict:
        return {"audio": self.values}

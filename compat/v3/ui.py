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


def _save_pngs(images: torch.Tensor, folder_type: str, prefix: str, cls: Any = None,
               compress_level: int = 1) -> list[SavedResult]:
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
    for batch_number, image in enumerate(images):  # [H, W, C]
        pixels = np.clip(255.0 * image.detach().cpu().float().numpy(), 0, 255).astype(np.uint8)
        name = f"{filename.replace('%batch_num%', str(batch_number))}_{counter:05}_.png"
        Image.fromarray(pixels.squeeze(-1) if pixels.shape[-1] == 1 else pixels).save(
            os.path.join(folder, name), pnginfo=metadata, compress_level=compress_level)
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


class ImageSaveHelper:
    """Behaviour of ComfyUI's `comfy_api/latest/_ui.py` `ImageSaveHelper` (PNG stills): V3 save
    nodes call its static methods to write an IMAGE batch `[B, H, W, C]` as one PNG per image,
    named `<prefix>_<counter:05>_.png` (`%batch_num%` in the prefix becomes the image's index),
    with the prompt / extra_pnginfo metadata of `cls.hidden` (none under `--disable-metadata`)."""

    @staticmethod
    def save_images(images: Any, filename_prefix: str, folder_type: Any, cls: Any,
                    compress_level: int = 4) -> list[SavedResult]:
        """The PNGs of `images` in `folder_type` (an `io.FolderType` or its string); their records."""
        return _save_pngs(images, getattr(folder_type, "value", folder_type), filename_prefix, cls,
                          compress_level=compress_level)

    @staticmethod
    def get_save_images_ui(images: Any, filename_prefix: str, cls: Any, compress_level: int = 4) -> SavedImages:
        """`save_images` into the output folder, as the `ui` a save node returns."""
        return SavedImages(ImageSaveHelper.save_images(images, filename_prefix, "output", cls, compress_level))

    @staticmethod
    def _frames(images: Any, filename_prefix: str, folder_type: Any, extension: str) -> tuple:
        """(PIL frames, file path, SavedResult) of one animated file of an IMAGE batch."""
        import numpy as np
        from PIL import Image

        from compat.folders import get_save_image_path
        from compat.session import active

        folder_type = getattr(folder_type, "value", folder_type)
        session = active()
        folder, filename, counter, subfolder, _ = get_save_image_path(
            filename_prefix, str(session.directory(folder_type)), images[0].shape[1], images[0].shape[0])
        frames = []
        for image in images:
            pixels = np.clip(255.0 * image.detach().cpu().float().numpy(), 0, 255).astype(np.uint8)
            frames.append(Image.fromarray(pixels.squeeze(-1) if pixels.shape[-1] == 1 else pixels))
        name = f"{filename}_{counter:05}_.{extension}"
        return frames, os.path.join(folder, name), SavedResult(name, subfolder, folder_type), session

    @staticmethod
    def save_animated_png(images: Any, filename_prefix: str, folder_type: Any, cls: Any, fps: float,
                          compress_level: int) -> SavedResult:
        """The whole batch as one animated PNG (APNG), `1000 / fps` ms a frame, with metadata."""
        frames, path, result, session = ImageSaveHelper._frames(images, filename_prefix, folder_type, "png")
        frames[0].save(path, pnginfo=_png_metadata(cls, session.env), compress_level=compress_level,
                       save_all=True, duration=int(1000.0 / fps), append_images=frames[1:])
        return result

    @staticmethod
    def get_save_animated_png_ui(images: Any, filename_prefix: str, cls: Any, fps: float,
                                 compress_level: int) -> SavedImages:
        result = ImageSaveHelper.save_animated_png(images, filename_prefix, "output", cls, fps, compress_level)
        return SavedImages([result], is_animated=len(images) > 1)

    @staticmethod
    def save_animated_webp(images: Any, filename_prefix: str, folder_type: Any, cls: Any, fps: float,
                           lossless: bool, quality: int, method: int) -> SavedResult:
        """The whole batch as one animated WebP, `1000 / fps` ms a frame, with the prompt and
        extra_pnginfo in its EXIF (as ComfyUI's SaveAnimatedWEBP), none under --disable-metadata."""
        frames, path, result, session = ImageSaveHelper._frames(images, filename_prefix, folder_type, "webp")
        exif = frames[0].getexif()
        hidden = getattr(cls, "hidden", None) if cls is not None else None
        if hidden is not None and not getattr(session.env, "disable_metadata", False):
            if getattr(hidden, "prompt", None) is not None:
                exif[0x0110] = "prompt:{}".format(json.dumps(hidden.prompt))  # Model
            tag = 0x010F  # Make, then down the tag numbers, as ComfyUI writes them
            for key, value in (getattr(hidden, "extra_pnginfo", None) or {}).items():
                exif[tag] = "{}:{}".format(key, json.dumps(value))
                tag -= 1
        frames[0].save(path, save_all=True, duration=int(1000.0 / fps), append_images=frames[1:], exif=exif,
                       lossless=lossless, quality=quality, method=method)
        return result

    @staticmethod
    def get_save_animated_webp_ui(images: Any, filename_prefix: str, cls: Any, fps: float, lossless: bool,
                                  quality: int, method: int) -> SavedImages:
        result = ImageSaveHelper.save_animated_webp(images, filename_prefix, "output", cls, fps, lossless,
                                                    quality, method)
        return SavedImages([result], is_animated=len(images) > 1)

"""Today's `latent_preview` names beyond compat/previews.py: the video-TAE previewer, the preview
method override and `preview_to_image`'s `do_scale` (behaviour of today's ComfyUI
`latent_preview.py`, read there, written here):

- `VIDEO_TAES`: the tiny decoders ComfyUI loads as a video VAE (`taehv`, `lighttaew2_2`,
  `lighttaew2_1`, `lighttaehy1_5`, `taeltx_2`, `taeh3`).
- `preview_to_image(latent_image, do_scale=True)`: `[h, w, 3]` in -1..1 (or 0..1 with
  `do_scale=False`) -> PIL RGB image.
- `TAEHVPreviewerImpl(taesd, latent_format, compile_preview=False)`: a `TAESDPreviewerImpl` whose
  preview is the decoder's first frame of the first item: `taesd.decode(latent_format.process_out(
  x0[:1, :, :1]))[0][0]`, already 0..1 (`do_scale=False`).
- `set_preview_method(override=None)`: the live `args.preview_method` set to the method named
  ("none", "auto", "latent2rgb", "taesd"), or back to the server's start-up method
  (`default_preview_method`) for None, "default" or a name that is not a method.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from compat.previews import TAESDPreviewerImpl

if TYPE_CHECKING:
    import torch
    from PIL import Image

VIDEO_TAES = ["taehv", "lighttaew2_2", "lighttaew2_1", "lighttaehy1_5", "taeltx_2", "taeh3"]


def preview_to_image(latent_image: torch.Tensor, do_scale: bool = True) -> Image.Image:
    import torch
    from PIL import Image

    from comfy_core.sampling.preview import preview_to_image as convert

    if do_scale:
        return convert(latent_image)
    pixels = latent_image.clamp(0, 1).mul(0xFF).to(dtype=torch.uint8, device="cpu")
    return Image.fromarray(pixels.numpy())


class TAEHVPreviewerImpl(TAESDPreviewerImpl):
    def __init__(self, taesd: Any, latent_format: Any, compile_preview: bool = False) -> None:
        super().__init__(taesd)
        self.latent_format = latent_format
        self.compile_preview = compile_preview

    def decode_latent_to_preview(self, x0: torch.Tensor) -> Image.Image:
        import torch

        samples = self.latent_format.process_out(x0[:1, :, :1])
        with torch.inference_mode():
            decoded = self.taesd.decode(samples)
        frame = decoded[0][0] if decoded.ndim == 5 else decoded[0]  # [h, w, 3] in 0..1
        return preview_to_image(frame[..., :3], do_scale=False)


_DEFAULTS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _start_up_method() -> Any:
    """The session's preview method before any override (ComfyUI reads it at import)."""
    from compat.cli_args import LatentPreviewMethod, args
    from compat.session import active

    session = active()
    if session not in _DEFAULTS:
        _DEFAULTS[session] = LatentPreviewMethod(args.preview_method)
    return _DEFAULTS[session]


def __getattr__(name: str) -> Any:
    if name == "default_preview_method":
        return _start_up_method()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def method_from_string(value: str) -> Any:
    """ComfyUI's `LatentPreviewMethod.from_string`: the method named `value`, or None."""
    from compat.cli_args import LatentPreviewMethod

    try:
        return LatentPreviewMethod(value)
    except ValueError:
        return None


def set_preview_method(override: str | None = None) -> None:
    from compat.cli_args import args

    default = _start_up_method()
    if override and override != "default":
        method = method_from_string(override)
        if method is not None:
            args.preview_method = method
            return
    args.preview_method = default


__all__ = ["VIDEO_TAES", "TAEHVPreviewerImpl", "preview_to_image", "set_preview_method", "method_from_string"]

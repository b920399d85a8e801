"""ComfyUI's `latent_preview` functions for packs that run their own sampling loop:
`prepare_callback`, `get_previewer` and `preview_to_image`.

Imports no torch (tensors only pass through the callback): packs import `latent_preview` at
start-up, before the server answers /object_info, and start-up stays torch-free.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch


def prepare_callback(model: Any, steps: int, x0_output_dict: dict | None = None
                     ) -> Callable[[int, torch.Tensor, torch.Tensor, int], None]:
    """A `callback(step, x0, x, total_steps)` reporting progress and a live preview to the running
    node (the built-in KSampler's own callback); `x0_output_dict["x0"]` receives the last x0."""
    from nodes.sampling import progress_callback

    report = progress_callback(model)

    def callback(step: int, x0: torch.Tensor, x: torch.Tensor, total_steps: int) -> None:
        if x0_output_dict is not None:
            x0_output_dict["x0"] = x0
        if report is not None:
            report(step, x0, x, total_steps)

    return callback


class LatentPreviewer:
    """ComfyUI's previewer interface over comfy_core's previewers (sampling/preview.py)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def decode_latent_to_preview(self, x0: torch.Tensor) -> Any:
        return self.inner.preview(x0)[1]

    def decode_latent_to_preview_image(self, preview_format: str, x0: torch.Tensor) -> tuple[str, Any, int]:
        # ComfyUI's previewers always answer JPEG, whatever format is asked for.
        _fmt, image, max_size = self.inner.preview(x0)
        return ("JPEG", image, max_size)


def get_previewer(device: Any, latent_format: Any) -> LatentPreviewer | None:
    """The previewer the server's `--preview-method` gives `latent_format` (None: no previews)."""
    from comfy_core.sampling.preview import MAX_PREVIEW_RESOLUTION, make_previewer
    from compat.session import active

    env = active().env
    inner = make_previewer(getattr(env, "preview_method", "latent2rgb"), latent_format,
                           getattr(env, "folders", None), device=device,
                           max_size=getattr(env, "preview_size", MAX_PREVIEW_RESOLUTION))
    return LatentPreviewer(inner) if inner is not None else None


def preview_to_image(latent_image: torch.Tensor) -> Any:
    """[h, w, 3] in [-1, 1] -> PIL image (ComfyUI's `latent_preview.preview_to_image`)."""
    from comfy_core.sampling.preview import preview_to_image as convert

    return convert(latent_image)

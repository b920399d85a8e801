"""ComfyUI's `latent_preview` for packs that run their own sampling loop or build previewers:
`LatentPreviewer` (the interface packs subclass), `Latent2RGBPreviewer`, `TAESDPreviewerImpl`,
`get_previewer`, `prepare_callback`, `preview_to_image`, `MAX_PREVIEW_RESOLUTION`.

The pixels come from comfy_core.sampling.preview (the built-in samplers' previews): the linear
projection `latent_to_rgb`, the [-1, 1] -> bytes mapping `preview_to_image`, the TAESD decoder
lookup in `vae_approx`. The preview method is the server's (`comfy.cli_args.args.preview_method`,
which packs such as ComfyUI-Manager may set while the server runs: it is the environment's
`preview_method`, what the built-in samplers follow too).

Imports no torch at import time: packs import `latent_preview` at start-up, before the server
answers /object_info, and start-up stays torch-free.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    import torch
    from PIL import Image


def max_preview_resolution() -> int:
    """The longest side of a preview frame: the server's `--preview-size`."""
    from compat.session import active

    return int(getattr(active().env, "preview_size", 512))


def __getattr__(name: str) -> Any:
    # ComfyUI's `MAX_PREVIEW_RESOLUTION = args.preview_size`, read when a pack first reads it.
    if name == "MAX_PREVIEW_RESOLUTION":
        return max_preview_resolution()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def preview_to_image(latent_image: torch.Tensor) -> Image.Image:
    """[h, w, 3] in [-1, 1] -> PIL image (ComfyUI's `latent_preview.preview_to_image`)."""
    from comfy_core.sampling.preview import preview_to_image as convert

    return convert(latent_image)


class LatentPreviewer:
    """ComfyUI's previewer interface: subclasses answer `decode_latent_to_preview(x0)` with a
    PIL image; `decode_latent_to_preview_image` wraps it as the `("JPEG", image, max size)`
    preview a ProgressBar sends (ComfyUI's previewers always answer JPEG)."""

    def decode_latent_to_preview(self, x0: torch.Tensor) -> Image.Image:
        raise NotImplementedError(f"{type(self).__name__}.decode_latent_to_preview is not implemented")

    def decode_latent_to_preview_image(self, preview_format: str, x0: torch.Tensor) -> tuple[str, Any, int]:
        return ("JPEG", self.decode_latent_to_preview(x0), max_preview_resolution())


class Latent2RGBPreviewer(LatentPreviewer):
    """The first batch item (first frame of a video latent) through the linear factors
    (`[C][3]`, plus an optional `[3]` bias): one preview pixel per latent pixel. As ComfyUI,
    `latent_rgb_factors` is kept as a `[3, C]` tensor, moved to x0's dtype and device."""

    def __init__(self, latent_rgb_factors: Sequence[Sequence[float]], latent_rgb_factors_bias: Sequence[float] | None = None
                 ) -> None:
        import torch

        self.latent_rgb_factors = torch.tensor(latent_rgb_factors, device="cpu").transpose(0, 1)  # [3, C]
        self.latent_rgb_factors_bias = (torch.tensor(latent_rgb_factors_bias, device="cpu")
                                        if latent_rgb_factors_bias is not None else None)

    def decode_latent_to_preview(self, x0: torch.Tensor) -> Image.Image:
        from comfy_core.sampling.preview import latent_to_rgb

        self.latent_rgb_factors = self.latent_rgb_factors.to(dtype=x0.dtype, device=x0.device)
        if self.latent_rgb_factors_bias is not None:
            self.latent_rgb_factors_bias = self.latent_rgb_factors_bias.to(dtype=x0.dtype, device=x0.device)
        return latent_to_rgb(x0, self.latent_rgb_factors.transpose(0, 1), self.latent_rgb_factors_bias)


class TAESDPreviewerImpl(LatentPreviewer):
    """The first batch item decoded by a TAESD model (anything with `decode(latent [1, C, h, w])
    -> [1, 3, 8h, 8w]` in [-1, 1]: ComfyUI's `TAESD`, or comfy_core's TAESD decoder)."""

    def __init__(self, taesd: Any) -> None:
        self.taesd = taesd

    def decode_latent_to_preview(self, x0: torch.Tensor) -> Image.Image:
        import torch

        with torch.inference_mode():
            image = self.taesd.decode(x0[:1])[0].movedim(0, 2)  # [8h, 8w, 3]
        return preview_to_image(image)


def get_previewer(device: Any, latent_format: Any) -> LatentPreviewer | None:
    """ComfyUI's `get_previewer`: None for no previews; TAESD (the format's decoder from
    `models/vae_approx/`, else a warning and the projection); otherwise (latent2rgb, and auto
    as in ComfyUI 0.3.64) the projection, or None when the format has no factors."""
    import logging

    from comfy_core.sampling.preview import PREVIEW_METHODS, TAESD_FOLDER, find_taesd_decoder
    from compat.session import active

    env = active().env
    method = getattr(env, "preview_method", "none")
    if method not in PREVIEW_METHODS:
        raise ValueError(f"preview method must be one of {PREVIEW_METHODS}, got {method!r}")
    if method == "none" or latent_format is None:
        return None
    if method == "taesd":
        path = find_taesd_decoder(getattr(env, "folders", None), latent_format)
        if path is not None:
            from comfy_core.models.taesd import load_taesd_decoder

            return TAESDPreviewerImpl(load_taesd_decoder(path, device=device))
        logging.getLogger(__name__).warning("TAESD previews enabled, but could not find models/%s/%s", TAESD_FOLDER,
                                            getattr(latent_format, "taesd_decoder_name", None))
    factors = getattr(latent_format, "latent_rgb_factors", None)
    if factors is None:
        return None
    return Latent2RGBPreviewer(factors, getattr(latent_format, "latent_rgb_factors_bias", None))


def prepare_callback(model: Any, steps: int, x0_output_dict: dict | None = None
                     ) -> Callable[[int, torch.Tensor, torch.Tensor, int], None]:
    """A `callback(step, x0, x, total_steps)` reporting progress and a live preview to the running
    node (the built-in sampling nodes' own callback, nodes/sampling.py `recording_callback`);
    `x0_output_dict["x0"]` receives the last x0. An extension point: a pack's replacement is
    what the sampling nodes call (`step_callback`), and it may call this one."""
    from nodes.sampling import recording_callback

    own = recording_callback(model, x0_output_dict)
    return own if own is not None else _no_report


def _no_report(step: int, x0: torch.Tensor, x: torch.Tensor, total_steps: int) -> None:
    """The step callback outside a running node with nothing to record (ComfyUI's is never None)."""

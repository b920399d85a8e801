"""Flux.2's nodes (today's ComfyUI, comfy_extras/nodes_flux.py, V3 nodes): EmptyFlux2LatentImage
(zeros in Flux.2's latent space: 128 channels at 1/16 of the image), Flux2Scheduler (FLUX.2's
resolution- and step-dependent schedule, comfy_core/families/flux2/schedule.py), FluxKVCache
(the reference K/V cache of an edit run, comfy_core/model_patches/flux_kv_cache.py) and
ReferenceMultiLatent (the FLUX 3 Klein edit templates' "Set Reference Multi Latent": several
reference images VAE-encoded onto both conditionings, and the empty latent of the first one).
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION
import math

from graph.v3_schema import Autogrow, ComboOption, DynamicCombo, Float, Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError

# torch is imported inside the functions that run (registration must not import it).

MODULE = "comfy_extras.nodes_flux"
FLUX2_LATENT_CHANNELS = 128
FLUX2_DOWNSCALE = 16


@v3_node("EmptyFlux2LatentImage", display_name="Empty Flux 2 Latent", category="latent", python_module=MODULE,
         inputs=[Int("width", default=1024, min=16, max=MAX_RESOLUTION, step=16),
                 Int("height", default=1024, min=16, max=MAX_RESOLUTION, step=16),
                 Int("batch_size", default=1, min=1, max=4096)],
         outputs=[Output("LATENT")])
def empty_flux2_latent_image(width: int, height: int, batch_size: int = 1) -> tuple[dict]:
    """Zeros `[batch, 128, height // 16, width // 16]`, with ComfyUI's `downscale_ratio_spacial` 16."""
    import torch

    width = checks.integer(width, "width", 16, MAX_RESOLUTION)
    height = checks.integer(height, "height", 16, MAX_RESOLUTION)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    samples = torch.zeros((batch_size, FLUX2_LATENT_CHANNELS, height // FLUX2_DOWNSCALE, width // FLUX2_DOWNSCALE))
    return ({"samples": samples, "downscale_ratio_spacial": FLUX2_DOWNSCALE},)


@v3_node("Flux2Scheduler", category="sampling/custom_sampling/schedulers", python_module=MODULE,
         inputs=[Int("steps", default=20, min=1, max=4096),
                 Int("width", default=1024, min=16, max=MAX_RESOLUTION, step=1),
                 Int("height", default=1024, min=16, max=MAX_RESOLUTION, step=1)],
         outputs=[Output("SIGMAS")])
def flux2_scheduler(steps: int, width: int, height: int) -> tuple[Any]:
    """FLUX.2's sigmas `[steps + 1]` for an image of `width` x `height`."""
    from comfy_core.families.flux2.schedule import flux2_sigmas

    steps = checks.integer(steps, "steps", 1, 4096)
    width = checks.integer(width, "width", 16, MAX_RESOLUTION)
    height = checks.integer(height, "height", 16, MAX_RESOLUTION)
    return (flux2_sigmas(steps, width, height),)


@v3_node("FluxKVCache", display_name="Flux KV Cache", category="", python_module=MODULE, experimental=True,
         description="Enables KV Cache optimization for reference images on Flux family models.",
         inputs=[Socket("model", "MODEL", tooltip="The model to use KV Cache on.")],
         outputs=[Output("MODEL", tooltip="The patched model with KV Cache enabled.")])
def flux_kv_cache(model: Any) -> tuple[Any]:
    """A clone of `model` that keeps the reference tokens' keys and values from a run's first step
    and runs later steps without them; references default to "index_timestep_zero"."""
    from comfy_core.model_patches.flux_kv_cache import FluxKVCacheError, apply_flux_kv_cache

    try:
        return (apply_flux_kv_cache(model),)
    except FluxKVCacheError as error:
        raise NodeInputError("model", "a Flux.2 model without a KV cache", str(error),
                             node_type="FluxKVCache") from error


# ReferenceMultiLatent: ComfyUI's source was not readable here; the schema and behaviour follow
# ComfyUI's built-in node documentation (docs.comfy.org/built-in-nodes/ReferenceMultiLatent) and the
# FLUX 3 Klein edit templates (inputs `images.image0`, ..., widgets `resolution` / `resolution.megapixels`).
EDIT_MODULE = "comfy_extras.nodes_edit_model"
MEGAPIXEL = 1024 * 1024
REFERENCE_RESOLUTION = DynamicCombo("resolution", tooltip=(
    "How each reference image is prepared before encoding: as it comes, or resized to a number of megapixels "
    "keeping its aspect ratio."), options=(
    ComboOption("keep resolution"),
    ComboOption("resize", (Float("megapixels", default=1.0, min=0.01, max=16.0, step=0.01,
                                 tooltip="Target size of each reference image; 1.0 is about 1024 x 1024."),)),
))


def _to_megapixels(image: Any, megapixels: float) -> Any:
    """IMAGE `[B, H, W, C]` scaled (lanczos) so that W x H is about `megapixels` * 1024^2, each side
    rounded (ImageScaleToTotalPixels' rule); returned as it is when that is its size already."""
    from comfy_core.image.resize import upscale_samples

    height, width = image.shape[1], image.shape[2]
    scale = math.sqrt(int(megapixels * MEGAPIXEL) / (width * height))
    new_width, new_height = max(1, round(width * scale)), max(1, round(height * scale))
    if (new_width, new_height) == (width, height):
        return image
    return upscale_samples(image.movedim(-1, 1), new_width, new_height, "lanczos", "disabled").movedim(1, -1)


@v3_node("ReferenceMultiLatent", display_name="Set Reference Multi Latent",
         category="advanced/conditioning/edit_models", python_module=EDIT_MODULE,
         description=("Encodes one or more reference images with the VAE and appends their latents to the "
                      "positive (and negative) conditioning of an edit model."),
         inputs=[Socket("positive", "CONDITIONING"),
                 Socket("negative", "CONDITIONING", optional=True),
                 Socket("vae", "VAE", optional=True),
                 REFERENCE_RESOLUTION,
                 Autogrow("images", Socket("image", "IMAGE"), prefix="image", min=0, max=100)],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"),
                  Output("LATENT", "empty_latent")])
def reference_multi_latent(positive: list, negative: list | None = None, vae: Any = None,
                           resolution: dict | None = None,
                           images: dict[str, Any] | None = None) -> tuple[list, list, dict]:
    """Each linked image (in `image0`, `image1`, ... order; resized first when `resolution` is
    "resize") is VAE-encoded on its own and appended to `reference_latents` of `positive` and of
    `negative` (the modified positive when no negative is linked). `empty_latent` is zeros shaped
    as the first reference's latent; with no image the conditionings come back as they are and the
    latent is an empty Flux.2-space square (128 channels at 1/16) of 1024 px, or of `megapixels`."""
    import torch

    from nodes.flux_nodes import set_values

    positive = checks.conditioning(positive, "positive")
    negative = None if negative is None else checks.conditioning(negative, "negative")
    choice = (resolution or {}).get("resolution", "keep resolution")
    if choice not in ("keep resolution", "resize"):
        raise NodeInputError("resolution", "'keep resolution' or 'resize'", repr(choice))
    megapixels = None
    if choice == "resize":
        megapixels = checks.number((resolution or {}).get("megapixels", 1.0), "resolution.megapixels", 0.01, 16.0)
    linked = {name: image for name, image in (images or {}).items() if image is not None}
    if linked and vae is None:
        raise NodeInputError("vae", "a VAE to encode the reference images", "no VAE connected")
    vae = None if vae is None else checks.vae(vae)
    latents = []
    for name in sorted(linked, key=lambda item: int(item[len("image"):])):
        image = checks.image_batch(linked[name], f"images.{name}")
        if megapixels is not None:
            image = _to_megapixels(image, megapixels)
        latents.append(vae.encode(image[:, :, :, :3]))
    if not latents:
        side = 1024 if megapixels is None else max(16, round(math.sqrt(megapixels * MEGAPIXEL) / 16) * 16)
        empty = {"samples": torch.zeros(1, FLUX2_LATENT_CHANNELS, side // FLUX2_DOWNSCALE, side // FLUX2_DOWNSCALE),
                 "downscale_ratio_spacial": FLUX2_DOWNSCALE}
        return positive, positive if negative is None else negative, empty
    positive = set_values(positive, {"reference_latents": latents}, append=True)
    negative = positive if negative is None else set_values(negative, {"reference_latents": latents}, append=True)
    return positive, negative, {"samples": torch.zeros_like(latents[0])}

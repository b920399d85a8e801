"""HiDream-O1's nodes (today's ComfyUI, comfy_extras/nodes_hidream_o1.py, V3 nodes), over the
HiDream-O1 family (comfy_core/families/hidream_o1/):

- EmptyHiDreamO1LatentImage: zeros [batch, 3, height, width], the pixel-space "latent";
- HiDreamO1ReferenceImages: reference images (in socket order image_1, image_2, ...) appended to
  the positive and the negative conditioning's `reference_latents` (the negative also marked
  `prompt_type` "negative"); without images both pass through;
- HiDreamO1PatchSeamSmoothing: the shifted-grid blend of late diffusion-model calls, a
  DIFFUSION_MODEL wrapper (comfy_core/families/hidream_o1/seam_smoothing.py).

ModelNoiseScale (nodes/model_sampling_nodes.py) and SamplerLCM (nodes/sampler_nodes.py), which the
templates use with these, are general nodes and live beside their ComfyUI module's others.
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Autogrow, Combo, Float, Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError
from nodes.flux_nodes import set_values

# torch and comfy_core are imported inside the functions that run (registration must not import torch).

MODULE = "comfy_extras.nodes_hidream_o1"
REFERENCE_SLOTS = 100
IMAGE_NAMES = tuple(f"image_{i}" for i in range(1, REFERENCE_SLOTS + 1))
PATTERNS = ["single_shift", "symmetric"]
PASSES = ["2", "4", "ramp_2_4", "ramp_2_4_8"]
BLENDS = ["average", "window", "median"]


@v3_node("EmptyHiDreamO1LatentImage", display_name="Empty HiDream-O1 Latent Image", category="model/latent/hidream",
         python_module=MODULE,
         description=("Empty pixel-space latent for HiDream-O1-Image. The model was trained at ~4 megapixels; lower "
                      "resolutions go off-distribution and quality regresses noticeably. Trained resolutions: "
                      "2048x2048, 2304x1728, 1728x2304, 2560x1440, 1440x2560, 2496x1664, 1664x2496, 3104x1312, "
                      "1312x3104, 2304x1792, 1792x2304."),
         inputs=[Int("width", default=2048, min=64, max=4096, step=32),
                 Int("height", default=2048, min=64, max=4096, step=32),
                 Int("batch_size", default=1, min=1, max=64)],
         outputs=[Output("LATENT")])
def empty_hidream_o1_latent_image(width: int, height: int, batch_size: int = 1) -> tuple[dict]:
    """Zeros `[batch, 3, height, width]`."""
    import torch

    width = checks.integer(width, "width", 64, 4096)
    height = checks.integer(height, "height", 64, 4096)
    batch_size = checks.integer(batch_size, "batch_size", 1, 64)
    return ({"samples": torch.zeros((batch_size, 3, height, width))},)


@v3_node("HiDreamO1ReferenceImages", display_name="HiDream-O1 Reference Images", category="model/conditioning/hidream",
         python_module=MODULE, description="Attach ordered reference images to positive and negative conditioning.",
         search_aliases=["sensenova reference images"],
         inputs=[Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"),
                 Autogrow("images", Socket("image", "IMAGE"), names=IMAGE_NAMES, min=0, optional=True,
                          tooltip="Reference images are used in numeric socket order.")],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")])
def hidream_o1_reference_images(positive: list, negative: list, images: dict[str, Any] | None = None
                                ) -> tuple[list, list]:
    """Both conditionings with the images appended to their `reference_latents`."""
    positive = checks.conditioning(positive, "positive")
    negative = checks.conditioning(negative, "negative")
    images = {name: image for name, image in (images or {}).items() if image is not None}
    ordered = [name for name in IMAGE_NAMES if name in images]
    refs = [checks.image_batch(images[name], name) for name in ordered]
    refs += [checks.image_batch(image, name) for name, image in images.items() if name not in set(ordered)]
    if not refs:
        return positive, negative
    positive = set_values(positive, {"reference_latents": refs}, append=True)
    negative = set_values(set_values(negative, {"prompt_type": "negative"}), {"reference_latents": refs}, append=True)
    return positive, negative


@v3_node("HiDreamO1PatchSeamSmoothing", display_name="HiDream-O1 Patch Seam Smoothing", category="model/patch/hidream",
         python_module=MODULE, experimental=True,
         description=("Average the model output across multiple shifted patch-grid positions during the late "
                      "portion of sampling. Cancels seams."),
         inputs=[Socket("model", "MODEL"),
                 Float("start_percent", default=0.8, min=0.0, max=1.0, step=0.01,
                       tooltip="Sampling progress (0=start, 1=end) at which the blend turns ON."),
                 Float("end_percent", default=1.0, min=0.0, max=1.0, step=0.01,
                       tooltip="Sampling progress at which the blend turns OFF."),
                 Combo("pattern", PATTERNS, default="single_shift",
                       tooltip="Shift layout. single_shift: one pass at the natural patch grid + others offset. "
                               "symmetric: all passes off-grid, shifts split around origin."),
                 Combo("passes", PASSES, default="2",
                       tooltip="Number of passes per gated step. 2/4 = fixed. ramp_*: pass count increases as "
                               "sampling approaches end (more smoothing where seams are most visible)."),
                 Combo("blend", BLENDS, default="average",
                       tooltip="average: equal-weight mean. window: Hann-windowed weighting favoring each pass away "
                               "from its patch boundaries. median: per-pixel median, rejects wraparound-outlier "
                               "passes."),
                 Float("strength", default=1.0, min=0.0, max=1.0, step=0.01,
                       tooltip="Interpolation between the natural-grid pred (0) and the averaged result (1).")],
         outputs=[Output("MODEL")])
def hidream_o1_patch_seam_smoothing(model: Any, start_percent: float, end_percent: float, pattern: str, passes: str,
                                    blend: str, strength: float) -> tuple[Any]:
    """The MODEL itself at strength 0 or an empty range; else a clone with the seam-smoothing
    DIFFUSION_MODEL wrapper between the percents' network timesteps."""
    import torch

    from comfy_core.families.hidream_o1.seam_smoothing import PatchSeamSmoothing
    from comfy_core.wrappers import WrappersMP

    model = checks.model(model)
    start = checks.number(start_percent, "start_percent", 0.0, 1.0)
    end = checks.number(end_percent, "end_percent", 0.0, 1.0)
    strength = checks.number(strength, "strength", 0.0, 1.0)
    for name, value, options in (("pattern", pattern, PATTERNS), ("passes", passes, PASSES), ("blend", blend, BLENDS)):
        if value not in options:
            raise NodeInputError(name, f"one of {options}", repr(value))
    if strength <= 0.0 or end <= start:
        return (model,)
    sampling = model.get_model_object("model_sampling")

    def timestep(percent: float) -> float:
        return float(sampling.timestep(torch.tensor(float(sampling.percent_to_sigma(percent)))))

    patched = model.clone()
    patched.add_wrapper_with_key(WrappersMP.DIFFUSION_MODEL, "hidream_o1_patch_seam_smoothing",
                                 PatchSeamSmoothing(timestep(start), timestep(end), pattern, passes, blend, strength))
    return (patched,)

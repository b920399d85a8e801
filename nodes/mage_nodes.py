"""Mage-Flow's text-encode node with today's ComfyUI name, sockets and semantics
(comfy_extras/nodes_mage.py, the version with `negative_prompt` and the `images` Autogrow group the
templates use):

- TextEncodeMageFlowEdit: positive and negative conditioning and the empty latent for Mage-Flow
  (text-to-image with no image linked) and Mage-Flow-Edit. The output size is `width` x `height`,
  each 0 falling back on its own to the first reference image's size (1024 without images), floored
  to a multiple of 16 (at least 16). Each linked image (`images.image_N`, in N order, the whole
  batch) is used twice: its long edge capped at 384 (bicubic) it is seen by the text encoder's
  vision tower (the tokenizer then takes the edit template, `Image k:` before each), and, with a
  VAE, resized (bicubic, no crop) to the output size it is VAE-encoded into a reference latent,
  appended to both conditionings' `reference_latents` (Mage's RoPE aligns reference and target by
  position). The negative prompt (" " when empty) is encoded with the same images. The latent is
  zeros `[batch_size, 128, height / 16, width / 16]`.

The CLIP is Mage-Flow's (CLIPLoader type "mage", comfy_core/families/mage/clip.py). Difference from
ComfyUI, by house rule (bad input is an error, never silently ignored): a CLIP whose tokenizer does
not keep the images (a text encoder without a vision tower) is a node error naming `clip`.
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Autogrow, Int, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.flux_nodes import set_values

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up).

MODULE = "comfy_extras.nodes_mage"
CATEGORY = "model/conditioning/mage"
DESCRIPTION = ("Encode an edit instruction with one or more reference images for Mage-Flow-Edit. Reference latents "
               "are resized to the output resolution (width/height, or the first image's size when 0). Use the "
               "latent output for sampling so the sizes always match.")
IMAGES_TOOLTIP = "Reference image(s) to edit. All references are resized to the output resolution before encoding."
WIDTH_TOOLTIP = "Output width. 0 = use the first reference image's size."
HEIGHT_TOOLTIP = "Output height. 0 = use the first reference image's size."
IMAGE_NAMES = tuple(f"image_{number}" for number in range(1, 17))
VISION_LONG_EDGE = 384  # upstream's `vl_cond_long_edge`
MULTIPLE = 16  # the VAE's 16x, one token per latent pixel
DEFAULT_SIDE = 1024
LATENT_CHANNELS = 128


def output_size(width: int, height: int, first: Any) -> tuple[int, int]:
    """(width, height) of the output: a 0 side from the first image `[B, H, W, C]` (1024 without
    one), then floored to a multiple of 16, at least 16."""
    if width == 0 or height == 0:
        ref_h, ref_w = (first.shape[1], first.shape[2]) if first is not None else (DEFAULT_SIDE, DEFAULT_SIDE)
        height, width = height or ref_h, width or ref_w
    return max(MULTIPLE, width // MULTIPLE * MULTIPLE), max(MULTIPLE, height // MULTIPLE * MULTIPLE)


def vision_copy(samples: Any) -> Any:
    """samples `[B, C, H, W]` -> RGB IMAGE with the long edge at most 384 (bicubic, aspect kept)."""
    from comfy_core.image.resize import upscale_samples

    long_edge = max(samples.shape[2], samples.shape[3])
    if long_edge > VISION_LONG_EDGE:
        scale = VISION_LONG_EDGE / long_edge
        width, height = max(1, round(samples.shape[3] * scale)), max(1, round(samples.shape[2] * scale))
        samples = upscale_samples(samples, width, height, "bicubic", "disabled")
    return samples.movedim(1, -1)[..., :3]  # the vision tower reads RGB (ComfyUI's drops alpha there)


@v3_node("TextEncodeMageFlowEdit", display_name="TextEncodeMageFlowEdit", category=CATEGORY, python_module=MODULE,
         description=DESCRIPTION,
         inputs=[Socket("clip", "CLIP"),
                 String("prompt", multiline=True, dynamicPrompts=True),
                 String("negative_prompt", multiline=True, dynamicPrompts=True, advanced=True),
                 Socket("vae", "VAE", optional=True),
                 Autogrow("images", Socket("image", "IMAGE"), names=IMAGE_NAMES, min=0, tooltip=IMAGES_TOOLTIP),
                 Int("width", default=0, min=0, max=8192, step=16, tooltip=WIDTH_TOOLTIP),
                 Int("height", default=0, min=0, max=8192, step=16, tooltip=HEIGHT_TOOLTIP),
                 Int("batch_size", default=1, min=1, max=4096)],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")])
def text_encode_mage_flow_edit(clip: Any, prompt: str, negative_prompt: str = "", vae: Any = None,
                               images: dict[str, Any] | None = None, width: int = 0, height: int = 0,
                               batch_size: int = 1) -> tuple[list, list, dict]:
    """Mage-Flow(-Edit)'s conditionings and empty latent; see the module doc."""
    import torch

    from comfy_core.image.resize import upscale_samples

    clip = checks.clip(clip)
    prompt = checks.text(prompt, "prompt")
    negative_prompt = checks.text(negative_prompt, "negative_prompt")
    vae = None if vae is None else checks.vae(vae)
    linked = {name: image for name, image in (images or {}).items() if image is not None}
    ordered = [(name, checks.image_batch(linked[name], f"images.{name}"))
               for name in sorted(linked, key=lambda item: int(item.rsplit("_", 1)[-1]))]
    width, height = output_size(int(width), int(height), ordered[0][1] if ordered else None)
    seen, references = [], []
    for _name, image in ordered:
        samples = image.movedim(-1, 1)  # [B, C, H, W]
        seen.append(vision_copy(samples))
        if vae is not None:
            if samples.shape[2:] != (height, width):
                samples = upscale_samples(samples, width, height, "bicubic", "disabled")
            references.append(vae.encode(samples.movedim(1, -1)[:, :, :, :3]))
    tokens = clip.tokenize(prompt, images=seen)
    kept = sum(1 for chunks in tokens.values() if isinstance(chunks, list) for chunk in chunks for pair in chunk
               if isinstance(pair, (list, tuple)) and pair and isinstance(pair[0], dict))
    if kept != len(seen):
        raise NodeInputError("clip", "a CLIP whose text encoder reads images (CLIPLoader type mage)",
                             f"{describe(clip)}, whose tokenizer kept {kept} of {len(seen)} images")
    positive = clip.encode_from_tokens_scheduled(tokens)
    negative = clip.encode_from_tokens_scheduled(clip.tokenize(negative_prompt or " ", images=seen))
    if references:
        positive = set_values(positive, {"reference_latents": references}, append=True)
        negative = set_values(negative, {"reference_latents": references}, append=True)
    latent = torch.zeros(batch_size, LATENT_CHANNELS, height // MULTIPLE, width // MULTIPLE)
    return positive, negative, {"samples": latent}

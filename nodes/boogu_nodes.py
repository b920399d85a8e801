"""Boogu-Image's edit node with today's ComfyUI name, sockets and semantics
(comfy_extras/nodes_boogu.py):

- TextEncodeBooguEdit: positive and negative conditioning for Boogu-Image Edit. Each linked image
  (`images.image_N`, in N order, the whole batch) is used twice: resized (area filter) to about
  384x384 pixels it is seen by the text encoder's vision tower in the positive prompt only (the
  tokenizer then picks the edit system prompt), and resized (area) to about one megapixel with
  sides multiples of 16 it is VAE-encoded into a reference latent, appended to both conditionings'
  `reference_latents` (so it cancels under CFG while the instruction is amplified). The negative
  prompt is encoded without images (an empty one takes the "drop" system prompt).

The CLIP is Boogu's (CLIPLoader type "boogu", comfy_core/families/boogu/clip.py). Difference from
ComfyUI, by house rule (bad input is an error, never silently ignored): a CLIP whose tokenizer does
not keep the images (any text encoder without a vision tower) is a node error naming `clip`.
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Autogrow, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.flux_nodes import set_values
from nodes.qwen_image_nodes import scaled_size

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up).

MODULE = "comfy_extras.nodes_boogu"
CATEGORY = "model/conditioning/boogu"
VISION_PIXELS = 384 * 384  # the reference pipeline's cap on the vision tower's image
REFERENCE_PIXELS = 1024 * 1024  # the reference latent's size
REFERENCE_MULTIPLE = 16  # the VAE's 8x times the 2x2 patches
IMAGE_NAMES = tuple(f"image_{number}" for number in range(1, 17))
IMAGES_TOOLTIP = "Reference image(s) to edit. Boogu focuses on one reference per sample; more are allowed."


def _resized(samples: Any, pixels: int, multiple: int, name: str) -> Any:
    """samples [B, C, H, W] -> IMAGE [B, h, w, 3] of about `pixels` (area filter, aspect kept)."""
    from comfy_core.image.resize import upscale_samples

    height, width = scaled_size(samples.shape[2], samples.shape[3], pixels, multiple)
    if height < 1 or width < 1:
        raise NodeInputError(f"images.{name}", "an image large enough to resize",
                             f"an image of {tuple(samples.movedim(1, -1).shape)}")
    return upscale_samples(samples, width, height, "area", "disabled").movedim(1, -1)[:, :, :, :3]


@v3_node("TextEncodeBooguEdit", display_name="TextEncodeBooguEdit", category=CATEGORY, python_module=MODULE,
         inputs=[Socket("clip", "CLIP"),
                 String("prompt", multiline=True, dynamicPrompts=True),
                 String("negative_prompt", multiline=True, dynamicPrompts=True, advanced=True),
                 Socket("vae", "VAE"),
                 Autogrow("images", Socket("image", "IMAGE"), names=IMAGE_NAMES, min=0, tooltip=IMAGES_TOOLTIP)],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")])
def text_encode_boogu_edit(clip: Any, prompt: str, negative_prompt: str, vae: Any = None,
                           images: dict[str, Any] | None = None) -> tuple[list, list]:
    """Boogu-Image Edit's positive (prompt + vision tokens + reference latents) and negative
    (negative prompt + reference latents) conditioning; see the module doc."""
    clip = checks.clip(clip)
    prompt = checks.text(prompt, "prompt")
    negative_prompt = checks.text(negative_prompt, "negative_prompt")
    vae = None if vae is None else checks.vae(vae)
    seen, references = [], []
    linked = {name: image for name, image in (images or {}).items() if image is not None}
    for name in sorted(linked, key=lambda item: int(item.rsplit("_", 1)[-1])):
        samples = checks.image_batch(linked[name], f"images.{name}").movedim(-1, 1)  # [B, C, H, W]
        seen.append(_resized(samples, VISION_PIXELS, 1, name))
        if vae is not None:
            references.append(vae.encode(_resized(samples, REFERENCE_PIXELS, REFERENCE_MULTIPLE, name)))
    tokens = clip.tokenize(prompt, images=seen)
    kept = sum(1 for chunks in tokens.values() if isinstance(chunks, list) for chunk in chunks for pair in chunk
               if isinstance(pair, (list, tuple)) and pair and isinstance(pair[0], dict))
    if kept != len(seen):
        raise NodeInputError("clip", "a CLIP whose text encoder reads images (CLIPLoader type boogu)",
                             f"{describe(clip)}, whose tokenizer kept {kept} of {len(seen)} images")
    positive = clip.encode_from_tokens_scheduled(tokens)
    negative = clip.encode_from_tokens_scheduled(clip.tokenize(negative_prompt))
    if references:
        positive = set_values(positive, {"reference_latents": references}, append=True)
        negative = set_values(negative, {"reference_latents": references}, append=True)
    return positive, negative

"""Ming-Image's edit node with today's ComfyUI name, sockets and semantics
(comfy_extras/nodes_ming.py):

- TextEncodeMingImageEdit: the prompt's conditioning for Ming-Image 0.1 Design. Each linked image
  (`images.image_1` .. `images.image_8`, in number order) is seen, RGB, by the text encoder's vision
  tower (one `<image>` block per image leads the prompt; comfy_core/families/ming_image/clip.py);
  when a VAE is given, every image is resized (bilinear, no crop) to the first image's size and
  VAE-encoded into a reference latent appended to the conditioning's `reference_latents`, which the
  DiT appends to its image tokens as clean frames. Without images it is the plain prompt.

The CLIP is Ming-Image's text encoder (CLIPLoader, any type, e.g. the template's "qwen_image").
Difference from ComfyUI, by house rule (bad input is an error, never silently ignored): a CLIP whose
tokenizer does not keep the images (any text encoder but Ming's) is a node error naming `clip`.
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Autogrow, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.flux_nodes import set_values

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up).

MODULE = "comfy_extras.nodes_ming"
CATEGORY = "model/conditioning/ming image"
IMAGE_NAMES = tuple(f"image_{number}" for number in range(1, 9))
VAE_TOOLTIP = "Without a VAE the images only condition the text encoder through the vision tower."
IMAGES_TOOLTIP = ("Optional reference images, seen by the text encoder and appended to the latent sequence as clean "
                  "frames. The first image sets the canvas; the others are resized to it.")


@v3_node("TextEncodeMingImageEdit", display_name="Text Encode Ming Image Edit", category=CATEGORY,
         python_module=MODULE,
         inputs=[Socket("clip", "CLIP"),
                 Socket("vae", "VAE", optional=True, tooltip=VAE_TOOLTIP),
                 String("prompt", multiline=True, dynamicPrompts=True),
                 Autogrow("images", Socket("image", "IMAGE"), names=IMAGE_NAMES, min=0, tooltip=IMAGES_TOOLTIP)],
         outputs=[Output("CONDITIONING")])
def text_encode_ming_image_edit(clip: Any, prompt: str, images: dict[str, Any] | None = None,
                                vae: Any = None) -> tuple[list]:
    """The prompt with the images seen by the vision tower, their latents (on the first image's
    canvas) as `reference_latents` when a VAE is given; see the module doc."""
    from comfy_core.image.resize import upscale_samples

    clip = checks.clip(clip)
    prompt = checks.text(prompt, "prompt")
    vae = None if vae is None else checks.vae(vae)
    linked = {name: image for name, image in (images or {}).items() if image is not None}
    ordered = [checks.image_batch(linked[name], f"images.{name}")
               for name in sorted(linked, key=lambda item: int(item.rsplit("_", 1)[-1]))]
    tokens = clip.tokenize(prompt, images=[image[:, :, :, :3] for image in ordered])
    kept = sum(1 for chunks in tokens.values() if isinstance(chunks, list) for chunk in chunks for pair in chunk
               if isinstance(pair, (list, tuple)) and pair and isinstance(pair[0], dict) and pair[0].get("type") == "image")
    if kept != len(ordered):
        raise NodeInputError("clip", "a CLIP whose text encoder reads images (Ming-Image's text encoder)",
                             f"{describe(clip)}, whose tokenizer kept {kept} of {len(ordered)} images")
    conditioning = clip.encode_from_tokens_scheduled(tokens)
    if vae is not None and ordered:
        height, width = ordered[0].shape[1:3]  # the first image's canvas, as the vendor processor
        references = [vae.encode(upscale_samples(image.movedim(-1, 1), width, height, "bilinear", "disabled")
                                 .movedim(1, -1)) for image in ordered]
        conditioning = set_values(conditioning, {"reference_latents": references}, append=True)
    return (conditioning,)

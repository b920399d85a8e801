"""Z-Image Omni's prompt node with today's ComfyUI name, sockets and semantics
(comfy_extras/nodes_zimage.py):

- TextEncodeZImageOmni (experimental): the prompt's conditioning for Z-Image Omni with up to three
  reference images (`image1`..`image3`, the linked ones in that order). With images, the prompt is
  encoded in the template `<|vision_end|>{prompt}<|im_end|>\\n<|im_start|>assistant\\n<|vision_start|>`
  and one text per reference plus a closing one are encoded on their own (template `{}`):
  `<|im_start|>user\\n<|vision_start|>`, then `<|vision_end|><|vision_start|>` for each further
  image, then `<|vision_end|><|im_end|>`; their states (each `[1, T, width]`) are appended to the
  conditioning's `reference_latents_text_embeds`. With an `image_encoder` (a CLIP_VISION, SigLIP
  for Omni) each image's `encode_image` output is appended to `clip_vision_outputs`; with a `vae`
  each image is VAE-encoded (first resized by area to about 1024x1024 pixels, sides multiples of
  8, when `auto_resize_images`) and appended to `reference_latents`. Without images the prompt is
  encoded in the CLIP's own template and nothing is added.

The network reads these as ComfyUI's `model_base.Lumina2` passes them (comfy_core/families/zimage:
`ZImageConditions`, `NextDiT.forward_omni`): reference latents make the Omni forward; the text
embeds and SigLIP states ride on them (without a VAE they are not used).
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Boolean, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.flux_nodes import set_values
from nodes.qwen_image_nodes import scaled_size

# torch and comfy_core are imported inside the functions that run: registering this node and
# rendering /object_info must not import torch (server start-up).

MODULE = "comfy_extras.nodes_zimage"
CATEGORY = "advanced/conditioning"
REFERENCE_PIXELS = 1024 * 1024  # auto_resize_images: about one megapixel
REFERENCE_MULTIPLE = 8
IMAGE_NAMES = ("image1", "image2", "image3")
FIRST_TEXT = "<|im_start|>user\n<|vision_start|>"
BETWEEN_TEXT = "<|vision_end|><|vision_start|>"
LAST_TEXT = "<|vision_end|><|im_end|>"
PROMPT_TEMPLATE = "<|vision_end|>{}<|im_end|>\n<|im_start|>assistant\n<|vision_start|>"


def reference_texts(count: int) -> list[str]:
    """The texts encoded beside the prompt for `count` reference images (none without images)."""
    if count == 0:
        return []
    return [FIRST_TEXT] + [BETWEEN_TEXT] * (count - 1) + [LAST_TEXT]


def _resized(image: Any, name: str) -> Any:
    """IMAGE [B, H, W, C] -> resized by area to about 1024x1024 pixels, sides multiples of 8."""
    from comfy_core.image.resize import upscale_samples

    samples = image.movedim(-1, 1)  # [B, C, H, W]
    height, width = scaled_size(samples.shape[2], samples.shape[3], REFERENCE_PIXELS, REFERENCE_MULTIPLE)
    if height < 1 or width < 1:
        raise NodeInputError(name, "an image large enough to resize", f"an image of {tuple(image.shape)}")
    return upscale_samples(samples, width, height, "area", "disabled").movedim(1, -1)


@v3_node("TextEncodeZImageOmni", display_name="TextEncodeZImageOmni", category=CATEGORY, python_module=MODULE,
         experimental=True,
         inputs=[Socket("clip", "CLIP"),
                 Socket("image_encoder", "CLIP_VISION", optional=True),
                 String("prompt", multiline=True, dynamicPrompts=True),
                 Boolean("auto_resize_images", default=True),
                 Socket("vae", "VAE", optional=True),
                 Socket("image1", "IMAGE", optional=True),
                 Socket("image2", "IMAGE", optional=True),
                 Socket("image3", "IMAGE", optional=True)],
         outputs=[Output("CONDITIONING")])
def text_encode_zimage_omni(clip: Any, prompt: str, image_encoder: Any = None, auto_resize_images: bool = True,
                            vae: Any = None, image1: Any = None, image2: Any = None,
                            image3: Any = None) -> tuple[list]:
    """Z-Image Omni's conditioning (see the module doc)."""
    clip = checks.clip(clip)
    prompt = checks.text(prompt, "prompt")
    if image_encoder is not None and not callable(getattr(image_encoder, "encode_image", None)):
        raise NodeInputError("image_encoder", "a CLIP_VISION model (from CLIPVisionLoader)", describe(image_encoder))
    vae = None if vae is None else checks.vae(vae)
    linked = [(name, checks.image_batch(image, name))
              for name, image in zip(IMAGE_NAMES, (image1, image2, image3)) if image is not None]
    encoded, references = [], []
    for name, image in linked:
        if image_encoder is not None:
            encoded.append(image_encoder.encode_image(image))
        if vae is not None:
            references.append(vae.encode(_resized(image, name) if auto_resize_images else image))
    template = PROMPT_TEMPLATE if linked else None
    conditioning = clip.encode_from_tokens_scheduled(clip.tokenize(prompt, llama_template=template))
    texts = [clip.encode_from_tokens_scheduled(clip.tokenize(text, llama_template="{}"))[0][0]
             for text in reference_texts(len(linked))]
    if references:
        conditioning = set_values(conditioning, {"reference_latents": references}, append=True)
    if encoded:
        conditioning = set_values(conditioning, {"clip_vision_outputs": encoded}, append=True)
    if texts:
        conditioning = set_values(conditioning, {"reference_latents_text_embeds": texts}, append=True)
    return (conditioning,)

"""JoyImage Edit's node with today's ComfyUI name, sockets and semantics
(comfy_extras/nodes_joyimage.py):

- TextEncodeJoyImageEdit: the prompt's conditioning for JoyImage Edit. Each linked image
  (`images.image0` .. `images.image5`, in number order; one image each) is resized (bilinear, centre
  crop) to the JoyImage bucket of the nearest aspect ratio (`BUCKETS_1024`: about one megapixel,
  sides multiples of 64), seen by the text encoder's vision tower (the tokenizer then takes the
  image template) and, when a VAE is given, VAE-encoded into a reference latent appended to the
  conditioning's `reference_latents`. The template encodes its negative the same way (an empty
  prompt with the same image), so the reference cancels under CFG while the instruction is amplified.

The CLIP is JoyImage's (CLIPLoader type "joyimage", comfy_core/families/joyimage/clip.py). Difference
from ComfyUI, by house rule (bad input is an error, never silently ignored): a CLIP whose tokenizer
does not keep the images (a text encoder without a vision tower) is a node error naming `clip`.
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Autogrow, Socket, String, Output, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.flux_nodes import set_values

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up).

MODULE = "comfy_extras.nodes_joyimage"
CATEGORY = "model/conditioning/joyimage"
MAX_IMAGES = 6

# (height, width) of the buckets JoyImage was trained on (the release's 1024 bucket list).
BUCKETS_1024: tuple[tuple[int, int], ...] = (
    (512, 1792), (512, 1856), (512, 1920), (512, 1984), (512, 2048),
    (576, 1600), (576, 1664), (576, 1728), (576, 1792),
    (640, 1472), (640, 1536), (640, 1600),
    (704, 1344), (704, 1408), (704, 1472),
    (768, 1216), (768, 1280), (768, 1344),
    (832, 1152), (832, 1216),
    (896, 1088), (896, 1152),
    (960, 1024), (960, 1088),
    (1024, 960), (1024, 1024),
    (1088, 896), (1088, 960),
    (1152, 832), (1152, 896),
    (1216, 768), (1216, 832),
    (1280, 768),
    (1344, 704), (1344, 768),
    (1408, 704),
    (1472, 640), (1472, 704),
    (1536, 640),
    (1600, 576), (1600, 640),
    (1664, 576),
    (1728, 576),
    (1792, 512), (1792, 576),
    (1856, 512),
    (1920, 512),
    (1984, 512),
    (2048, 512),
)


def best_bucket(height: int, width: int) -> tuple[int, int]:
    """The (height, width) bucket whose aspect ratio is nearest `height / width` (the first on ties)."""
    ratio = height / width
    return min(BUCKETS_1024, key=lambda hw: abs(hw[0] / hw[1] - ratio))


def resize_reference(image: Any, name: str) -> Any:
    """IMAGE [1, H, W, C] -> IMAGE [1, h, w, 3] at its bucket (bilinear after a centre crop)."""
    from comfy_core.image.resize import upscale_samples

    image = checks.image_batch(image, name)
    if image.shape[0] != 1:
        raise NodeInputError(name, "one image (JoyImage reference inputs must contain one image each)",
                             f"a batch of {image.shape[0]}")
    samples = image.movedim(-1, 1)
    height, width = best_bucket(samples.shape[2], samples.shape[3])
    return upscale_samples(samples, width, height, "bilinear", "center").movedim(1, -1)[:, :, :, :3]


@v3_node("TextEncodeJoyImageEdit", display_name="TextEncodeJoyImageEdit", category=CATEGORY, python_module=MODULE,
         inputs=[Socket("clip", "CLIP"),
                 String("prompt", multiline=True, dynamicPrompts=True),
                 Socket("vae", "VAE", optional=True),
                 Autogrow("images", Socket("image", "IMAGE"), prefix="image", min=0, max=MAX_IMAGES, optional=True)],
         outputs=[Output("CONDITIONING")])
def text_encode_joyimage_edit(clip: Any, prompt: str, vae: Any = None,
                              images: dict[str, Any] | None = None) -> tuple[list]:
    """The prompt with the images seen by the vision tower, their latents as `reference_latents`
    (when a VAE is given); see the module doc."""
    clip = checks.clip(clip)
    prompt = checks.text(prompt, "prompt")
    vae = None if vae is None else checks.vae(vae)
    linked = {name: image for name, image in (images or {}).items() if image is not None}
    order = sorted(linked, key=lambda item: int(item[len("image"):]) if item[len("image"):].isdigit() else 10 ** 6)
    resized = [resize_reference(linked[name], f"images.{name}") for name in order]
    tokens = clip.tokenize(prompt, images=resized)
    kept = sum(1 for chunks in tokens.values() if isinstance(chunks, list) for chunk in chunks for pair in chunk
               if isinstance(pair, (list, tuple)) and pair and isinstance(pair[0], dict))
    if kept != len(resized):
        raise NodeInputError("clip", "a CLIP whose text encoder reads images (CLIPLoader type joyimage)",
                             f"{describe(clip)}, whose tokenizer kept {kept} of {len(resized)} images")
    conditioning = clip.encode_from_tokens_scheduled(tokens)
    if vae is not None and resized:
        conditioning = set_values(conditioning, {"reference_latents": [vae.encode(image) for image in resized]},
                                  append=True)
    return (conditioning,)

"""Qwen-Image-Edit's prompt nodes with today's ComfyUI names, sockets and semantics
(comfy_extras/nodes_qwen.py):

- TextEncodeQwenImageEdit: the prompt in Qwen-Image-Edit's template with the input image (resized
  to about one megapixel, area filter, its first batch entry seen by the vision tower); with a VAE,
  the resized image's latent is appended to the conditioning's `reference_latents`.
- TextEncodeQwenImageEditPlus (Edit 2509 / 2511): up to three images, each announced in the prompt as
  `Picture N: <vision block>` (N the input's number), seen by the vision tower at about 384x384
  pixels, with the edit system prompt as the template; with a VAE, each image resized to about one
  megapixel (sides multiples of 8) becomes a reference latent, in order.
- EmptyQwenImageLayeredLatentImage (Qwen-Image-Layered): zeros `[batch, 16, layers + 1, height // 8,
  width // 8]`, one frame for the composite and one per RGBA layer (LatentCutToBatch on dim "t"
  splits them for VAEDecode).
- TextEncodeQwenImage21 (Qwen-Image 2.1): positive and negative conditioning from up to 16 reference
  images (`images.image_N`), each resized once (lanczos, about `resolution`^2 pixels, sides multiples
  of 32) for the text encoder (alpha over white) and the VAE (all channels, as reference latents),
  plus the 64-channel 1/16 empty latent on the first reference's size
  (comfy_core/families/qwen_image/qwen21.py holds the rules).
- QwenImage21Cache: a MODEL clone carrying the prefix key/value cache's device and precision in
  `transformer_options["qwen_image21_cache"]`.

TextEncodeQwenImage21's images go through the CLIP's vision tower: Qwen3-VL-8B's for Qwen-Image 2.1
(CLIPLoader type "qwen_image" given a Qwen3-VL file, comfy_core/families/qwen_image21/clip.py), whose
tokenizer takes `keep_vision` and whose encoder gives `image_slots` when the vision tokens are dropped.

Differences from ComfyUI, by house rule (bad input is an error, never silently ignored): an image
given with a CLIP whose text encoder cannot read images (anything but Qwen2.5-VL and Qwen3-VL) is a
node error naming `clip` (ComfyUI's other tokenizers drop the images).
"""
from __future__ import annotations

import math
from typing import Any

from graph.native import MAX_RESOLUTION
from graph.v3_schema import Autogrow, Combo, Int, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.flux_nodes import set_values

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up).

MODULE = "comfy_extras.nodes_qwen"
CATEGORY = "model/conditioning/qwen image"
EDIT_PIXELS = 1024 * 1024  # the reference (and Edit's vision) image size
PLUS_VISION_PIXELS = 384 * 384  # Edit Plus: what the vision tower sees of each image


def _edit_plus_template() -> str:
    """Edit Plus's template: the edit system prompt, the user turn without a vision block (the
    prompt carries one per picture)."""
    from comfy_core.families.qwen_image.clip import LLAMA_TEMPLATE_IMAGES, VISION_BLOCK

    return LLAMA_TEMPLATE_IMAGES.replace(VISION_BLOCK, "", 1)


def scaled_size(height: int, width: int, pixels: int, multiple: int = 1) -> tuple[int, int]:
    """(height, width) scaled to about `pixels` keeping the aspect, rounded (to multiples of
    `multiple` when given), as ComfyUI's nodes compute them."""
    scale = math.sqrt(pixels / (width * height))
    if multiple == 1:
        return round(height * scale), round(width * scale)
    return round(height * scale / multiple) * multiple, round(width * scale / multiple) * multiple


def _resized(image: Any, pixels: int, multiple: int = 1) -> Any:
    """IMAGE [B, H, W, C] -> its first three channels resized (area filter) to about `pixels`."""
    samples = image.movedim(-1, 1)  # [B, C, H, W]
    height, width = scaled_size(samples.shape[2], samples.shape[3], pixels, multiple)
    if height < 1 or width < 1:
        raise NodeInputError("image", "an image large enough to resize", f"an image of {tuple(image.shape)}")
    from comfy_core.image.resize import upscale_samples

    return upscale_samples(samples, width, height, "area", "disabled").movedim(1, -1)[:, :, :, :3]


def _encode(clip: Any, text: str, images: list, **kwargs: Any) -> list:
    """The conditioning of `text` with `images` for the vision tower; refuses a CLIP that drops them."""
    from comfy_core.families.qwen_image.clip import QwenImagePromptError

    try:
        tokens = clip.tokenize(text, images=images, **kwargs)
    except QwenImagePromptError as exc:
        raise NodeInputError("prompt", "a prompt with no more image placeholders than images", str(exc)) from exc
    seen = sum(1 for chunks in tokens.values() if isinstance(chunks, list) for chunk in chunks for pair in chunk
               if isinstance(pair, (list, tuple)) and pair and isinstance(pair[0], dict))
    if seen != len(images):
        raise NodeInputError("clip", "a CLIP whose text encoder reads images (CLIPLoader type qwen_image)",
                             f"{describe(clip)}, whose tokenizer kept {seen} of {len(images)} images")
    return clip.encode_from_tokens_scheduled(tokens)


@v3_node("TextEncodeQwenImageEdit", display_name="Text Encode Qwen Image Edit", category=CATEGORY,
         python_module=MODULE,
         inputs=[Socket("clip", "CLIP"),
                 String("prompt", multiline=True, dynamicPrompts=True),
                 Socket("vae", "VAE", optional=True),
                 Socket("image", "IMAGE", optional=True)],
         outputs=[Output("CONDITIONING")])
def text_encode_qwen_image_edit(clip: Any, prompt: str, vae: Any = None, image: Any = None) -> tuple[list]:
    """The prompt (with the image, when given) encoded for Qwen-Image-Edit; the image's latent as
    the reference when a VAE is given."""
    clip = checks.clip(clip)
    prompt = checks.text(prompt, "prompt")
    images, reference = [], None
    if image is not None:
        resized = _resized(checks.image_batch(image, "image"), EDIT_PIXELS)
        images = [resized]
        if vae is not None:
            reference = checks.vae(vae).encode(resized)
    conditioning = _encode(clip, prompt, images)
    if reference is not None:
        conditioning = set_values(conditioning, {"reference_latents": [reference]}, append=True)
    return (conditioning,)


@v3_node("TextEncodeQwenImageEditPlus", display_name="Text Encode Qwen Image Edit Plus", category=CATEGORY,
         python_module=MODULE,
         inputs=[Socket("clip", "CLIP"),
                 String("prompt", multiline=True, dynamicPrompts=True),
                 Socket("vae", "VAE", optional=True),
                 Socket("image1", "IMAGE", optional=True),
                 Socket("image2", "IMAGE", optional=True),
                 Socket("image3", "IMAGE", optional=True)],
         outputs=[Output("CONDITIONING")])
def text_encode_qwen_image_edit_plus(clip: Any, prompt: str, vae: Any = None, image1: Any = None,
                                     image2: Any = None, image3: Any = None) -> tuple[list]:
    """The prompt after one `Picture N:` vision block per given image, in the edit template; each
    image's about-one-megapixel latent as a reference when a VAE is given."""
    clip = checks.clip(clip)
    prompt = checks.text(prompt, "prompt")
    vae = None if vae is None else checks.vae(vae)
    from comfy_core.families.qwen_image.clip import VISION_BLOCK

    seen, references, announced = [], [], ""
    for number, image in enumerate((image1, image2, image3), start=1):
        if image is None:
            continue
        image = checks.image_batch(image, f"image{number}")
        seen.append(_resized(image, PLUS_VISION_PIXELS))
        if vae is not None:
            references.append(vae.encode(_resized(image, EDIT_PIXELS, multiple=8)))
        announced += f"Picture {number}: {VISION_BLOCK}"
    conditioning = _encode(clip, announced + prompt, seen, llama_template=_edit_plus_template())
    if references:
        conditioning = set_values(conditioning, {"reference_latents": references}, append=True)
    return (conditioning,)


@v3_node("EmptyQwenImageLayeredLatentImage", display_name="Empty Qwen Image Layered Latent",
         category="model/latent/qwen", python_module=MODULE,
         inputs=[Int("width", default=640, min=16, max=MAX_RESOLUTION, step=16),
                 Int("height", default=640, min=16, max=MAX_RESOLUTION, step=16),
                 Int("layers", default=3, min=0, max=MAX_RESOLUTION, step=1),
                 Int("batch_size", default=1, min=1, max=4096)],
         outputs=[Output("LATENT")])
def empty_qwen_image_layered_latent_image(width: int, height: int, layers: int, batch_size: int = 1) -> tuple[dict]:
    """Zeros `[batch, 16, layers + 1, height // 8, width // 8]`: Qwen-Image-Layered's latent, the
    composite image and each layer one frame of the 16-channel VAE latent."""
    import torch

    width = checks.integer(width, "width", 16, MAX_RESOLUTION)
    height = checks.integer(height, "height", 16, MAX_RESOLUTION)
    layers = checks.integer(layers, "layers", 0, MAX_RESOLUTION)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    return ({"samples": torch.zeros((batch_size, 16, layers + 1, height // 8, width // 8))},)


# -- Qwen-Image 2.1 ----------------------------------------------------------------------------------

QWEN21_RESOLUTION_TOOLTIP = (
    "Reference images are resized to about resolution x resolution pixels, at multiples of 32, preserving aspect "
    "ratio. 0 keeps each reference at its own size, rounded to a multiple of 32. ")
QWEN21_IMAGES_TOOLTIP = "Reference images, seen by the text encoder and spliced into the sequence as VAE latents."
QWEN21_LATENT_TOOLTIP = ("Empty latent on the first reference image's size, to match with sampling as any other "
                         "size shifts the edit.")
QWEN21_REFERENCE_NAMES = tuple(f"image_{number}" for number in range(1, 17))
QWEN21_DEFAULT_SIZE = 1024  # the latent's side with no reference image and resolution 0


def _qwen21_reference(image: Any, resolution: int, name: str) -> Any:
    """IMAGE [B, H, W, C] -> its first entry at Qwen-Image 2.1's reference size (lanczos, as given
    when the size already fits), all channels kept."""
    from comfy_core.families.qwen_image.qwen21 import QwenImage21Error, reference_size
    from comfy_core.image.resize import upscale_samples

    image = checks.image_batch(image, f"images.{name}")[:1]  # one reference per input
    try:
        height, width = reference_size(image.shape[1], image.shape[2], resolution)
    except QwenImage21Error as exc:
        raise NodeInputError(f"images.{name}", "an image with pixels", str(exc)) from exc
    if (height, width) == (image.shape[1], image.shape[2]):
        return image
    return upscale_samples(image.movedim(-1, 1), width, height, "lanczos", "disabled").movedim(1, -1)


@v3_node("TextEncodeQwenImage21", display_name="Text Encode Qwen Image 2.1", category=CATEGORY,
         python_module=MODULE,
         inputs=[Socket("clip", "CLIP"),
                 String("prompt", multiline=True, dynamicPrompts=True),
                 String("negative_prompt", multiline=True, dynamicPrompts=True),
                 Socket("vae", "VAE", optional=True),
                 Int("resolution", default=1024, min=0, max=4096, step=32, tooltip=QWEN21_RESOLUTION_TOOLTIP),
                 Autogrow("images", Socket("image", "IMAGE"), names=QWEN21_REFERENCE_NAMES, min=0,
                          tooltip=QWEN21_IMAGES_TOOLTIP)],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"),
                  Output("LATENT", "latent", tooltip=QWEN21_LATENT_TOOLTIP)])
def text_encode_qwen_image21(clip: Any, prompt: str, negative_prompt: str, vae: Any = None, resolution: int = 1024,
                             images: dict[str, Any] | None = None) -> tuple[list, list, dict]:
    """Qwen-Image 2.1's positive and negative conditioning and its empty latent.

    Each linked reference (in `image_N` order, first batch entry) is resized once for both the text
    encoder (alpha composited over white) and the VAE (all channels); with a VAE the references'
    latents go to both conditionings' `reference_latents` and the encoder drops the vision tokens
    (`keep_vision` false), without one the image conditions through the encoder alone. The latent
    is zeros [1, 64, h // 16, w // 16] on the first reference's size, else resolution (1024 for 0)."""
    from comfy_core.families.qwen_image.qwen21 import empty_latent, over_white

    clip = checks.clip(clip)
    prompt = checks.text(prompt, "prompt")
    negative_prompt = checks.text(negative_prompt, "negative_prompt")
    resolution = checks.integer(resolution, "resolution", 0, 4096)
    vae = None if vae is None else checks.vae(vae)
    seen, references = [], []
    height = width = resolution or QWEN21_DEFAULT_SIZE
    linked = {name: image for name, image in (images or {}).items() if image is not None}
    for name in sorted(linked, key=lambda item: int(item.rsplit("_", 1)[-1])):
        reference = _qwen21_reference(linked[name], resolution, name)
        if not seen:
            height, width = reference.shape[1], reference.shape[2]
        seen.append(over_white(reference))
        if vae is not None:
            references.append(vae.encode(reference))
    keep_vision = not references
    positive = _encode(clip, prompt, seen, keep_vision=keep_vision, prevent_empty_text=True)
    negative = _encode(clip, negative_prompt, seen, keep_vision=keep_vision, prevent_empty_text=True)
    if references:
        positive = set_values(positive, {"reference_latents": references}, append=True)
        negative = set_values(negative, {"reference_latents": references}, append=True)
    return positive, negative, {"samples": empty_latent(height, width)}


@v3_node("QwenImage21Cache", display_name="Qwen Image 2.1 Cache", category=CATEGORY, python_module=MODULE,
         experimental=True,
         description=("Allows setting the KV cache device and quantization, by default the model uses the auto "
                      "-option. Quantization potentially speeds up edit workflows when memory starved "),
         inputs=[Socket("model", "MODEL"),
                 Combo("device", ["auto", "gpu", "cpu", "off"], default="auto",
                       tooltip=("auto uses spare VRAM, then RAM. cpu (RAM) is prefetched behind compute and costs "
                                "little speed. off recomputes the prefix every step, which is slower but is the one "
                                "way to rule the cache out.")),
                 Combo("dtype", ["default", "int8", "int4"], default="default",
                       tooltip=("Storage precision. default is lossless. int8 halves the cache at about bf16 "
                                "accuracy, int4 quarters it but roughly doubles the per-step error."))],
         outputs=[Output("MODEL")])
def qwen_image21_cache(model: Any, device: str, dtype: str) -> tuple[Any]:
    """A clone of `model` whose transformer_options carry Qwen-Image 2.1's prefix (text and
    reference) key/value cache settings (`qwen_image21_cache`: device and storage precision)."""
    from comfy_core.families.qwen_image.qwen21 import (CACHE_DEVICES, CACHE_DTYPES, PrefixCacheSettings,
                                                       with_cache_settings)

    model = checks.model(model)
    settings = PrefixCacheSettings(checks.choice(device, CACHE_DEVICES, "device"),
                                   checks.choice(dtype, CACHE_DTYPES, "dtype"))
    patched = model.clone()
    patched.model_options["transformer_options"] = with_cache_settings(
        patched.model_options.get("transformer_options") or {}, settings)
    return (patched,)

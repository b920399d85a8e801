"""Fibo 2.0's text-encode node with today's ComfyUI name and sockets (comfy_extras/nodes_fibo2.py is not
stored anywhere we could read: the schema is reconstructed from ComfyUI's embedded docs and the
templates `image_fibo2_edit_dev_pe` / `image_fibo2_edit_turbo_pe`; the behaviour is theirs and the
reference pipeline's, diffusers' `BriaFibo2Pipeline`):

- TextEncodeFibo2: positive and negative conditioning and the empty latent for Fibo 2.0, text-to-image
  with no image linked, an edit otherwise. The images are the linked `images.image_N` in N order, each
  frame of a batch one image.
- Size: `width` / `height` floored to a multiple of 16 (at least 16); a 0 takes the trained bucket's
  side for the first image's aspect ratio (about 1 MP: comfy_core/families/fibo2/prompt.py's
  `bucket_size`), or 1024 without images.
- One image is scaled to cover the result's size (Lanczos, sides rounded up) and centre-cropped to it,
  since the edit lines up with it pixel for pixel; several images are each scaled and cropped so to
  their own trained bucket. With a VAE the crops are encoded into `reference_latents` on both outputs;
  the text encoder sees each crop with its long side at most 768 (bicubic; the pipeline's thumbnail).
- The prompt: with images, the edit prompt (a vision marker per image, the result's caption when the
  prompt is a JSON caption with an `edit_instruction`, then the instruction); without, a JSON caption
  cleaned and compacted as training saw it, other text as it is. The negative prompt is encoded text
  only, as written; empty is Fibo 2.0's null caption.
- The latent is zeros `[batch_size, 128, height / 16, width / 16]`.

The CLIP is Fibo 2.0's (CLIPLoader type "fibo2", comfy_core/families/fibo2/clip.py). Differences from
the pipeline: its drawn images of a caption's `text_render` texts are not made. By house rule bad input
is an error: an edit prompt that is a JSON object without `edit_instruction`, or a CLIP whose tokenizer
does not keep the images, is a node error naming the input.
"""
from __future__ import annotations

import math
from typing import Any

from graph.v3_schema import Autogrow, Int, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.flux_nodes import set_values

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up).

MODULE = "comfy_extras.nodes_fibo2"
CATEGORY = "model/conditioning/fibo2"
DESCRIPTION = ("Encode a Fibo 2.0 prompt into conditioning and a matching empty latent. The prompt is either plain "
               "text or a structured JSON caption; with images connected it becomes the edit instruction, or a JSON "
               "caption of the result with an edit_instruction key, and the images act as reference latents for both "
               "outputs when a VAE is connected. Sample the latent output, whose size is the size the images are "
               "cropped to.")
IMAGE_NAMES = tuple(f"image_{number}" for number in range(1, 17))
MULTIPLE = 16
DEFAULT_SIDE = 1024
LATENT_CHANNELS = 128
VISION_SIDE = 768  # the longest side Qwen3-VL sees an image at


def output_size(width: int, height: int, first: Any) -> tuple[int, int]:
    """(width, height) of the result: a 0 side from the first image's `[B, H, W, C]` trained bucket
    (1024 without one), then floored to a multiple of 16, at least 16."""
    from comfy_core.families.fibo2.prompt import bucket_size

    if width == 0 or height == 0:
        bucket = (DEFAULT_SIDE, DEFAULT_SIDE) if first is None else bucket_size(first.shape[2] / first.shape[1])
        width, height = width or bucket[0], height or bucket[1]
    return max(MULTIPLE, width // MULTIPLE * MULTIPLE), max(MULTIPLE, height // MULTIPLE * MULTIPLE)


def cover_crop(samples: Any, width: int, height: int) -> Any:
    """samples `[1, C, H, W]` scaled (Lanczos) to cover `width` x `height`, sides rounded up, then the
    centre cut out (the pipeline's `_resize_and_crop`)."""
    from comfy_core.image.resize import upscale_samples

    h, w = samples.shape[2], samples.shape[3]
    scale = max(height / h, width / w)
    scaled_w, scaled_h = math.ceil(w * scale), math.ceil(h * scale)
    if (scaled_w, scaled_h) != (w, h):
        samples = upscale_samples(samples, scaled_w, scaled_h, "lanczos", "disabled")
    left, top = (scaled_w - width) // 2, (scaled_h - height) // 2
    return samples[:, :, top:top + height, left:left + width]


def vision_copy(samples: Any) -> Any:
    """A crop `[1, C, H, W]` -> the RGB IMAGE Qwen3-VL sees: the long side at most 768 (bicubic)."""
    from comfy_core.image.resize import upscale_samples

    h, w = samples.shape[2], samples.shape[3]
    if max(h, w) > VISION_SIDE:
        scale = VISION_SIDE / max(h, w)
        samples = upscale_samples(samples, max(1, round(w * scale)), max(1, round(h * scale)), "bicubic", "disabled")
    return samples.clamp(0, 1).movedim(1, -1)[..., :3]


@v3_node("TextEncodeFibo2", display_name="TextEncodeFibo2", category=CATEGORY, python_module=MODULE,
         description=DESCRIPTION,
         inputs=[Socket("clip", "CLIP"),
                 String("prompt", multiline=True, dynamicPrompts=True),
                 String("negative_prompt", multiline=True, dynamicPrompts=True, advanced=True),
                 Socket("vae", "VAE", optional=True),
                 Autogrow("images", Socket("image", "IMAGE"), names=IMAGE_NAMES, min=0),
                 Int("width", default=0, min=0, max=16384, step=16),
                 Int("height", default=0, min=0, max=16384, step=16),
                 Int("batch_size", default=1, min=1, max=4096)],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")])
def text_encode_fibo2(clip: Any, prompt: str, negative_prompt: str = "", vae: Any = None,
                      images: dict[str, Any] | None = None, width: int = 0, height: int = 0,
                      batch_size: int = 1) -> tuple[list, list, dict]:
    """Fibo 2.0's conditionings and empty latent; see the module doc."""
    import torch

    from comfy_core.families.fibo2.prompt import (NULL_CAPTION, Fibo2PromptError, bucket_size, edit_prompt,
                                                  generation_prompt)

    clip = checks.clip(clip)
    prompt = checks.text(prompt, "prompt")
    negative_prompt = checks.text(negative_prompt, "negative_prompt")
    vae = None if vae is None else checks.vae(vae)
    linked = {name: image for name, image in (images or {}).items() if image is not None}
    frames = []
    for name in sorted(linked, key=lambda item: int(item.rsplit("_", 1)[-1])):
        batch = checks.image_batch(linked[name], f"images.{name}")
        frames.extend(batch[i:i + 1].movedim(-1, 1)[:, :3] for i in range(batch.shape[0]))  # [1, C, H, W]
    width, height = output_size(int(width), int(height), frames[0].movedim(1, -1) if frames else None)
    crops = []
    for samples in frames:
        size = (width, height) if len(frames) == 1 else bucket_size(samples.shape[3] / samples.shape[2])
        crops.append(cover_crop(samples, *size))
    if frames:
        try:
            text = edit_prompt(prompt, len(frames))
        except Fibo2PromptError as exc:
            raise NodeInputError("prompt", "an edit instruction, or a JSON caption with an edit_instruction key",
                                 str(exc)) from None
    else:
        text = generation_prompt(prompt)
    seen = [vision_copy(crop) for crop in crops]
    tokens = clip.tokenize(text, images=seen)
    kept = sum(1 for chunks in tokens.values() if isinstance(chunks, list) for chunk in chunks for pair in chunk
               if isinstance(pair, (list, tuple)) and pair and isinstance(pair[0], dict))
    if kept != len(seen):
        raise NodeInputError("clip", "a CLIP whose text encoder reads images (CLIPLoader type fibo2)",
                             f"{describe(clip)}, whose tokenizer kept {kept} of {len(seen)} images")
    positive = clip.encode_from_tokens_scheduled(tokens)
    negative = clip.encode_from_tokens_scheduled(clip.tokenize(negative_prompt or NULL_CAPTION))
    if vae is not None and crops:
        references = [vae.encode(crop.movedim(1, -1)) for crop in crops]
        positive = set_values(positive, {"reference_latents": references}, append=True)
        negative = set_values(negative, {"reference_latents": references}, append=True)
    latent = torch.zeros(batch_size, LATENT_CHANNELS, height // MULTIPLE, width // MULTIPLE)
    return positive, negative, {"samples": latent}

"""Kandinsky 6's latent nodes with today's ComfyUI's names and V1 schemas
(`comfy_extras/nodes_kandinsky6.py`); the work is in comfy_core/families/kandinsky6/latents.py.

- Kandinsky6EmptyLatent: the joint video+audio LATENT of zeros (video `[1, 16, (length-1)/4+1,
  height/8, width/8]`, audio `[1, ceil(length/24 * 44100/1024), 40]`, 24 fps, 44100 Hz).
- Kandinsky6ImageToVideoAudio: with `reference_latent` (one VAEEncode'd frame) appends it after
  the video frames with a noise mask that keeps it clean and marks both conditionings
  `k6_reference_tail`; without one, everything passes through (text to video+audio).
- Kandinsky6RemoveReferenceLatent: drops the appended frame, the mask and the markers after
  sampling, before VAE decoding.

Bad input is a node error naming the input (ComfyUI raises ValueError with the same checks).
"""
from __future__ import annotations

from typing import Any

from graph.native import Input, Int, Output, node
from nodes.errors import NodeInputError

# torch and comfy_core are imported inside the functions that run (registration must not import torch).

MODULE = "comfy_extras.nodes_kandinsky6"
CATEGORY = "Kandinsky 6"
TEMPORAL_FACTOR = 4  # contract.VIDEO_TEMPORAL_FACTOR, repeated here so that the schema needs no import


@node("Kandinsky6EmptyLatent", display_name="Kandinsky 6 Empty Latent (video+audio)", category=CATEGORY,
      python_module=MODULE,
      inputs=[Int("width", default=864, min=256, max=2048, step=16),
              Int("height", default=480, min=256, max=2048, step=16),
              Int("length", default=121, min=1, max=1001, step=TEMPORAL_FACTOR,
                  tooltip=f"Pixel frames. Kandinsky 6 requires {TEMPORAL_FACTOR}*n+1 frames."),
              Int("batch_size", default=1, min=1, max=1)],
      outputs=[Output("LATENT", "joint_latent")])
def kandinsky6_empty_latent(width: int, height: int, length: int, batch_size: int) -> tuple[dict]:
    from comfy_core.families.kandinsky6.latents import Kandinsky6LatentError, empty_joint_latent

    try:
        return (empty_joint_latent(width, height, length, batch_size),)
    except Kandinsky6LatentError as error:
        raise NodeInputError("width/height/length/batch_size", str(error),
                             f"{width}x{height}, {length} frames, batch {batch_size}") from None


@node("Kandinsky6ImageToVideoAudio", display_name="Kandinsky 6 Image to Video+Audio", category=CATEGORY,
      python_module=MODULE,
      inputs=[Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"),
              Input("empty_latent", "LATENT"), Input("reference_latent", "LATENT", optional=True)],
      outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"),
               Output("LATENT", "joint_latent")])
def kandinsky6_image_to_video_audio(positive: list, negative: list, empty_latent: dict,
                                    reference_latent: Any = None) -> tuple[list, list, dict]:
    import nodes.wan_conditioning as wan
    from comfy_core.families.kandinsky6.latents import Kandinsky6LatentError, check_joint, with_reference_tail

    positive, negative = wan.conditionings(positive, negative)
    try:
        check_joint(empty_latent)
    except Kandinsky6LatentError as error:
        raise NodeInputError("empty_latent", str(error), "another latent") from None
    if reference_latent is None:
        return positive, negative, empty_latent
    samples = reference_latent.get("samples") if isinstance(reference_latent, dict) else reference_latent
    try:
        latent = with_reference_tail(empty_latent, samples)
    except Kandinsky6LatentError as error:
        raise NodeInputError("reference_latent", str(error), "another latent") from None
    positive, negative = wan.both(positive, negative, {"k6_reference_tail": True})
    return positive, negative, latent


@node("Kandinsky6RemoveReferenceLatent", display_name="Kandinsky 6 Remove I2VA Reference", category=CATEGORY,
      python_module=MODULE,
      inputs=[Input("joint_latent", "LATENT")],
      outputs=[Output("LATENT", "joint_latent")])
def kandinsky6_remove_reference_latent(joint_latent: dict) -> tuple[dict]:
    from comfy_core.families.kandinsky6.latents import Kandinsky6LatentError, without_reference_tail

    try:
        return (without_reference_tail(joint_latent),)
    except Kandinsky6LatentError as error:
        raise NodeInputError("joint_latent", str(error), "another latent") from None

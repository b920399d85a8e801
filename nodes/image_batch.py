"""Image batch and information nodes of ComfyUI's comfy_extras/nodes_images.py (0.3.64):
RepeatImageBatch, ImageFromBatch, ImageAddNoise, GetImageSize.

ComfyUI's names, sockets and semantics, written here. IMAGE is `[B, H, W, C]` in 0..1.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from graph.context import current
from graph.native import Float, Hidden, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

MODULE = "comfy_extras.nodes_images"
# ComfyUI's binary WebSocket frame type for a node's progress text (protocol.py BinaryEventTypes.TEXT):
# the payload is [u32 big-endian len(node id)][node id][utf-8 text]; the server adds the type.
PROGRESS_TEXT_EVENT = 3


def _int_at_least(value: Any, low: int, input_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise NodeInputError(input_name, f"an int >= {low}", repr(value))
    return value


def progress_text_payload(node_id: str, text: str) -> bytes:
    """The payload of ComfyUI's progress-text frame (`PromptServer.send_progress_text`)."""
    node = str(node_id).encode("utf-8")
    return struct.pack(">I", len(node)) + node + text.encode("utf-8")


@node("RepeatImageBatch", category="image/batch", python_module=MODULE,
      inputs=[Input("image", "IMAGE"), Int("amount", default=1, min=1, max=4096)],
      outputs=[Output("IMAGE")])
def repeat_image_batch(image: torch.Tensor, amount: int) -> tuple[torch.Tensor]:
    """The whole batch `amount` times, one copy after the other."""
    image = checks.image_batch(image, "image")
    return (image.repeat((_int_at_least(amount, 1, "amount"), 1, 1, 1)),)


@node("ImageFromBatch", category="image/batch", python_module=MODULE,
      inputs=[Input("image", "IMAGE"), Int("batch_index", default=0, min=0, max=4095),
              Int("length", default=1, min=1, max=4096)],
      outputs=[Output("IMAGE")])
def image_from_batch(image: torch.Tensor, batch_index: int, length: int) -> tuple[torch.Tensor]:
    """Images batch_index .. batch_index + length - 1, clamped to the batch (an index past the end
    takes the last image), as a copy."""
    image = checks.image_batch(image, "image")
    start = min(image.shape[0] - 1, _int_at_least(batch_index, 0, "batch_index"))
    count = min(image.shape[0] - start, _int_at_least(length, 1, "length"))
    return (image[start:start + count].clone(),)


@node("ImageAddNoise", category="image", python_module=MODULE,
      inputs=[Input("image", "IMAGE"),
              Int("seed", default=0, min=0, max=0xFFFFFFFFFFFFFFFF, control_after_generate=True,
                  tooltip="The random seed used for creating the noise."),
              Float("strength", default=0.5, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("IMAGE")])
def image_add_noise(image: torch.Tensor, seed: int, strength: float) -> tuple[torch.Tensor]:
    """`clip(image + strength * noise, 0, 1)` with Gaussian noise from `seed` (ComfyUI's stream)."""
    from comfy_core.image.noise import add_seeded_noise

    image = checks.image_batch(image, "image")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 0xFFFFFFFFFFFFFFFF:
        raise NodeInputError("seed", "an int in 0..2^64-1", repr(seed))
    if isinstance(strength, bool) or not isinstance(strength, (int, float)):
        raise NodeInputError("strength", "a FLOAT", repr(strength))
    return (add_seeded_noise(image, seed, float(strength)),)


@node("GetImageSize", category="image", display_name="Get Image Size", python_module=MODULE,
      description="Returns width and height of the image, and passes it through unchanged.",
      inputs=[Input("image", "IMAGE"), Hidden("unique_id", "UNIQUE_ID")],
      outputs=[Output("INT", "width"), Output("INT", "height"), Output("INT", "batch_size")])
def get_image_size(image: torch.Tensor, unique_id: str | None = None) -> tuple[int, int, int]:
    """Width, height and batch size; the editor shows them on the node (ComfyUI's progress text)."""
    image = checks.image_batch(image, "image")
    batch, height, width = int(image.shape[0]), int(image.shape[1]), int(image.shape[2])
    ctx = current()
    if unique_id and ctx is not None:
        ctx.send(PROGRESS_TEXT_EVENT, progress_text_payload(
            unique_id, f"width: {width}, height: {height}\n batch size: {batch}"))
    return (width, height, batch)

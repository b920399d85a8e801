"""Bernini-R's node, its V3 schema as today's ComfyUI declares it (`comfy_extras/nodes_bernini.py`);
what the model does with its conditioning: comfy_core/families/wan/bernini.py.

- BerniniConditioning ("Bernini Conditioning"): the empty 16-channel latent
  `[batch, 16, (length - 1) / 4 + 1, height / 8, width / 8]` and, written into positive and negative
  alike, `context_latents`: the clean streams the Wan 2.2 A14B network sees in context, in order
  (which is their RoPE source id 1, 2, 3, ...):
  1. `source_video` (the edit base): its first `length` frames resized to width x height (area,
     centre crop), encoded;
  2. `reference_video` (moving content to insert, ads2v): its first `length` frames at their own
     aspect, the long edge capped at `ref_max_size`, each side snapped to 16 (area, no crop), encoded;
  3. each `reference_images` slot in name order, each image of a slot's batch on its own, at its own
     aspect as the reference video, encoded.
  With none of them (text to video) the conditionings come back as they are. The task follows
  from what is linked: nothing t2v, source v2v, source + images rv2v, images r2v, source +
  reference video ads2v.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.v3_schema import Autogrow, Int, Output, Socket, v3_node
import nodes.checks as checks
import nodes.wan_conditioning as wan
from nodes.errors import NodeInputError

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_bernini"
CATEGORY = "model/conditioning/bernini"
CHANNELS = 16  # the Wan 2.1 VAE latent the A14B network takes
DOWNSCALE = 8
MAX_SIDE = 8192  # the node's own widget limit (not MAX_RESOLUTION)
MAX_PIXEL_FRAMES = 512 * 1024 * 1024  # ComfyUI's guard on width x height x length
SNAP = 16  # reference sides are snapped to multiples of this
REFERENCE_SLOTS = 8
DESCRIPTION = ("Conditioning node for Bernini in-context video/image conditioning. It can be used for the following "
               "tasks: t2v (text-to-video), v2v (video-to-video), rv2v (reference-guided video editing), r2v "
               "(reference-to-video), ads2v (insert image/video into video).Reference images injected as in-context "
               "tokens (r2v, rv2v) are encoded independently at their own native aspect ratio (long edge capped at "
               "ref_max_size)")


def long_edge_size(height: int, width: int, max_size: int) -> tuple[int, int]:
    """(height, width) at the same aspect with the long edge at most `max_size` (never enlarged),
    each side rounded to a multiple of 16 (half to even, Python's `round`), at least 16."""
    scale = min(max_size / max(height, width), 1.0)
    return (max(SNAP, round(height * scale / SNAP) * SNAP), max(SNAP, round(width * scale / SNAP) * SNAP))


def _resize(frames: "torch.Tensor", width: int, height: int, crop: str) -> "torch.Tensor":
    """`[N, H, W, C]` RGB resized by area averaging (ComfyUI's `common_upscale(..., "area", crop)`)."""
    from comfy_core.image.resize import upscale_samples

    return upscale_samples(frames[..., :3].movedim(-1, 1), width, height, "area", crop).movedim(1, -1)


def _at_long_edge(frames: "torch.Tensor", max_size: int) -> "torch.Tensor":
    height, width = long_edge_size(frames.shape[1], frames.shape[2], max_size)
    return _resize(frames, width, height, "disabled")


@v3_node("BerniniConditioning", display_name="Bernini Conditioning", category=CATEGORY, python_module=MODULE,
         description=DESCRIPTION,
         inputs=[Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"), Socket("vae", "VAE"),
                 Int("width", default=832, min=16, max=MAX_SIDE, step=16),
                 Int("height", default=480, min=16, max=MAX_SIDE, step=16),
                 Int("length", default=81, min=1, max=MAX_SIDE, step=4),
                 Int("batch_size", default=1, min=1, max=wan.MAX_BATCH),
                 Socket("source_video", "IMAGE", optional=True,
                        tooltip="Source video to edit or restyle (v2v, rv2v). Resized to width/height and trimmed to "
                                "length."),
                 Socket("reference_video", "IMAGE", optional=True,
                        tooltip="Video to insert into the source video (ads2v)."),
                 Autogrow("reference_images",
                          Socket("reference_image", "IMAGE",
                                 tooltip="Reference image injected as an in-context token (r2v, rv2v)."),
                          prefix="reference_image_", min=0, max=REFERENCE_SLOTS, optional=True),
                 Int("ref_max_size", default=848, min=16, max=MAX_SIDE, step=16, optional=True,
                     tooltip="Max size for the long edge of reference_video and reference_images. Resized with "
                             "preserved aspect ratio and snapped to 16px.")],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")])
def bernini_conditioning(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                         batch_size: int, source_video: Any = None, reference_video: Any = None,
                         reference_images: dict[str, Any] | None = None, ref_max_size: int = 848) -> tuple:
    """See the module docstring (ComfyUI's BerniniConditioning)."""
    import torch

    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width = checks.integer(width, "width", 16, MAX_SIDE)
    height = checks.integer(height, "height", 16, MAX_SIDE)
    length = checks.integer(length, "length", 1, MAX_SIDE)
    batch_size = checks.integer(batch_size, "batch_size", 1, wan.MAX_BATCH)
    ref_max_size = checks.integer(ref_max_size, "ref_max_size", 16, MAX_SIDE)
    if width * height * length > MAX_PIXEL_FRAMES:
        raise NodeInputError("length", f"width x height x length at most {MAX_PIXEL_FRAMES} pixel-frames",
                             f"{width}x{height}x{length} = {width * height * length}")
    source_video = wan.images(source_video, "source_video")
    reference_video = wan.images(reference_video, "reference_video")
    slots = {name: wan.images(image, f"reference_images.{name}")
             for name, image in (reference_images or {}).items() if image is not None}

    latent = torch.zeros([batch_size, CHANNELS, (length - 1) // 4 + 1, height // DOWNSCALE, width // DOWNSCALE])
    streams = []  # source id 1, 2, ... in this order
    if source_video is not None:
        streams.append(wan.encode_video(vae, _resize(source_video[:length], width, height, "center"), CHANNELS))
    if reference_video is not None:
        streams.append(wan.encode_video(vae, _at_long_edge(reference_video[:length], ref_max_size), CHANNELS))
    for name in sorted(slots):  # each image of each slot its own stream, at its own aspect
        images = slots[name]
        for i in range(images.shape[0]):
            streams.append(wan.encode_video(vae, _at_long_edge(images[i:i + 1], ref_max_size), CHANNELS))
    if streams:
        positive, negative = wan.both(positive, negative, {"context_latents": streams})
    return positive, negative, {"samples": latent}

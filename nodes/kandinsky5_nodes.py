"""Kandinsky 5's nodes and the two video-latent nodes its image-to-video template uses, with today's
ComfyUI's names, V3 schemas and semantics (`comfy_extras/nodes_kandinsky5.py`, and
`ReplaceVideoLatentFrames` of `comfy_extras/nodes_latent.py`), written here; the model side is
comfy_core/families/kandinsky5.

- Kandinsky5ImageToVideo: a zero latent `[batch_size, 16, (length - 1) // 4 + 1, height // 8,
  width // 8]`; with `start_image` (its first `length` frames resized to the size, centre crop,
  bilinear) its VAE latent goes into both conditionings as `time_dim_replace` (the network writes it
  over the first latent frames of its input) with a `concat_mask` `[1, 1, T, h, w]` of ones, zero
  over the latent frames the image covers; the clean latent is also the fourth output
  (`cond_latent`, an empty dict without a start image, as ComfyUI returns).
- NormalizeVideoLatentStart: the first `start_frame_count` latent frames renormalised, per batch
  item and frame over channels and space, to the mean / standard deviation of the next
  `reference_frame_count` frames (clamped to within -0.3 / +0.35 of each frame's mean and -0.35 /
  +0.5 of its deviation), as Kandinsky 5's reference pipeline does; a one-frame latent passes.
- ReplaceVideoLatentFrames: `source`'s frames written over `destination`'s from `index` (negative:
  from the end); no source: `destination` unchanged; a source that does not fit: unchanged with a
  warning (ComfyUI's behaviour). The result carries `source`'s other keys, as ComfyUI's does.
- CLIPTextEncodeKandinsky5: `clip_l` tokenized for every encoder, then Qwen2.5-VL's tokens replaced
  by those of `qwen25_7b` (ComfyUI's rule), encoded with the CLIP's schedule.
"""
from __future__ import annotations

import logging
from typing import Any

from graph.native import MAX_RESOLUTION
from graph.v3_schema import Int, Output, Socket, String, v3_node
import nodes.checks as checks
import nodes.wan_conditioning as wan
from nodes.errors import NodeInputError, describe

log = logging.getLogger(__name__)

MODULE = "comfy_extras.nodes_kandinsky5"
CATEGORY = "model/conditioning/kandinsky"
CHANNELS = 16
DOWNSCALE = 8
# Kandinsky 5's clamps of the reference statistics around the start frames' own.
MEAN_BELOW, MEAN_ABOVE, STD_BELOW, STD_ABOVE = 0.3, 0.35, 0.35, 0.5
NORMALIZE_EPS = 1e-8


@v3_node("Kandinsky5ImageToVideo", category=CATEGORY, python_module=MODULE,
         inputs=[Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"), Socket("vae", "VAE"),
                 Int("width", default=768, min=16, max=MAX_RESOLUTION, step=16),
                 Int("height", default=512, min=16, max=MAX_RESOLUTION, step=16),
                 Int("length", default=121, min=1, max=MAX_RESOLUTION, step=4),
                 Int("batch_size", default=1, min=1, max=4096),
                 Socket("start_image", "IMAGE", optional=True)],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"),
                  Output("LATENT", "latent", tooltip="Empty video latent"),
                  Output("LATENT", "cond_latent", tooltip="Clean encoded start images, used to replace the noisy "
                                                          "start of the model output latents")])
def kandinsky5_image_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                              batch_size: int, start_image: Any = None) -> tuple:
    import torch

    from comfy_core.latent.video import empty_video_latent, fit_frames, latent_frames

    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    start_image = wan.images(start_image, "start_image")
    latent = empty_video_latent(batch_size, CHANNELS, length, height, width, DOWNSCALE)
    cond_latent: dict = {}
    if start_image is not None:
        start = fit_frames(start_image[:length], width, height)
        encoded = wan.encode_video(vae, start, CHANNELS)
        cond_latent["samples"] = encoded
        mask = torch.ones((1, 1, latent.shape[2], latent.shape[-2], latent.shape[-1]), dtype=start.dtype)
        mask[:, :, :latent_frames(start.shape[0])] = 0.0
        positive, negative = wan.both(positive, negative, {"time_dim_replace": encoded, "concat_mask": mask})
    return positive, negative, {"samples": latent}, cond_latent


def normalize_start(first: Any, reference: Any) -> Any:
    """`first` `[B, C, S, h, w]` standardised per (batch item, frame) over channels and space, then
    given `reference`'s overall mean and (unbiased) deviation, each clamped around the frame's own
    (Kandinsky 5's `adaptive_mean_std_normalization`)."""
    import torch

    mean = first.mean(dim=(1, 3, 4), keepdim=True)
    std = first.std(dim=(1, 3, 4), keepdim=True)
    target_mean = torch.clamp(reference.mean(), mean - MEAN_BELOW, mean + MEAN_ABOVE)
    target_std = torch.clamp(reference.std(), std - STD_BELOW, std + STD_ABOVE)
    return (first - mean) / (std + NORMALIZE_EPS) * target_std + target_mean


@v3_node("NormalizeVideoLatentStart", category="model/conditioning", python_module=MODULE,
         description="Normalizes the initial frames of a video latent to match the mean and standard deviation of "
                     "subsequent reference frames. Helps reduce differences between the starting frames and the "
                     "rest of the video.",
         inputs=[Socket("latent", "LATENT"),
                 Int("start_frame_count", default=4, min=1, max=MAX_RESOLUTION, step=1,
                     tooltip="Number of latent frames to normalize, counted from the start"),
                 Int("reference_frame_count", default=5, min=1, max=MAX_RESOLUTION, step=1,
                     tooltip="Number of latent frames after the start frames to use as reference")],
         outputs=[Output("LATENT", "latent")])
def normalize_video_latent_start(latent: dict, start_frame_count: int, reference_frame_count: int) -> tuple[dict]:
    samples = checks.latent(latent, "latent", ndims=(5,))
    start = checks.integer(start_frame_count, "start_frame_count", 1, MAX_RESOLUTION)
    count = checks.integer(reference_frame_count, "reference_frame_count", 1, MAX_RESOLUTION)
    frames = samples.shape[2]
    if frames <= 1:
        return (latent,)
    reference = samples[:, :, start:start + min(count, frames - 1)]
    if reference.shape[2] == 0:  # ComfyUI's statistics of nothing are NaN: the video would be lost
        raise NodeInputError("start_frame_count", f"fewer than the latent's {frames} frames (some must follow "
                                                  "the start frames as the reference)", str(start))
    out = samples.clone()
    out[:, :, :start] = normalize_start(samples[:, :, :start], reference)
    return ({**latent, "samples": out},)


@v3_node("ReplaceVideoLatentFrames", display_name="Replace Video Latent Frames", category="model/latent/batch",
         python_module="comfy_extras.nodes_latent",
         description="Replace a sequence of frames in a destination latent with frames from a source latent.",
         search_aliases=("replace frames", "insert latent frames", "splice video latent"),
         inputs=[Socket("destination", "LATENT", tooltip="The destination latent where frames will be replaced."),
                 Socket("source", "LATENT", optional=True,
                        tooltip="The source latent providing frames to insert into the destination latent. If not "
                                "provided, the destination latent is returned unchanged."),
                 Int("index", default=0, min=-MAX_RESOLUTION, max=MAX_RESOLUTION, step=1,
                     tooltip="The starting latent frame index in the destination latent where the source latent "
                             "frames will be placed. Negative values count from the end.")],
         outputs=[Output("LATENT", "LATENT", tooltip="Destination latent with replaced frames.")])
def replace_video_latent_frames(destination: dict, index: int, source: Any = None) -> tuple[dict]:
    target = checks.latent(destination, "destination", ndims=(5,))
    index = checks.integer(index, "index", -MAX_RESOLUTION, MAX_RESOLUTION)
    if source is None:
        return (destination,)
    frames = checks.latent(source, "source", ndims=(5,))
    if frames.shape[0] != target.shape[0] and frames.shape[0] != 1 or frames.shape[1] != target.shape[1] \
            or frames.shape[-2:] != target.shape[-2:]:
        raise NodeInputError("source", f"a latent of {target.shape[1]} channels, {target.shape[-1]}x"
                                       f"{target.shape[-2]}, batch 1 or {target.shape[0]} (the destination's)",
                             describe(frames))
    count = target.shape[2]
    start = count + index if index < 0 else index
    if start < 0 or start > count:
        log.warning("ReplaceVideoLatentFrames: Index %d is out of bounds for destination latent frames %d.", index,
                    count)
        return (destination,)
    if start + frames.shape[2] > count:
        log.warning("ReplaceVideoLatentFrames: Source latent frames %d do not fit within destination latent frames "
                    "%d at the specified index %d.", frames.shape[2], count, start)
        return (destination,)
    out = target.clone()
    out[:, :, start:start + frames.shape[2]] = frames.to(out)
    return ({**source, "samples": out},)


@v3_node("CLIPTextEncodeKandinsky5", display_name="CLIP Text Encode (Kandinsky 5)", category=CATEGORY,
         python_module=MODULE,
         inputs=[Socket("clip", "CLIP"), String("clip_l", multiline=True, dynamicPrompts=True),
                 String("qwen25_7b", multiline=True, dynamicPrompts=True)],
         outputs=[Output("CONDITIONING")])
def clip_text_encode_kandinsky5(clip: Any, clip_l: str, qwen25_7b: str) -> tuple[list]:
    clip = checks.clip(clip)
    clip_l = checks.text(clip_l, "clip_l")
    qwen25_7b = checks.text(qwen25_7b, "qwen25_7b")
    tokens = dict(clip.tokenize(clip_l))
    qwen_tokens = clip.tokenize(qwen25_7b)
    if "qwen25_7b" not in qwen_tokens:
        raise NodeInputError("clip", "a Kandinsky 5 CLIP (with a Qwen2.5-VL 7B encoder)",
                             f"one that tokenizes for {sorted(qwen_tokens)}")
    tokens["qwen25_7b"] = qwen_tokens["qwen25_7b"]
    return (clip.encode_from_tokens_scheduled(tokens),)

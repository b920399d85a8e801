"""SCAIL / SCAIL-2's nodes, V3 schemas as today's ComfyUI declares them (`comfy_extras/nodes_scail.py`);
the network in comfy_core/families/wan/scail.py, its model inputs in wan21_scail.py / wan21_scail2.py,
the identity masks (and the SAM3_TRACK_DATA contract) in comfy_core/families/wan/scail_masks.py.

- WanSCAILToVideo: the empty 16-channel latent `[batch, 16, (length - 1) / 4 + 1, h / 8, w / 8]`
  and, into positive and negative: `ref_mask_flag` (false in replacement mode); each
  `reference_image` resized to the video (bicubic, centre crop) - in replacement mode masked by its
  `reference_image_mask` (black where no channel of the mask is above 0.1) - and encoded alone,
  appended to `reference_latents`; `clip_vision_output`; the pose video and its colour masks from
  `video_frame_offset` (less the anchored frames), cut to the shorter of the two and to `length`,
  rounded down to 4k + 1 frames, resized to half the video (area, centre crop): the pose latent
  times `pose_strength` as `pose_video_latent` on entries limited to `pose_start`..`pose_end`
  (entries without it for the rest, ComfyUI's `conditioning_set_values_with_timestep_range`), the
  masks as `driving_mask_28ch`; with a reference image, its masks (nearest-exact) as
  `ref_mask_28ch` (the additional references' masks, the primary's, zeros over the video frames).
  `previous_frames`' last `previous_frame_count` frames (bicubic) are encoded into the start of
  the latent, with a `noise_mask` zero there (the anchor SCAIL-2 continues from). Outputs the next
  chunk's `video_frame_offset` (offset + length).
- SCAIL2ColoredMask ("Create SCAIL-2 Colored Mask"): the driving video's SAM 3 track rendered as
  a colour mask video (black background, white in replacement mode) and the reference track (or
  a plain MASK as one identity) on the other background; no reference: one frame of that
  background at the driving video's size.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from graph.native import MAX_RESOLUTION
from graph.v3_schema import Boolean, Combo, Float, Int, Output, Socket, String, v3_node
import nodes.checks as checks
import nodes.wan_conditioning as wan
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_scail"
CATEGORY = "model/conditioning/wan/scail"
CHANNELS = 16
DOWNSCALE = 8
TRACK_DATA = "SAM3_TRACK_DATA"
SORT_BY = ["none", "left_to_right", "area"]
RANGE_EPS = 1e-5  # ComfyUI's: the sampler gates entries with strict comparisons


def _fit(frames: "torch.Tensor", width: int, height: int, method: str) -> "torch.Tensor":
    """`[N, H, W, C]` resized with a centre crop (ComfyUI's `common_upscale(..., method, "center")`)."""
    from comfy_core.image.resize import upscale_samples

    return upscale_samples(frames.movedim(-1, 1), width, height, method, "center").movedim(1, -1)


def set_values_in_range(conditioning: list, values: Mapping[str, Any], start: float, end: float) -> list:
    """ComfyUI's `node_helpers.conditioning_set_values_with_timestep_range`: `values` only on the part
    of each entry inside start..end (its own range respected), the entry unchanged before and after
    (the boundaries moved by 1e-5 so one entry is active at a time); start > end leaves it as it is."""
    if start > end:
        return conditioning
    out: list = []
    for entry in conditioning:
        own_start, own_end = entry[1].get("start_percent", 0.0), entry[1].get("end_percent", 1.0)
        lo, hi = max(start, own_start), min(end, own_end)
        if lo >= hi:
            out.append(entry)
            continue
        if lo > own_start:
            out += wan.set_values([entry], {"start_percent": own_start, "end_percent": lo - RANGE_EPS})
        out += wan.set_values([entry], {**values, "start_percent": lo, "end_percent": hi})
        if hi < own_end:
            out += wan.set_values([entry], {"start_percent": hi + RANGE_EPS, "end_percent": own_end})
    return out


@v3_node("WanSCAILToVideo", category=CATEGORY, python_module=MODULE, experimental=True,
         inputs=[Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"), Socket("vae", "VAE"),
                 Int("width", default=512, min=32, max=MAX_RESOLUTION, step=32),
                 Int("height", default=896, min=32, max=MAX_RESOLUTION, step=32),
                 Int("length", default=81, min=1, max=MAX_RESOLUTION, step=4),
                 Int("batch_size", default=1, min=1, max=4096),
                 Socket("pose_video", "IMAGE", optional=True,
                        tooltip="Video used for pose conditioning. Will be downscaled to half the resolution of the "
                                "main video."),
                 Socket("pose_video_mask", "IMAGE", optional=True,
                        tooltip="SCAIL-2 only. Colored per-identity SAM3 mask video at the same resolution as "
                                "pose_video."),
                 Boolean("replacement_mode", default=False, optional=True,
                         tooltip="SCAIL-2 only. False = Animation Mode (pose_video_mask should have black "
                                 "background). True = Replacement Mode (pose_video_mask should have white "
                                 "background)."),
                 Float("pose_strength", default=1.0, min=0.0, max=10.0, step=0.01,
                       tooltip="Strength of the pose latent."),
                 Float("pose_start", default=0.0, min=0.0, max=1.0, step=0.01,
                       tooltip="Start step of the pose conditioning."),
                 Float("pose_end", default=1.0, min=0.0, max=1.0, step=0.01,
                       tooltip="End step of the pose conditioning."),
                 Socket("reference_image", "IMAGE", optional=True,
                        tooltip="Reference image. The first image is the primary reference (composite all identities "
                                "onto it). SCAIL-2: extra batch images are used as additional views (back view, "
                                "close-up, occluded background), each needing a matching reference_image_mask in that "
                                "identity's color."),
                 Socket("reference_image_mask", "IMAGE", optional=True,
                        tooltip="SCAIL-2 only. Colored reference mask, batch matching reference_image (first = primary "
                                "reference mask, rest = identity masks for the additional reference_image)."),
                 Socket("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True,
                        tooltip="CLIP vision features for conditioning. Model is trained with stretch resize to aspect "
                                "ratio."),
                 Int("video_frame_offset", default=0, min=0, max=MAX_RESOLUTION, step=1,
                     tooltip="Cumulative output frame this chunk begins at. Wire from the previous chunk's "
                             "video_frame_offset output."),
                 Int("previous_frame_count", default=5, min=1, max=MAX_RESOLUTION, step=4,
                     tooltip="Tail frames of previous_frames to anchor. SCAIL-2 trained at 5 (81-frame chunks, "
                             "76-frame step)."),
                 Socket("previous_frames", "IMAGE", optional=True,
                        tooltip="SCAIL-2 only. Full decoded output of the previous chunk. Only the last "
                                "previous_frame_count are used as the extension anchor.")],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"),
                  Output("LATENT", "latent", tooltip="Empty latent of the generation size."),
                  Output("INT", "video_frame_offset", tooltip="Adjusted offset + length. Wire into the next chunk.")])
def wan_scail_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                       batch_size: int, pose_strength: float, pose_start: float, pose_end: float,
                       video_frame_offset: int, previous_frame_count: int, replacement_mode: bool = False,
                       reference_image: Any = None, clip_vision_output: Any = None, pose_video: Any = None,
                       pose_video_mask: Any = None, reference_image_mask: Any = None,
                       previous_frames: Any = None) -> tuple:
    """See the module docstring (ComfyUI's WanSCAILToVideo)."""
    import torch

    from comfy_core.families.wan.scail_masks import mask_to_28ch

    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width = checks.integer(width, "width", 32, MAX_RESOLUTION)
    height = checks.integer(height, "height", 32, MAX_RESOLUTION)
    length = wan.frame_count(length)
    batch_size = checks.integer(batch_size, "batch_size", 1, wan.MAX_BATCH)
    pose_strength = checks.number(pose_strength, "pose_strength", 0.0, 10.0)
    pose_start = checks.number(pose_start, "pose_start", 0.0, 1.0)
    pose_end = checks.number(pose_end, "pose_end", 0.0, 1.0)
    offset = checks.integer(video_frame_offset, "video_frame_offset", 0, MAX_RESOLUTION)
    previous_frame_count = checks.integer(previous_frame_count, "previous_frame_count", 1, MAX_RESOLUTION)
    replacement_mode = bool(replacement_mode)
    reference_image = wan.images(reference_image, "reference_image")
    reference_image_mask = wan.images(reference_image_mask, "reference_image_mask")
    pose_video = wan.images(pose_video, "pose_video")
    pose_video_mask = wan.images(pose_video_mask, "pose_video_mask")
    previous_frames = wan.images(previous_frames, "previous_frames")
    clip_vision_output = wan.clip_vision_states(clip_vision_output, "clip_vision_output")

    latent = torch.zeros([batch_size, CHANNELS, (length - 1) // 4 + 1, height // DOWNSCALE, width // DOWNSCALE])
    noise_mask = None
    positive, negative = wan.both(positive, negative, {"ref_mask_flag": not replacement_mode})

    anchor = None
    if previous_frames is not None and previous_frames.shape[0] > 0:
        anchor = previous_frames[-previous_frame_count:]
        offset = max(0, offset - anchor.shape[0])

    if reference_image is not None:
        refs = _fit(reference_image, width, height, "bicubic")
        if replacement_mode and reference_image_mask is not None:  # each reference on black outside its mask
            masks = _fit(reference_image_mask, width, height, "nearest-exact")
            masks = masks[[min(i, masks.shape[0] - 1) for i in range(refs.shape[0])]]
            refs = refs * (masks[..., :3].max(dim=-1, keepdim=True).values > 0.1).to(refs.dtype)
        latents = [wan.encode_video(vae, refs[i:i + 1, :, :, :3], CHANNELS) for i in range(refs.shape[0])]
        positive, negative = wan.both(positive, negative, {"reference_latents": latents}, append=True)
    if clip_vision_output is not None:
        positive, negative = wan.both(positive, negative, {"clip_vision_output": clip_vision_output})

    if pose_video is not None:
        pose_video = pose_video[offset:] if pose_video.shape[0] > offset else None
    if pose_video_mask is not None:
        pose_video_mask = pose_video_mask[offset:] if pose_video_mask.shape[0] > offset else None
    counts = [v.shape[0] for v in (pose_video, pose_video_mask) if v is not None]
    if counts:
        kept = (min(min(counts), length) - 1) // 4 * 4 + 1  # both to the shorter, 4k + 1 frames
        pose_video = pose_video[:kept] if pose_video is not None else None
        pose_video_mask = pose_video_mask[:kept] if pose_video_mask is not None else None
    if pose_video is not None:
        small = _fit(pose_video[:length], width // 2, height // 2, "area")
        pose_latent = wan.encode_video(vae, small[:, :, :, :3], CHANNELS) * pose_strength
        values = {"pose_video_latent": pose_latent}
        positive = set_values_in_range(positive, values, pose_start, pose_end)
        negative = set_values_in_range(negative, values, pose_start, pose_end)
    if pose_video_mask is not None:
        small = _fit(pose_video_mask[:length], width // 2, height // 2, "area")
        positive, negative = wan.both(positive, negative, {"driving_mask_28ch": mask_to_28ch(small)})

    if reference_image_mask is not None and reference_image is not None:
        masks = _fit(reference_image_mask, width, height, "nearest-exact")
        extra = [mask_to_28ch(masks[min(i, masks.shape[0] - 1)][None]) for i in range(1, reference_image.shape[0])]
        primary = mask_to_28ch(masks[:1])
        video = torch.zeros((1, latent.shape[2], 28, *primary.shape[-2:]), dtype=primary.dtype)
        positive, negative = wan.both(positive, negative, {"ref_mask_28ch": torch.cat(extra + [primary, video], dim=1)})

    if anchor is not None:
        anchor_latent = wan.encode_video(vae, _fit(anchor, width, height, "bicubic")[:, :, :, :3], CHANNELS)
        frames = min(anchor_latent.shape[2], latent.shape[2])
        latent[:, :, :frames] = anchor_latent[:, :, :frames].to(latent.dtype)
        noise_mask = torch.ones((1, 1, latent.shape[2], latent.shape[-2], latent.shape[-1]), dtype=latent.dtype)
        noise_mask[:, :, :frames] = 0.0

    out = {"samples": latent}
    if noise_mask is not None:
        out["noise_mask"] = noise_mask
    return positive, negative, out, offset + length


def _track_data(value: Any, input_name: str) -> dict:
    if not isinstance(value, dict) or "packed_masks" not in value or "orig_size" not in value:
        raise NodeInputError(input_name, "SAM3_TRACK_DATA (a dict with packed_masks and orig_size, "
                                         "comfy_core/families/wan/scail_masks.py)", describe(value))
    return value


@v3_node("SCAIL2ColoredMask", display_name="Create SCAIL-2 Colored Mask", category=CATEGORY, python_module=MODULE,
         experimental=True,
         inputs=[Socket("driving_track_data", TRACK_DATA,
                        tooltip="SAM3 track of the driving pose video. Will be rendered into the pose_video_mask "
                                "output."),
                 Socket("ref_track_data", f"{TRACK_DATA},MASK", optional=True, display_name="reference_masks",
                        tooltip="SAM3 track of the reference image(s) (one identity per object, colored in batch "
                                "order), or a plain MASK of the reference subject (rendered as a single identity)."),
                 String("object_indices", default="",
                        tooltip="Comma-separated list of person indices to include (e.g. '0,2,3'). Applied to both "
                                "reference and pose video masks. Empty = all."),
                 Combo("sort_by", SORT_BY, default="left_to_right",
                       tooltip="Order in which palette colors are assigned to the tracked objects (applied to both "
                               "reference and pose video so each identity keeps the same color). Objects that appear "
                               "in earlier frames always come first; within a frame, left_to_right = leftmost object "
                               "(by centroid at first appearance) gets the first color, area = biggest object (by "
                               "mask area at first appearance) gets the first color; none = keep SAM3's order."),
                 Boolean("replacement_mode", default=False,
                         tooltip="False = Animation Mode (pose_video_mask has black background, reference_image_mask "
                                 "has white background). True = Replacement Mode (pose_video_mask has white "
                                 "background, reference_image_mask has black background).")],
         outputs=[Output("IMAGE", "pose_video_mask"), Output("IMAGE", "reference_image_mask")])
def scail2_colored_mask(driving_track_data: Any, object_indices: str, sort_by: str, replacement_mode: bool,
                        ref_track_data: Any = None) -> tuple:
    """See the module docstring (ComfyUI's SCAIL2ColoredMask)."""
    import torch

    from comfy_core.families.wan.scail_masks import ordered, render_colored, render_identity

    if sort_by not in SORT_BY:
        raise NodeInputError("sort_by", f"one of {SORT_BY}", repr(sort_by))
    if not isinstance(object_indices, str):
        raise NodeInputError("object_indices", "a string", describe(object_indices))
    driving = ordered(_track_data(driving_track_data, "driving_track_data"), sort_by, object_indices)
    mask_video = render_colored(driving, "white" if replacement_mode else "black")
    ref_background = "black" if replacement_mode else "white"
    if ref_track_data is None:
        h, w = (int(v) for v in driving["orig_size"])
        reference = torch.full((1, h, w, 3), 1.0 if ref_background == "white" else 0.0)
    elif isinstance(ref_track_data, torch.Tensor):  # a plain MASK
        if ref_track_data.ndim not in (2, 3):
            raise NodeInputError("ref_track_data", "a MASK [B,H,W] or SAM3_TRACK_DATA", describe(ref_track_data))
        reference = render_identity(ref_track_data, ref_background)
    else:
        reference = render_colored(ordered(_track_data(ref_track_data, "ref_track_data"), sort_by, object_indices),
                                   ref_background)
    return mask_video, reference

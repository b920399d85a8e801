"""SAM 3 nodes: ComfyUI's `comfy_extras.nodes_sam3` (SAM3_Detect, SAM3_VideoTrack, SAM3_TrackPreview,
SAM3_TrackToMask).

Schemas as today's ComfyUI renders them (tests/data/object_info_2026/<Node>.json); behaviour read
from its `comfy_extras/nodes_sam3.py` and written here. The network is comfy_core/models/sam3,
loaded by CheckpointLoaderSimple (MODEL + CLIP) or UNETLoader from a `sam3*` file; the text
prompt is the CLIP's CLIPTextEncode conditioning (with its `attention_mask`, and
`sam3_multi_cond` for several comma-separated categories).

Every frame is resized to 1008 x 1008 (bilinear, no crop) in 0..1. Text: the detector per
category, queries whose sigmoid score passes `threshold`, best first, at most the category's
`max_detections`; each kept mask is refined by SAM on a crop of the original image around its box
(10 % margin, `refine_iterations` passes from the coarse mask) and united with the coarse mask.
Boxes without text: SAM segments inside each box; points: SAM from the points (one point picks
the best of three masks); then `refine_iterations - 1` passes from the previous logits. Masks
are the union per frame, or one per object with `individual_masks`. BOUNDING_BOX out: one list per
frame of `{x, y, width, height, score}` in pixels (text detections only).

SAM3_VideoTrack: SAM 3.1's multiplex video tracker (comfy_core/models/sam3/tracker.py) from the
initial masks (one per object, frame 0) and / or text detection (every `detect_interval` frames,
new objects up to `max_objects`) -> SAM3_TRACK_DATA (comfy_core/families/wan/scail_masks.py: masks
at 1008 x 1008 bit-packed, `orig_size` the video's). SAM3_TrackPreview: the track as an H.264
preview in the temp folder: the frames (or black) with each object's mask blended in its colour
at `opacity`, its index (and its score in percent when below 1) drawn at its centroid.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from graph.v3_schema import Boolean, Float, Int, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.environment import current_env, report_progress
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_sam3"
CATEGORY = "detection"
SIDE = 1008
DEFAULT_BOX = {"x": 0, "y": 0, "width": 512, "height": 512}  # V3 BoundingBox.Input's default


def _network(model: Any) -> Any:
    from comfy_core.models.sam3.model import Sam3Model

    network = getattr(getattr(model, "model", None), "diffusion_model", None)
    if not isinstance(network, Sam3Model) or not hasattr(model, "applied"):
        raise NodeInputError("model", "a SAM 3 model (CheckpointLoaderSimple of a sam3 file)", describe(model))
    return model


def text_prompts(conditioning: Any) -> list[tuple["torch.Tensor", "torch.Tensor", int]]:
    """(embeddings `[1, T, W]`, mask `[1, T]`, max detections) per category of a CONDITIONING."""
    import torch

    if not conditioning:
        return []
    emb, meta = conditioning[0][0], conditioning[0][1]
    multi = meta.get("sam3_multi_cond")
    if multi is not None:
        return [(e["cond"], e["attention_mask"] if e.get("attention_mask") is not None
                 else torch.ones(e["cond"].shape[:2], dtype=torch.int64), int(e.get("max_detections", 1)))
                for e in multi]
    mask = meta.get("attention_mask")
    return [(emb, mask if mask is not None else torch.ones(emb.shape[:2], dtype=torch.int64), 1)]


def _resize(x: "torch.Tensor", h: int, w: int) -> "torch.Tensor":
    import torch.nn.functional as F

    return F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False)


def refine_mask(network: Any, image_hwc: "torch.Tensor", coarse: "torch.Tensor", box: "torch.Tensor",
                iterations: int, dtype: Any) -> "torch.Tensor":
    """A detector mask (logits `[h, w]`) refined by SAM on a crop around `box` (xyxy pixels) of
    the original image `[H, W, C]`: `[1, H, W]` binary, the refined crop united with the coarse mask."""
    import torch

    from comfy_core.image.resize import upscale_samples

    height, width = image_hwc.shape[:2]
    full_coarse = _resize(coarse[None, None].float().cpu(), height, width)[0] > 0
    if iterations <= 0:
        return full_coarse.float()
    x1, y1, x2, y2 = box.tolist()
    bw, bh = x2 - x1, y2 - y1
    cx1, cy1 = max(0, int(x1 - bw * 0.1)), max(0, int(y1 - bh * 0.1))
    cx2, cy2 = min(width, int(x2 + bw * 0.1)), min(height, int(y2 + bh * 0.1))
    if cx2 <= cx1 or cy2 <= cy1:
        return full_coarse.float()
    mh, mw = coarse.shape[-2:]
    mx1, my1, mx2, my2 = int(cx1 / width * mw), int(cy1 / height * mh), int(cx2 / width * mw), int(cy2 / height * mh)
    if mx2 <= mx1 or my2 <= my1:
        return full_coarse.float()
    crop = image_hwc[cy1:cy2, cx1:cx2, :3].unsqueeze(0).movedim(-1, 1).float()
    device = next(network.parameters()).device
    frame = upscale_samples(crop, SIDE, SIDE, "bilinear", "disabled").to(device=device, dtype=dtype)
    logits = coarse[my1:my2, mx1:mx2][None, None].to(device=device, dtype=dtype)
    for _ in range(iterations):
        logits = network.forward_segment(frame, mask_inputs=_resize(logits.float(), SIDE, SIDE).to(dtype))
    full = torch.zeros(1, 1, height, width)
    full[:, :, cy1:cy2, cx1:cx2] = _resize(logits.float(), cy2 - cy1, cx2 - cx1).cpu()
    return ((full[0] > 0) | full_coarse).float()


def _boxes(bboxes: Any, count: int, height: int, width: int) -> list | None:
    """BOUNDING_BOX input -> per frame `[1, N, 4]` normalised cxcywh (or None): a box or a list
    of boxes for every frame, a list of lists frame by frame (the last repeated)."""
    import torch

    def tensor(boxes: list) -> "torch.Tensor":
        rows = []
        for d in boxes:
            try:
                x, y, w, h = (float(d[k]) for k in ("x", "y", "width", "height"))
            except (TypeError, KeyError, ValueError):
                raise NodeInputError("bboxes", "bounding boxes {x, y, width, height}", describe(d)) from None
            rows.append([(x + w / 2) / width, (y + h / 2) / height, w / width, h / height])
        return torch.tensor([rows], dtype=torch.float32)

    if bboxes is None:
        return None
    if isinstance(bboxes, dict):
        return [tensor([bboxes])] * count
    if isinstance(bboxes, list) and bboxes and isinstance(bboxes[0], list):
        frames = [tensor(f) if f else None for f in bboxes]
        while len(frames) < count:
            frames.append(frames[-1])
        return frames
    if isinstance(bboxes, list) and bboxes:
        return [tensor(bboxes)] * count
    return None


def _points(text: Any, name: str) -> list[dict]:
    if text is None or text == "":
        return []
    try:
        points = json.loads(text)
        return [{"x": float(p["x"]), "y": float(p["y"])} for p in points]
    except (TypeError, KeyError, ValueError):
        raise NodeInputError(name, 'a JSON list of points [{"x": int, "y": int}, ...]', describe(text)) from None


def detect(model: Any, image: "torch.Tensor", conditioning: Any = None, bboxes: Any = None,
           positive_coords: Any = None, negative_coords: Any = None, threshold: float = 0.5,
           refine_iterations: int = 2, individual_masks: bool = False) -> tuple["torch.Tensor", list]:
    import torch

    from comfy_core.image.resize import upscale_samples

    batch, height, width, _ = image.shape
    frames_boxes = _boxes(bboxes, batch, height, width)
    positive, negative = _points(positive_coords, "positive_coords"), _points(negative_coords, "negative_coords")
    prompts = text_prompts(conditioning)
    all_boxes, all_masks = [], []
    with model.applied() as module, torch.inference_mode():
        network = module.diffusion_model
        dtype = module.get_dtype()
        device = next(network.parameters()).device
        scaled = upscale_samples(image[..., :3].movedim(-1, 1).float(), SIDE, SIDE, "bilinear", "disabled")
        point_inputs = None
        if positive or negative:
            coords = [[p["x"] / width * SIDE, p["y"] / height * SIDE] for p in positive + negative]
            point_inputs = {"point_coords": torch.tensor([coords], dtype=dtype, device=device),
                            "point_labels": torch.tensor([[1] * len(positive) + [0] * len(negative)], dtype=torch.int32,
                                                         device=device)}
        for b in range(batch):
            frame = scaled[b:b + 1].to(device=device, dtype=dtype)
            boxes = None
            if frames_boxes is not None and frames_boxes[b] is not None:
                boxes = frames_boxes[b].to(device=device, dtype=dtype)
            found, masks = [], []
            if point_inputs is not None:
                logits = network.forward_segment(frame, point_inputs=point_inputs)
                for _ in range(max(0, refine_iterations - 1)):
                    logits = network.forward_segment(frame, mask_inputs=logits)
                masks.append((_resize(logits.float(), height, width)[0] > 0).float().cpu())
            if boxes is not None and not prompts:
                for cx, cy, bw, bh in boxes[0].tolist():
                    corners = torch.tensor([[[(cx - bw / 2) * SIDE, (cy - bh / 2) * SIDE],
                                             [(cx + bw / 2) * SIDE, (cy + bh / 2) * SIDE]]], dtype=dtype,
                                           device=device)
                    logits = network.forward_segment(frame, box_inputs=corners)
                    for _ in range(max(0, refine_iterations - 1)):
                        logits = network.forward_segment(frame, mask_inputs=logits)
                    masks.append((_resize(logits.float(), height, width)[0] > 0).float().cpu())
            for emb, mask, most in prompts:
                out = network(frame, text_embeddings=emb.to(device=device, dtype=dtype), text_mask=mask.to(device),
                              boxes=boxes,
                              threshold=threshold, orig_size=(height, width))
                probs = out["scores"][0].float().sigmoid()
                keep = probs > threshold
                kept_boxes, kept_scores = out["boxes"][0][keep].float().cpu(), probs[keep].cpu()
                kept_masks = out["masks"][0][keep]
                order = kept_scores.argsort(descending=True)[:most]
                for box, score, coarse in zip(kept_boxes[order], kept_scores[order],
                                              kept_masks[order.to(kept_masks.device)]):
                    found.append({"x": float(box[0]), "y": float(box[1]), "width": float(box[2] - box[0]),
                                  "height": float(box[3] - box[1]), "score": float(score)})
                    masks.append(refine_mask(network, image[b], coarse.float(), box, refine_iterations, dtype))
            all_boxes.append(found)
            if masks:
                joined = torch.cat(masks, 0)
                all_masks.append(joined if individual_masks else (joined > 0).any(0).float())
            else:
                all_masks.append(torch.zeros(0, height, width) if individual_masks else torch.zeros(height, width))
    out = torch.cat(all_masks, 0) if individual_masks else torch.stack(all_masks)
    return out, all_boxes


@v3_node("SAM3_Detect", display_name="SAM3 Detect", category=CATEGORY, python_module=MODULE,
         search_aliases=["sam3", "segment anything", "open vocabulary", "text detection", "segment"],
         inputs=[Socket("model", "MODEL", display_name="model"), Socket("image", "IMAGE", display_name="image"),
                 Socket("conditioning", "CONDITIONING", display_name="conditioning", optional=True,
                        tooltip="Text conditioning from CLIPTextEncode"),
                 Socket("bboxes", "BOUNDING_BOX", display_name="bboxes", optional=True,
                        tooltip="Bounding boxes to segment within", default=DEFAULT_BOX, socketless=True,
                        forceInput=True),
                 String("positive_coords", display_name="positive_coords", optional=True, forceInput=True,
                        tooltip='Positive point prompts as JSON [{"x": int, "y": int}, ...] (pixel coords)'),
                 String("negative_coords", display_name="negative_coords", optional=True, forceInput=True,
                        tooltip='Negative point prompts as JSON [{"x": int, "y": int}, ...] (pixel coords)'),
                 Float("threshold", display_name="threshold", default=0.5, min=0.0, max=1.0, step=0.01),
                 Int("refine_iterations", display_name="refine_iterations", default=2, min=0, max=5,
                     tooltip="SAM decoder refinement passes (0=use raw detector masks)"),
                 Boolean("individual_masks", display_name="individual_masks", default=False,
                         tooltip="Output per-object masks instead of union")],
         outputs=[Output("MASK", "masks"), Output("BOUNDING_BOX", "bboxes")])
def sam3_detect(model: Any, image: Any, conditioning: Any = None, bboxes: Any = None, positive_coords: Any = None,
                negative_coords: Any = None, threshold: float = 0.5, refine_iterations: int = 2,
                individual_masks: bool = False) -> tuple:
    """Open-vocabulary detection and segmentation using text, box, or point prompts."""
    image = checks.image_batch(image, "image")
    threshold = checks.number(threshold, "threshold", 0.0, 1.0)
    refine_iterations = checks.integer(refine_iterations, "refine_iterations", 0, 5)
    return detect(_network(model), image, conditioning, bboxes, positive_coords, negative_coords, threshold,
                  refine_iterations, bool(individual_masks))


# --- SAM3_TrackToMask -------------------------------------------------------------------------------

def track_to_mask(track_data: Any, object_indices: str = "") -> "torch.Tensor":
    """The union of the chosen objects' masks in each frame `[T, H, W]` (bilinear to the video's
    size, as ComfyUI: soft at the edges when the track's masks are of another size). `object_indices`:
    comma-separated indices (entries that are not plain digits or out of range are skipped); empty:
    every object. No objects (or none chosen): zeros."""
    import torch
    import torch.nn.functional as F

    from comfy_core.families.wan.scail_masks import unpack_masks

    if not isinstance(track_data, dict) or "orig_size" not in track_data or "packed_masks" not in track_data:
        raise NodeInputError("track_data", "SAM3_TRACK_DATA (packed_masks, orig_size)", describe(track_data))
    height, width = (int(v) for v in track_data["orig_size"])
    packed = track_data["packed_masks"]
    if packed is None:
        return torch.zeros(int(track_data["n_frames"]), height, width)
    frames, objects = packed.shape[0], packed.shape[1]
    if object_indices.strip():
        chosen = [int(p.strip()) for p in object_indices.split(",") if p.strip().isdigit()]
        chosen = [i for i in chosen if 0 <= i < objects]
    else:
        chosen = list(range(objects))
    if not chosen:
        return torch.zeros(frames, height, width)
    union = unpack_masks(packed[:, chosen]).any(dim=1, keepdim=True).float()
    return F.interpolate(union, size=(height, width), mode="bilinear", align_corners=False)[:, 0]


@v3_node("SAM3_TrackToMask", display_name="SAM3 Track to Mask", category=CATEGORY, python_module=MODULE,
         inputs=[Socket("track_data", "SAM3_TRACK_DATA", display_name="track_data"),
                 String("object_indices", display_name="object_indices", default="",
                        tooltip="Comma-separated object indices to include (e.g. '0,2,3'). Empty = all objects.")],
         outputs=[Output("MASK", "masks")])
def sam3_track_to_mask(track_data: Any, object_indices: str = "") -> tuple:
    """Select tracked objects by index and output as mask."""
    return (track_to_mask(track_data, checks.text(object_indices, "object_indices")),)


# --- SAM3_VideoTrack ---------------------------------------------------------------------------------

def video_track(model: Any, images: "torch.Tensor", initial_mask: Any = None, conditioning: Any = None,
                threshold: float = 0.5, max_objects: int = 0, detect_interval: int = 1) -> dict:
    import torch

    from comfy_core.families.wan.scail_masks import pack_masks
    from comfy_core.image.resize import upscale_samples

    count, height, width, _ = images.shape
    prompts = [(emb, mask) for emb, mask, _ in text_prompts(conditioning)] if conditioning else []
    if initial_mask is None and not prompts:
        raise NodeInputError("initial_mask", "initial_mask or conditioning (something to track)", "neither")
    with model.applied() as module, torch.inference_mode():
        network = module.diffusion_model
        if not network.can_track:
            raise NodeInputError("model", "a SAM 3.1 multiplex file (with its video tracker)",
                                 "a SAM 3 file without SAM 3.1's video tracker")
        dtype = module.get_dtype()
        device = next(network.parameters()).device
        frames = upscale_samples(images[..., :3].movedim(-1, 1).float(), SIDE, SIDE, "bilinear", "disabled")
        masks = None
        if initial_mask is not None:
            masks = initial_mask.unsqueeze(1).to(device=device, dtype=dtype)
        result = network.forward_video(frames.to(device=device, dtype=dtype), masks, pack_masks, prompts or None,
                                       threshold, max_objects, detect_interval,
                                       progress=lambda done: report_progress(done, count))
    result["orig_size"] = (height, width)
    return result


@v3_node("SAM3_VideoTrack", display_name="SAM3 Video Track", category=CATEGORY, python_module=MODULE,
         search_aliases=["sam3", "video", "track", "propagate"],
         inputs=[Socket("images", "IMAGE", display_name="images", tooltip="Video frames as batched images"),
                 Socket("model", "MODEL", display_name="model"),
                 Socket("initial_mask", "MASK", display_name="initial_mask", optional=True,
                        tooltip="Mask(s) for the first frame to track (one per object)"),
                 Socket("conditioning", "CONDITIONING", display_name="conditioning", optional=True,
                        tooltip="Text conditioning for detecting new objects during tracking"),
                 Float("detection_threshold", display_name="detection_threshold", default=0.5, min=0.0, max=1.0,
                       step=0.01, tooltip="Score threshold for text-prompted detection"),
                 Int("max_objects", display_name="max_objects", default=0, min=0,
                     tooltip="Max tracked objects (0=unlimited). Initial masks count toward this limit."),
                 Int("detect_interval", display_name="detect_interval", default=1, min=1,
                     tooltip="Run detection every N frames (1=every frame). Higher values save compute.")],
         outputs=[Output("SAM3_TRACK_DATA", "track_data")])
def sam3_video_track(images: Any, model: Any, initial_mask: Any = None, conditioning: Any = None,
                     detection_threshold: float = 0.5, max_objects: int = 0, detect_interval: int = 1) -> tuple:
    """Track objects across video frames using SAM3's memory-based tracker."""
    images = checks.image_batch(images, "images")
    if initial_mask is not None:
        initial_mask = checks.mask_batch(initial_mask, "initial_mask", ndims=(3,))
    threshold = checks.number(detection_threshold, "detection_threshold", 0.0, 1.0)
    max_objects = checks.integer(max_objects, "max_objects", 0)
    detect_interval = checks.integer(detect_interval, "detect_interval", 1)
    return (video_track(_network(model), images, initial_mask, conditioning, threshold, max_objects,
                        detect_interval),)


# --- SAM3_TrackPreview -------------------------------------------------------------------------------

COLORS = ((0.12, 0.47, 0.71), (1.0, 0.5, 0.05), (0.17, 0.63, 0.17), (0.84, 0.15, 0.16), (0.58, 0.4, 0.74),
          (0.55, 0.34, 0.29), (0.89, 0.47, 0.76), (0.5, 0.5, 0.5), (0.74, 0.74, 0.13), (0.09, 0.75, 0.81),
          (0.94, 0.76, 0.06), (0.42, 0.68, 0.84))  # ComfyUI's preview palette (matplotlib's tab10 and more)
# 3 x 5 pixel digits, rows top to bottom ("#" set)
_DIGIT_ROWS = (("###", "# #", "# #", "# #", "###"), (" # ", "## ", " # ", " # ", "###"),
               ("###", "  #", "###", "#  ", "###"), ("###", "  #", "###", "  #", "###"),
               ("# #", "# #", "###", "  #", "  #"), ("###", "#  ", "###", "  #", "###"),
               ("###", "#  ", "###", "# #", "###"), ("###", "  #", "  #", "  #", "  #"),
               ("###", "# #", "###", "# #", "###"), ("###", "# #", "###", "  #", "###"))


def _glyph(digit: int, scale: int) -> "torch.Tensor":
    import torch

    g = torch.tensor([[c == "#" for c in row] for row in _DIGIT_ROWS[digit]])
    return g.repeat_interleave(scale, 0).repeat_interleave(scale, 1)


def _paste(frame: "torch.Tensor", pattern: "torch.Tensor", top: int, left: int, value: "torch.Tensor") -> None:
    """Set `frame [H, W, 3]` to `value` where `pattern` (placed at top, left; clipped) is set."""
    h, w = frame.shape[:2]
    ph, pw = pattern.shape
    y0, x0 = max(0, -top), max(0, -left)
    y1, x1 = min(ph, h - top), min(pw, w - left)
    if y1 <= y0 or x1 <= x0:
        return
    region = frame[top + y0:top + y1, left + x0:left + x1]
    region[pattern[y0:y1, x0:x1]] = value


def draw_number(frame: "torch.Tensor", number: int, cx: int, cy: int, color: tuple, scale: int = 3) -> None:
    """`number` in the 3 x 5 digits at `scale`, centred on (cx, cy), in `color` with a 1-pixel black
    outline, into `frame [H, W, 3]` (in place)."""
    import torch
    import torch.nn.functional as F

    digits = [int(d) for d in str(number)]
    gh, gw = 5 * scale, 3 * scale
    left = cx - (len(digits) * (gw + scale) - scale) // 2
    top = cy - gh // 2
    fill = torch.tensor(color, dtype=frame.dtype)
    for i, d in enumerate(digits):
        glyph = _glyph(d, scale)
        outline = F.max_pool2d(F.pad(glyph.float()[None, None], (1, 1, 1, 1)), 3, stride=1, padding=1)[0, 0] > 0
        x = left + i * (gw + scale)
        _paste(frame, outline, top - 1, x - 1, torch.zeros(3, dtype=frame.dtype))
        _paste(frame, glyph, top, x, fill)


def preview_frames(track_data: Any, images: Any = None, opacity: float = 0.5) -> "torch.Tensor":
    """The preview's frames `[T, H, W, 3]` (module docstring)."""
    import torch
    import torch.nn.functional as F

    from comfy_core.families.wan.scail_masks import unpack_masks

    if not isinstance(track_data, dict) or "orig_size" not in track_data or "packed_masks" not in track_data:
        raise NodeInputError("track_data", "SAM3_TRACK_DATA (packed_masks, orig_size)", describe(track_data))
    packed = track_data["packed_masks"]
    height, width = (int(v) for v in track_data["orig_size"])
    if images is not None:
        height, width = images.shape[1], images.shape[2]
    count, objects = (int(track_data["n_frames"]), 0) if packed is None else (packed.shape[0], packed.shape[1])
    scores = track_data.get("scores") or []
    palette = torch.tensor([COLORS[i % len(COLORS)] for i in range(max(objects, 1))])
    ys = torch.arange(height).view(1, height, 1)
    xs = torch.arange(width).view(1, 1, width)
    out = []
    for t in range(count):
        frame = images[t, :, :, :3].float().clone() if images is not None and t < images.shape[0] \
            else torch.zeros(height, width, 3)
        if objects:
            masks = F.interpolate(unpack_masks(packed[t:t + 1]).float(), size=(height, width), mode="nearest")[0] > 0.5
            covered = masks.any(0)
            if covered.any():
                first = masks.to(torch.uint8).argmax(0)  # the lowest index wins where objects overlap
                frame = torch.where(covered.unsqueeze(-1), frame * (1 - opacity) + palette[first] * opacity, frame)
            area = masks.sum(dim=(-1, -2)).clamp(min=1)
            cy = (masks * ys).sum(dim=(-1, -2)) // area
            cx = (masks * xs).sum(dim=(-1, -2)) // area
            for i in range(objects):
                if area[i] > 1:
                    color = COLORS[i % len(COLORS)]
                    draw_number(frame, i, int(cx[i]), int(cy[i]), color)
                    if i < len(scores) and scores[i] < 1.0:
                        draw_number(frame, int(scores[i] * 100), int(cx[i]), int(cy[i]) + 5 * 3 + 3, color, scale=2)
        out.append(frame.clamp(0, 1))
    return torch.stack(out) if out else torch.zeros(0, height, width, 3)


@v3_node("SAM3_TrackPreview", display_name="SAM3 Track Preview", category=CATEGORY, python_module=MODULE,
         output_node=True,
         inputs=[Socket("track_data", "SAM3_TRACK_DATA", display_name="track_data"),
                 Socket("images", "IMAGE", display_name="images", optional=True),
                 Float("opacity", display_name="opacity", default=0.5, min=0.0, max=1.0, step=0.05),
                 Float("fps", display_name="fps", default=24.0, min=1.0, max=120.0, step=1.0)])
def sam3_track_preview(track_data: Any, images: Any = None, opacity: float = 0.5, fps: float = 24.0,
                       prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """Visualize tracked objects with distinct colors as a video preview. No tensor output — saves to temp video."""
    import uuid
    from fractions import Fraction
    from pathlib import Path

    from comfy_core.video.encode import write_mp4

    if images is not None:
        images = checks.image_batch(images, "images")
    opacity = checks.number(opacity, "opacity", 0.0, 1.0)
    fps = checks.number(fps, "fps", 1.0, 120.0)
    frames = preview_frames(track_data, images, opacity)
    folder = Path(current_env().temp_dir)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"sam3_track_preview_{uuid.uuid4().hex[:8]}.mp4"
    write_mp4(str(folder / name), frames, Fraction(round(fps * 1000), 1000))
    return {"ui": {"images": [{"filename": name, "subfolder": "", "type": "temp"}], "animated": (True,)}}

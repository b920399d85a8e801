"""Object-detection nodes: ComfyUI's `comfy_extras.nodes_rtdetr` (RTDETR_detect, DrawBBoxes).

Schemas as today's ComfyUI renders them (tests/data/object_info_2026/<Node>.json); behaviour
read from its `comfy_extras/nodes_rtdetr.py` and written here. The network is
comfy_core/models/rtdetr.py, loaded by UNETLoader from an `rt_detr_v4-*` file (the MODEL's
`model.diffusion_model`).

BOUNDING_BOX values are ComfyUI's: one list per image of `{x, y, width, height}` pixel boxes,
here with the detector's `label` (a COCO class name) and `score` (the same type as the frames
CreateBoundingBoxes / ImageCrop read; nodes/flux3_nodes.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from comfy_core.models.rtdetr_classes import COCO_CLASSES
from graph.v3_schema import Combo, Float, Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_rtdetr"
CATEGORY = "image/detection"
# Images go through the network in chunks of this many (ComfyUI's).
CHUNK = 32
DEFAULT_BOX = {"x": 0, "y": 0, "width": 512, "height": 512}  # V3 BoundingBox.Input's default
# DrawBBoxes' palette (ComfyUI's): a COCO class takes colour `index % 8`.
PALETTE = [(255, 0, 0), (0, 200, 0), (0, 0, 255), (255, 165, 0), (128, 0, 128), (0, 255, 255), (255, 20, 147),
           (100, 149, 237)]


def _detector(model: Any) -> Any:
    """The MODEL patcher of an RT-DETR file (its module's `diffusion_model` is `RTv4`)."""
    from comfy_core.models.rtdetr import RTv4

    network = getattr(getattr(model, "model", None), "diffusion_model", None)
    if not isinstance(network, RTv4) or not hasattr(model, "applied"):
        raise NodeInputError("model", "an RT-DETR model (UNETLoader of an rt_detr_v4 file)", describe(model))
    return model


def detect(model: Any, image: "torch.Tensor", threshold: float, class_name: str, max_detections: int) -> list:
    """One list of boxes per image: the network's (query, class) pairs scoring over `threshold`,
    of `class_name` ("all": any), best first, at most `max_detections`; boxes in the image's
    pixels (the network sees it scaled to 640 x 640, bilinear, no crop)."""
    import torch

    from comfy_core.image.resize import upscale_samples
    from comfy_core.models.rtdetr import INPUT_SIDE

    _b, height, width, _c = image.shape
    results = []
    with model.applied() as module, torch.inference_mode():
        network = module.diffusion_model
        for start in range(0, image.shape[0], CHUNK):
            batch = image[start:start + CHUNK, :, :, :3].movedim(-1, 1)
            if batch.shape[1] == 1:
                batch = batch.expand(-1, 3, -1, -1)
            scaled = upscale_samples(batch.float(), INPUT_SIDE, INPUT_SIDE, "bilinear", "disabled")
            results.extend(network(scaled, (width, height)))
    frames = []
    for det in results:
        keep = det["scores"] > threshold
        boxes, labels, scores = (det[k][keep].float().cpu() for k in ("boxes", "labels", "scores"))
        found = [{"x": float(b[0]), "y": float(b[1]), "width": float(b[2] - b[0]), "height": float(b[3] - b[1]),
                  "label": COCO_CLASSES[int(lbl)], "score": float(s)}
                 for b, lbl, s in zip(boxes, labels, scores)
                 if class_name == "all" or COCO_CLASSES[int(lbl)] == class_name]
        found.sort(key=lambda d: d["score"], reverse=True)
        frames.append(found[:max_detections])
    return frames


@v3_node("RTDETR_detect", display_name="Run Real-Time Detection (RT-DETR)", category=CATEGORY, python_module=MODULE,
         search_aliases=["bbox", "bounding box", "object detection", "coco"],
         inputs=[Socket("model", "MODEL", display_name="model"), Socket("image", "IMAGE", display_name="image"),
                 Float("threshold", default=0.5, display_name="threshold"),
                 Combo("class_name", ["all"] + COCO_CLASSES, default="all",
                       tooltip="Filter detections by class. Set to 'all' to disable filtering."),
                 Int("max_detections", default=100, display_name="max_detections",
                     tooltip="Maximum number of detections to return per image. In order of descending confidence "
                             "score.")],
         outputs=[Output("BOUNDING_BOX", "bboxes")])
def rtdetr_detect(model: Any, image: Any, threshold: float, class_name: str, max_detections: int) -> tuple[list]:
    """COCO objects in each image (RT-DETRv4): a BOUNDING_BOX list per image."""
    image = checks.image_batch(image, "image")
    threshold = checks.number(threshold, "threshold")
    class_name = checks.choice(class_name, ["all"] + COCO_CLASSES, "class_name")
    max_detections = checks.integer(max_detections, "max_detections")
    return (detect(_detector(model), image, threshold, class_name, max(max_detections, 0)),)


# --- DrawBBoxes ------------------------------------------------------------------------------------

def frames_for(bboxes: Any, count: int) -> list[list[dict]]:
    """`bboxes` as `count` frames of boxes (ComfyUI's normalisation): a box -> one frame of it; a
    flat list of boxes -> one frame; one frame is repeated for every image; frames beyond `count`
    are dropped and missing ones are empty."""
    if isinstance(bboxes, dict):
        frames = [[bboxes]]
    elif not isinstance(bboxes, list) or not bboxes:
        frames = [[]]
    elif isinstance(bboxes[0], dict):
        frames = [bboxes]
    else:
        frames = [list(f) if isinstance(f, list) else [] for f in bboxes]
    if len(frames) == 1:
        frames = frames * count
    return (frames + [[]] * count)[:count]


def _box(d: Any) -> tuple[float, float, float, float]:
    try:
        x, y, w, h = (float(d[k]) for k in ("x", "y", "width", "height"))
    except (TypeError, KeyError, ValueError):
        raise NodeInputError("bboxes", "bounding boxes {x, y, width, height}", describe(d)) from None
    return x, y, x + w, y + h


def _colour(label: Any, others: list) -> tuple[int, int, int]:
    """A COCO class's fixed colour; another label's by its place among the image's other labels."""
    if label in COCO_CLASSES:
        return PALETTE[COCO_CLASSES.index(label) % len(PALETTE)]
    if label is None:
        return PALETTE[0]
    return PALETTE[others.index(label) % len(PALETTE)]


def draw_frame(picture: Any, detections: list[dict]) -> Any:
    """Boxes (3 px outlines) drawn lowest score first, so the best lies on top, each with
    `label score` (or the label alone without a score) at its top-left corner."""
    from PIL import ImageDraw, ImageFont

    draw = ImageDraw.Draw(picture)
    try:
        font = ImageFont.truetype("arial.ttf", 16)
    except OSError:
        font = ImageFont.load_default()
    others = list(dict.fromkeys(d.get("label") for d in detections
                                if d.get("label") is not None and d.get("label") not in COCO_CLASSES))
    ranked = sorted(detections, key=lambda d: float(d.get("score", 1.0)))
    for d in ranked:
        x1, y1, x2, y2 = _box(d)
        label, colour = d.get("label"), _colour(d.get("label"), others)
        draw.rectangle([x1, y1, max(x1, x2), max(y1, y2)], outline=colour, width=3)
        if label is not None:
            text = f"{label} {float(d['score']):.2f}" if d.get("score") is not None else str(label)
            draw.text((x1 + 2, y1 + 2), text, fill=colour, font=font)
    return picture


@v3_node("DrawBBoxes", display_name="Draw BBoxes", category=CATEGORY, python_module=MODULE,
         search_aliases=["bbox", "bounding box", "object detection", "rt_detr", "visualize detections", "coco"],
         inputs=[Socket("image", "IMAGE", optional=True),
                 Socket("bboxes", "BOUNDING_BOX", socketless=True, default=dict(DEFAULT_BOX), forceInput=True)],
         outputs=[Output("IMAGE", "out_image")])
def draw_bboxes(bboxes: Any, image: Any = None) -> tuple["torch.Tensor"]:
    """The detections drawn on each image (a batch of B: one frame per image, or one frame for
    all); without an image, on black canvases as large as the boxes reach (640 x 640 for none)."""
    import numpy as np
    import torch
    from PIL import Image

    if image is not None:
        image = checks.image_batch(image, "image")
    frames = frames_for(bboxes, image.shape[0] if image is not None else 1)
    if image is None:
        corners = [_box(d) for frame in frames for d in frame if isinstance(d, dict)]
        width = max((int(c[2]) for c in corners), default=640)
        height = max((int(c[3]) for c in corners), default=640)
        image = torch.zeros((len(frames), max(height, 1), max(width, 1), 3), dtype=torch.float32)
    out = []
    for picture, frame in zip(image, frames):
        # to 8 bits by truncation, as torchvision's ToPILImage (and back by / 255, as ToTensor)
        pixels = (picture.float().cpu().clamp(0, 1) * 255).to(torch.uint8).numpy()
        pil = Image.fromarray(pixels[..., 0]).convert("RGB") if pixels.shape[-1] == 1 else Image.fromarray(pixels)
        if frame:
            pil = draw_frame(pil, [d for d in frame if isinstance(d, dict)])
        drawn = torch.from_numpy(np.array(pil, dtype=np.float32) / 255.0)
        out.append(drawn)
    return (torch.stack(out),)

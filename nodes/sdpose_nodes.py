"""SDPose nodes (today's ComfyUI comfy_extras/nodes_sdpose.py, V3): SDPoseKeypointExtractor,
SDPoseDrawKeypoints, SDPoseFaceBBoxes, with ComfyUI's schemas.

POSE_KEYPOINT is ComfyUI's OpenPose frame list: one dict per image, `{"canvas_width",
"canvas_height", "people": [...]}`, each person `pose_keypoints_2d` (18 body points in OpenPose
order, neck inserted), `foot_keypoints_2d` (6), `face_keypoints_2d` (68 landmarks + right eye +
left eye), `hand_right_keypoints_2d` / `hand_left_keypoints_2d` (21 each), every list flat
`[x, y, score, ...]` in pixels of the input image. BOUNDING_BOX is a list per image of
`{"x", "y", "width", "height"}` dicts (one dict alone, or a list of dicts, is taken as the boxes
of every image).

The extractor runs the SDPose checkpoint (comfy_core/families/sdpose) as ComfyUI does: each image
(or each box's crop) stretched to the 768x1024 model input, VAE-encoded, one euler step (simple
schedule, cfg 1, no noise) with Lotus's null-prompt conditioning, the decoder feature of the head's
input width captured by an `output_block_patch` (the last output-block input of that width: SD 2's
640-channel one at the latent's size), decoded by the head (MMPose's UDP + DARK,
`comfy_core.families.sdpose.head.decode_heatmaps`) and mapped back to the image. COCO-WholeBody's
133 points become OpenPose's 134: the neck (the shoulders' midpoint, scored by the lower shoulder
score when both exceed 0.3, else 0) is inserted at 17 and the body reordered to OpenPose's.
"""
from __future__ import annotations

from typing import Any

from graph.context import current
from graph.v3_schema import Boolean, Float, Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_sdpose"
CATEGORY = "image/detection"
CHECKPOINTS = "https://huggingface.co/Comfy-Org/SDPose/tree/main/checkpoints"
NECK_SCORE = 0.3
# MMPose (COCO) body index -> OpenPose index, after the neck is inserted at 17.
COCO_TO_OPENPOSE = {17: 1, 6: 2, 8: 3, 10: 4, 7: 6, 9: 7, 12: 8, 14: 9, 16: 10, 13: 12, 15: 13,
                    2: 14, 1: 15, 4: 16, 3: 17}


def openpose_order(points: Any, scores: Any) -> tuple[Any, Any]:
    """COCO-WholeBody's 133 (x, y) and scores -> OpenPose's 134: the neck inserted at 17, the body
    reordered (layout: body 0-17, feet 18-23, face 24-91, right hand 92-112, left hand 113-133)."""
    import numpy as np

    points = np.asarray(points, dtype=np.float32)
    scores = np.asarray(scores, dtype=np.float32)
    if len(points) < 17:
        return points, scores
    neck = (points[5] + points[6]) / 2
    neck_score = min(scores[5], scores[6]) if scores[5] > NECK_SCORE and scores[6] > NECK_SCORE else 0
    points = np.insert(points, 17, neck, axis=0)
    scores = np.insert(scores, 17, neck_score)
    source = np.array(list(COCO_TO_OPENPOSE))
    target = np.array(list(COCO_TO_OPENPOSE.values()))
    out_points, out_scores = points.copy(), scores.copy()
    out_points[target], out_scores[target] = points[source], scores[source]
    return out_points, out_scores


def openpose_frames(all_points: list, all_scores: list, height: int, width: int) -> list[dict]:
    """Per image, per person raw keypoints -> ComfyUI's OpenPose frame dicts (see the module docstring)."""
    import numpy as np

    def flat(points: Any, scores: Any) -> list[float]:
        return np.stack([points[:, 0], points[:, 1], scores], axis=1).flatten().tolist()

    frames = []
    for image_points, image_scores in zip(all_points, all_scores):
        people = []
        for raw_points, raw_scores in zip(image_points, image_scores):
            p, s = openpose_order(raw_points, raw_scores)
            face_points = np.concatenate([p[24:92], p[[14, 15]]])  # 68 landmarks + right eye + left eye
            face_scores = np.concatenate([s[24:92], s[[14, 15]]])
            people.append({"pose_keypoints_2d": flat(p[0:18], s[0:18]), "foot_keypoints_2d": flat(p[18:24], s[18:24]),
                           "face_keypoints_2d": flat(face_points, face_scores),
                           "hand_right_keypoints_2d": flat(p[92:113], s[92:113]),
                           "hand_left_keypoints_2d": flat(p[113:134], s[113:134])})
        frames.append({"canvas_width": width, "canvas_height": height, "people": people})
    return frames


def _per_image_boxes(bboxes: Any, count: int) -> list:
    """BOUNDING_BOX as a list per image (the last repeated for later images), as ComfyUI broadcasts it."""
    if isinstance(bboxes, dict):
        return [[bboxes]]
    if not isinstance(bboxes, (list, tuple)):
        raise NodeInputError("bboxes", "BOUNDING_BOX (a list per image of {x, y, width, height})", describe(bboxes))
    if not bboxes:
        return [None] * count
    if all(isinstance(b, dict) for b in bboxes):
        return [list(bboxes)]
    return list(bboxes)


@v3_node("SDPoseKeypointExtractor", category=CATEGORY, display_name="SDPose Keypoint Extractor", python_module=MODULE,
         search_aliases=["openpose", "pose detection", "preprocessor", "keypoints", "sdpose"],
         description=f"Extract pose keypoints from images using the SDPose model: {CHECKPOINTS}",
         inputs=[Socket("model", "MODEL"), Socket("vae", "VAE"), Socket("image", "IMAGE"),
                 Int("batch_size", default=16, min=1, max=10000, step=1),
                 Socket("bboxes", "BOUNDING_BOX", optional=True,
                        tooltip="Optional bounding boxes for more accurate detections. Required for multi-person "
                                "detection.",
                        default={"x": 0, "y": 0, "width": 512, "height": 512}, socketless=True, forceInput=True)],
         outputs=[Output("POSE_KEYPOINT", "keypoints",
                         tooltip="Keypoints in OpenPose frame format (canvas_width, canvas_height, people)")])
def sdpose_keypoint_extractor(model: Any, vae: Any, image: Any, batch_size: int, bboxes: Any = None) -> tuple[list]:
    import numpy as np
    import torch

    from comfy_core.families.sd2.lotus import null_prompt_embedding
    from comfy_core.image.resize import upscale_samples
    from comfy_core.sampling.ksampler import sample

    model = checks.model(model)
    image = checks.image_batch(image, "image")
    head = getattr(getattr(model.model, "diffusion_model", None), "heatmap_head", None)
    if head is None:
        raise NodeInputError("model", f"an SDPose model with a heatmap_head (from {CHECKPOINTS})", describe(model))
    total, height, width = image.shape[0], image.shape[1], image.shape[2]
    context = [[null_prompt_embedding(), {}]]
    model_w, model_h = head.heatmap_size[0] * 4, head.heatmap_size[1] * 4
    captured: list[torch.Tensor] = []

    def capture(h: torch.Tensor, skip: torch.Tensor, options: dict) -> tuple[torch.Tensor, torch.Tensor]:
        if h.shape[1] == head.in_channels:  # the last one wins: the full-size feature
            captured[:] = [h.detach().clone()]
        return h, skip

    patched = model.clone()
    patched.add_block_patch("output_block_patch", capture)

    def to_model(pixels: torch.Tensor) -> tuple[torch.Tensor, float, float]:
        """Stretch `[B, H, W, C]` to the model input (no aspect kept), area when shrinking both sides."""
        h, w = pixels.shape[1], pixels.shape[2]
        method = "area" if (model_h <= h and model_w <= w) else "bilinear"
        scaled = upscale_samples(pixels.movedim(-1, 1).float(), model_w, model_h, method, "disabled")
        return scaled.movedim(1, -1), model_w / w, model_h / h

    def to_image(points: np.ndarray, sx: float, sy: float, ox: int = 0, oy: int = 0) -> np.ndarray:
        points = np.array(points, dtype=np.float32)
        missing = points[..., 0] < 0
        points[..., 0] = points[..., 0] / sx + ox
        points[..., 1] = points[..., 1] / sy + oy
        points[missing] = -1
        return points

    def run(pixels: torch.Tensor) -> tuple[list, list]:
        latent = vae.encode(pixels[..., :3])
        captured.clear()
        sample(patched, torch.zeros_like(latent), 1, 1.0, "euler", "simple", context, context, latent,
               disable_noise=True, disable_pbar=True)
        if not captured:
            raise NodeInputError("model", f"a UNet with a {head.in_channels}-channel decoder feature for its heatmap "
                                          f"head", describe(model))
        points, scores = head(captured[0][:latent.shape[0]])
        return points, scores

    ctx = current()
    all_points: list[list] = []
    all_scores: list[list] = []
    if bboxes is not None:
        boxes = _per_image_boxes(bboxes, total)
        for index in range(total):
            one = image[index:index + 1]
            own = boxes[min(index, len(boxes) - 1)] if boxes else None
            points_here, scores_here = [], []
            if own:
                for box in own:
                    x1, y1 = max(0, int(box["x"])), max(0, int(box["y"]))
                    x2, y2 = min(width, int(box["x"] + box["width"])), min(height, int(box["y"] + box["height"]))
                    if x2 <= x1 or y2 <= y1:
                        continue
                    pixels, sx, sy = to_model(one[:, y1:y2, x1:x2, :])
                    points, scores = run(pixels)
                    points_here.append(to_image(points[0], sx, sy, x1, y1))
                    scores_here.append(scores[0])
            else:
                pixels, sx, sy = to_model(one)
                points, scores = run(pixels)
                points_here.append(to_image(points[0], sx, sy))
                scores_here.append(scores[0])
            all_points.append(points_here)
            all_scores.append(scores_here)
            if ctx is not None:
                ctx.progress(index + 1, total, None)
    else:
        for start in range(0, total, batch_size):
            pixels, sx, sy = to_model(image[start:start + batch_size])
            points, scores = run(pixels)
            for p, s in zip(points, scores):
                all_points.append([to_image(p, sx, sy)])
                all_scores.append([s])
            if ctx is not None:
                ctx.progress(min(start + batch_size, total), total, None)
    return (openpose_frames(all_points, all_scores, height, width),)


def _frames(keypoints: Any) -> list:
    if not isinstance(keypoints, (list, tuple)) or not all(isinstance(f, dict) for f in keypoints):
        raise NodeInputError("keypoints", "POSE_KEYPOINT (a list of OpenPose frame dicts)", describe(keypoints))
    return list(keypoints)


@v3_node("SDPoseDrawKeypoints", category=CATEGORY, display_name="SDPose Draw Keypoints", python_module=MODULE,
         search_aliases=["openpose", "pose detection", "preprocessor", "keypoints", "pose"],
         inputs=[Socket("keypoints", "POSE_KEYPOINT"), Boolean("draw_body", default=True),
                 Boolean("draw_hands", default=True), Boolean("draw_face", default=True),
                 Boolean("draw_feet", default=False), Int("stick_width", default=4, min=1, max=10, step=1),
                 Int("face_point_size", default=3, min=1, max=10, step=1),
                 Float("score_threshold", default=0.3, min=0.0, max=1.0, step=0.01),
                 Boolean("draw_head", default=True)],
         outputs=[Output("IMAGE")])
def sdpose_draw_keypoints(keypoints: Any, draw_body: bool, draw_hands: bool, draw_face: bool, draw_feet: bool,
                          stick_width: int, face_point_size: int, score_threshold: float,
                          draw_head: bool = True) -> tuple[Any]:
    """One canvas per frame (the first frame's size), black, every person drawn (nodes/pose_draw.py)."""
    import numpy as np
    import torch

    from nodes.pose_draw import draw_wholebody

    frames = _frames(keypoints)
    if not frames:
        return (torch.zeros((1, 64, 64, 3), dtype=torch.float32),)
    height, width = int(frames[0]["canvas_height"]), int(frames[0]["canvas_width"])

    def parse(flat: Any, count: int) -> tuple[np.ndarray, np.ndarray]:
        values = np.asarray(flat, dtype=np.float32).reshape(count, 3)
        return values[:, :2], values[:, 2]

    canvases = []
    for frame in frames:
        canvas = np.zeros((height, width, 3), dtype=np.uint8)
        for person in frame["people"]:
            body = parse(person["pose_keypoints_2d"], 18)
            feet_flat = person.get("foot_keypoints_2d")
            feet = parse(feet_flat, 6) if feet_flat else (np.zeros((6, 2), np.float32), np.zeros(6, np.float32))
            face_points, face_scores = parse(person["face_keypoints_2d"], 70)
            face = (face_points[:68], face_scores[:68])  # the appended eyes are the body's
            right = parse(person["hand_right_keypoints_2d"], 21)
            left = parse(person["hand_left_keypoints_2d"], 21)
            parts = (body, feet, face, right, left)
            draw_wholebody(canvas, np.concatenate([p for p, _ in parts]), np.concatenate([s for _, s in parts]),
                           score_threshold, draw_body=draw_body, draw_head=draw_head, draw_feet=draw_feet,
                           draw_face=draw_face, draw_hands=draw_hands, stick_width=stick_width,
                           face_point_size=face_point_size)
        canvases.append(canvas)
    return (torch.from_numpy(np.stack(canvases)).to(torch.float32) / 255.0,)


def face_box(points: Any, scale: float, height: int, width: int) -> list[int]:
    """ComfyUI's `get_face_bboxes` on absolute face points `[N, 2]`: the points' box grown to `scale`
    times its area at its aspect, by the half width growth sideways and a quarter of the height
    growth, three quarters of it upwards (the forehead); clipped to the image; [x1, x2, y1, y2]."""
    import numpy as np

    points = np.asarray(points, dtype=np.float32)
    (min_x, min_y), (max_x, max_y) = points.min(axis=0), points.max(axis=0)
    box_w, box_h = max_x - min_x, max_y - min_y
    if box_w <= 0 or box_h <= 0:
        return [0, 0, 0, 0]
    area = box_w * box_h * scale
    new_w, new_h = np.sqrt(area * (box_w / box_h)), np.sqrt(area * (box_h / box_w))
    grow_w, grow_h = (new_w - box_w) / 2, (new_h - box_h) / 4
    return [int(max(min_x - grow_w, 0)), int(min(max_x + grow_w, width)),
            int(max(min_y - 3 * grow_h, 0)), int(min(max_y + grow_h, height))]


@v3_node("SDPoseFaceBBoxes", category=CATEGORY, display_name="SDPose Face Bounding Boxes", python_module=MODULE,
         search_aliases=["face bbox", "face bounding box", "pose", "keypoints"],
         inputs=[Socket("keypoints", "POSE_KEYPOINT"),
                 Float("scale", default=1.5, min=1.0, max=10.0, step=0.1,
                       tooltip="Multiplier for the bounding box area around each detected face."),
                 Boolean("force_square", default=True,
                         tooltip="Expand the shorter bbox axis so the crop region is always square.")],
         outputs=[Output("BOUNDING_BOX", "bboxes",
                         tooltip="Face bounding boxes per frame, compatible with SDPoseKeypointExtractor bboxes "
                                 "input.")])
def sdpose_face_bboxes(keypoints: Any, scale: float, force_square: bool) -> tuple[list]:
    """Per frame, one box per person with face points (its 70: 68 landmarks and the two eyes),
    squared about its centre and shifted back inside when asked."""
    import numpy as np

    out = []
    for frame in _frames(keypoints):
        h, w = int(frame["canvas_height"]), int(frame["canvas_width"])
        boxes = []
        for person in frame["people"]:
            flat = person.get("face_keypoints_2d") or []
            if not flat:
                continue
            points = np.asarray(flat, dtype=np.float32).reshape(-1, 3)[:, :2]
            # ComfyUI normalises, prepends a zero row that its box function drops again, and scales
            # back: the points themselves, after the same round trip through [0, 1].
            normalised = points / np.array([w, h], dtype=np.float32)
            x1, x2, y1, y2 = face_box(normalised * np.array([w, h]), scale, h, w)
            if x2 > x1 and y2 > y1:
                if force_square and (x2 - x1) != (y2 - y1):
                    side = max(x2 - x1, y2 - y1)
                    cx, cy, half = (x1 + x2) // 2, (y1 + y2) // 2, side // 2
                    x1, y1 = max(0, cx - half), max(0, cy - half)
                    x2, y2 = min(w, x1 + side), min(h, y1 + side)
                    x1, y1 = max(0, x2 - side), max(0, y2 - side)
                boxes.append({"x": x1, "y": y1, "width": x2 - x1, "height": y2 - y1})
        out.append(boxes)
    return (out,)

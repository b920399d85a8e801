"""Whole-body pose drawing in DWPose / OpenPose style, as today's ComfyUI's SDPoseDrawKeypoints draws
(its comfy_extras/pose/keypoint_draw.py `KeypointDraw.draw_wholebody_keypoints` with its Pillow
backend), written here with numpy and Pillow on a `[H, W, 3]` uint8 canvas. No node is declared
here (nodes/sdpose_nodes.py calls it).

The rules (DWPose, Yang et al. 2023, after OpenPose, Cao et al. 2019): 134 keypoints -- body 0-17
in OpenPose order (neck at 1), feet 18-23, face 24-91, right hand 92-112, left hand 113-133. A body
limb joins two body points whose scores both reach the threshold, drawn as a filled ellipse along
the segment (half-length by `stick_width`, an outline point every 4 degrees, filled by Pillow) in
the limb's colour of the 18-colour OpenPose table; the last five limbs (nose-neck, eyes, ears) are
the head, switched by `draw_head` (the colour index stays that of the whole sequence). Body points
are discs of radius 4 in their index's colour (head points with the head, the neck with either),
feet the same colours by index.
Hand bones are 2-pixel lines in a rainbow (HSV hue = bone / 20) between points inside the canvas
and away from the origin, hand points blue discs of radius 4; face points white discs of
`face_point_size`. Missing points carry score 0 (or -1 coordinates) and fall under any threshold.
"""
from __future__ import annotations

import colorsys
import math
from typing import Sequence

import numpy as np

# OpenPose's colours (RGB), by limb and by body point.
COLORS = ((255, 0, 0), (255, 85, 0), (255, 170, 0), (255, 255, 0), (170, 255, 0), (85, 255, 0), (0, 255, 0),
          (0, 255, 85), (0, 255, 170), (0, 255, 255), (0, 170, 255), (0, 85, 255), (0, 0, 255), (85, 0, 255),
          (170, 0, 255), (255, 0, 255), (255, 0, 170), (255, 0, 85))
# Body limbs (0-based OpenPose indices): arms, legs, then the head's five (nose-neck, eyes, ears).
BODY_LIMBS = ((1, 2), (1, 5), (2, 3), (3, 4), (5, 6), (6, 7), (1, 8), (8, 9), (9, 10), (1, 11), (11, 12), (12, 13))
HEAD_LIMBS = ((1, 0), (0, 14), (14, 16), (0, 15), (15, 17))
HEAD_POINTS = frozenset((0, 14, 15, 16, 17))  # nose, eyes, ears
NECK = 1
HAND_BONES = tuple((a, b) for finger in range(5) for a, b in
                   zip((0, 4 * finger + 1, 4 * finger + 2, 4 * finger + 3), (4 * finger + 1, 4 * finger + 2,
                                                                              4 * finger + 3, 4 * finger + 4)))
FEET = range(18, 24)
FACE = range(24, 92)
RIGHT_HAND, LEFT_HAND = 92, 113
MARKER_RADIUS = 4
HAND_LINE = 2
HAND_RADIUS = 4
HAND_DOT = (0, 0, 255)
FACE_DOT = (255, 255, 255)
EPS = 0.01
OUTLINE_STEP = 4  # degrees between a limb outline's points (ComfyUI's Pillow backend: ellipse2Poly's delta 4)


def disc(canvas: np.ndarray, centre: tuple[int, int], radius: float, color: Sequence[int]) -> None:
    """Fill the pixels within `radius` of the integer `centre` (x, y)."""
    cx, cy = centre
    h, w = canvas.shape[:2]
    r = int(math.ceil(radius))
    y0, y1, x0, x1 = max(0, cy - r), min(h, cy + r + 1), max(0, cx - r), min(w, cx + r + 1)
    if y1 <= y0 or x1 <= x0:
        return
    yy, xx = np.ogrid[y0:y1, x0:x1]
    canvas[y0:y1, x0:x1][(xx - cx) ** 2 + (yy - cy) ** 2 <= radius * radius] = color


def line(canvas: np.ndarray, start: tuple[int, int], end: tuple[int, int], color: Sequence[int],
         thickness: int) -> None:
    """A line of `thickness`: discs of radius thickness / 2 + 0.5 on each pixel of Bresenham's line."""
    (x, y), (x1, y1) = start, end
    dx, dy = abs(x1 - x), abs(y1 - y)
    sx, sy = (1 if x < x1 else -1), (1 if y < y1 else -1)
    err = dx - dy
    while True:
        if thickness > 1:
            disc(canvas, (x, y), thickness / 2.0 + 0.5, color)
        elif 0 <= x < canvas.shape[1] and 0 <= y < canvas.shape[0]:
            canvas[y, x] = color
        if x == x1 and y == y1:
            return
        e2 = 2 * err
        if e2 > -dy:
            err, x = err - dy, x + sx
        if e2 < dx:
            err, y = err + dx, y + sy


def ellipse_outline(centre: tuple[int, int], axes: tuple[int, int], angle: int, step: int = OUTLINE_STEP) -> np.ndarray:
    """The closed outline of an ellipse (`axes` semi-axes + 0.5, rotated by `angle` degrees), one
    point per `step` degrees from 0 to 360 rounded to pixels, repeated points dropped: `[N, 2]` int
    (x, y) (OpenCV's `ellipse2Poly`)."""
    theta = np.deg2rad(np.minimum(np.arange(0, 360 + step, step), 360))
    ax, ay = axes[0] + 0.5, axes[1] + 0.5
    x, y = ax * np.cos(theta), ay * np.sin(theta)
    c, s = math.cos(math.radians(angle % 360)), math.sin(math.radians(angle % 360))
    points = np.rint(np.stack([centre[0] + x * c - y * s, centre[1] + x * s + y * c], axis=1)).astype(np.int64)
    keep = np.ones(len(points), dtype=bool)
    keep[1:] = np.any(points[1:] != points[:-1], axis=1)
    return points[keep]


def fill_polygons(canvas: np.ndarray, polygons: list[tuple[np.ndarray, Sequence[int]]]) -> None:
    """Fill each polygon in turn with Pillow's polygon fill (its edge pixels included), as today's
    ComfyUI fills the limbs."""
    if not polygons:
        return
    from PIL import Image, ImageDraw

    image = Image.fromarray(canvas)
    draw = ImageDraw.Draw(image)
    for points, color in polygons:
        if len(points) >= 2:
            draw.polygon([(int(x), int(y)) for x, y in points], fill=tuple(int(c) for c in color))
    canvas[:] = np.asarray(image)


def _inside(x: int, y: int, w: int, h: int) -> bool:
    return 0 <= x < w and 0 <= y < h


def draw_wholebody(canvas: np.ndarray, keypoints: np.ndarray, scores: np.ndarray, threshold: float = 0.3, *,
                   draw_body: bool = True, draw_head: bool = True, draw_feet: bool = True, draw_face: bool = True,
                   draw_hands: bool = True, stick_width: int = 4, face_point_size: int = 3) -> np.ndarray:
    """Draw one person's 134 keypoints `[134, 2]` (x, y pixels) with `scores [134]` on `canvas`
    (`[H, W, 3]` uint8, changed in place and returned). See the module docstring."""
    h, w = canvas.shape[:2]

    def shown(i: int) -> bool:
        return scores[i] >= threshold

    def pixel(i: int) -> tuple[int, int]:
        return int(keypoints[i][0]), int(keypoints[i][1])

    if draw_body or draw_head:
        limbs, offset = [], 0
        if draw_body:
            limbs += list(BODY_LIMBS)
        else:
            offset = len(BODY_LIMBS)
        if draw_head:
            limbs += list(HEAD_LIMBS)
        polygons = []
        for index, (a, b) in enumerate(limbs):
            if not (shown(a) and shown(b)):
                continue
            (xa, ya), (xb, yb) = keypoints[a], keypoints[b]
            length = math.hypot(xa - xb, ya - yb)
            if length < 1:
                continue
            angle = math.degrees(math.atan2(ya - yb, xa - xb))
            outline = ellipse_outline((int((xa + xb) / 2), int((ya + yb) / 2)), (int(length / 2), stick_width),
                                      int(angle))
            polygons.append((outline, COLORS[(index + offset) % len(COLORS)]))
        fill_polygons(canvas, polygons)
        for i in range(18):
            if (i in HEAD_POINTS and not draw_head) or (i not in HEAD_POINTS and i != NECK and not draw_body):
                continue
            x, y = pixel(i)
            if shown(i) and _inside(x, y, w, h):
                disc(canvas, (x, y), MARKER_RADIUS, COLORS[i % len(COLORS)])
    if draw_feet:
        for i in FEET:
            x, y = pixel(i)
            if shown(i) and _inside(x, y, w, h):
                disc(canvas, (x, y), MARKER_RADIUS, COLORS[i % len(COLORS)])
    if draw_hands:
        for base in (RIGHT_HAND, LEFT_HAND):
            for bone, (a, b) in enumerate(HAND_BONES):
                if not (shown(base + a) and shown(base + b)):
                    continue
                (xa, ya), (xb, yb) = pixel(base + a), pixel(base + b)
                if min(xa, ya, xb, yb) > EPS and _inside(xa, ya, w, h) and _inside(xb, yb, w, h):
                    r, g, bl = colorsys.hsv_to_rgb(bone / len(HAND_BONES), 1.0, 1.0)
                    line(canvas, (xa, ya), (xb, yb), (int(r * 255), int(g * 255), int(bl * 255)), HAND_LINE)
            for i in range(base, base + 21):
                x, y = pixel(i)
                if shown(i) and x > EPS and y > EPS and _inside(x, y, w, h):
                    disc(canvas, (x, y), HAND_RADIUS, HAND_DOT)
    if draw_face:
        for i in FACE:
            x, y = pixel(i)
            if shown(i) and x > EPS and y > EPS and _inside(x, y, w, h):
                disc(canvas, (x, y), face_point_size, FACE_DOT)
    return canvas

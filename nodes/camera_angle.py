"""CameraAngle ("Compose Camera Angle Prompt"), today's ComfyUI comfy_extras/nodes_camera_angle.py: a camera
placed on a sphere around a subject at the world origin, given as a `camera_info` (LOAD3D_CAMERA, the
dict Load3D's camera output carries: position, target, zoom, cameraType, fov) for 3-D nodes, and as a
plain-English shot description for prompts (the multi-angle LoRA of `template_qwen_multiangle.app` is
prompted with it).

Behaviour read from ComfyUI's file (its newer version: the subject at the origin, the camera 6 units away,
the zoom widget carried as a 1.0-1.875 zoom factor rather than moving the camera), written here:

* the widgets are clamped to their ranges first (horizontal 0..360, vertical -30..60, zoom 0..10; the
  angles truncated to integers);
* the horizontal angle picks one of eight 45-degree sectors centred on 0, 45, ..., 315 (front view,
  front-right quarter view, right side view, ...); the vertical angle is a low-angle shot below -15,
  eye-level below 15, elevated below 45, else high-angle; the zoom is a wide shot below 2, a medium
  shot below 6, else a close-up; the prompt joins the three with spaces;
* the position is the orbit point `target + d * (cos(pitch) sin(yaw), sin(pitch), cos(pitch) cos(yaw))`
  (Y up, 0 degrees looking from +Z, 90 from +X), d = 6.
"""
from __future__ import annotations

import math
from typing import Any

from graph.v3_schema import Float, Int, Output, Socket, String, v3_node
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_camera_angle"
# The scene the editor's 3-D preview draws (ComfyUI's frontend cameraAngle extension): a unit cube at the
# origin, where downstream 3-D nodes centre their models.
SUBJECT_CENTER = (0.0, 0.0, 0.0)
CAMERA_FOV = 35.0
SUBJECT_DISTANCE = 6.0
MIN_ZOOM_FACTOR, MAX_ZOOM_FACTOR = 1.0, 1.875

HORIZONTAL_RANGE = (0, 360)
VERTICAL_RANGE = (-30, 60)
ZOOM_RANGE = (0.0, 10.0)

# Eight sectors of 45 degrees, the first centred on 0 (the front), clockwise seen from above.
HORIZONTAL_TERMS = ("front view", "front-right quarter view", "right side view", "back-right quarter view",
                    "back view", "back-left quarter view", "left side view", "front-left quarter view")
# (exclusive upper bound, term); None: everything above.
VERTICAL_TERMS = ((-15, "low-angle shot"), (15, "eye-level shot"), (45, "elevated shot"), (None, "high-angle shot"))
DISTANCE_TERMS = ((2, "wide shot"), (6, "medium shot"), (None, "close-up"))


def _bucket(value: float, terms: tuple[tuple[float | None, str], ...]) -> str:
    return next(term for upper, term in terms if upper is None or value < upper)


def horizontal_term(angle: float) -> str:
    """The sector of `angle` (degrees): sector k spans [45k - 22.5, 45k + 22.5)."""
    return HORIZONTAL_TERMS[int(((angle % 360) + 22.5) // 45) % len(HORIZONTAL_TERMS)]


def vertical_term(angle: float) -> str:
    return _bucket(angle, VERTICAL_TERMS)


def distance_term(zoom: float) -> str:
    return _bucket(zoom, DISTANCE_TERMS)


def describe_camera_angle(horizontal_angle: float, vertical_angle: float, zoom: float) -> str:
    """The prompt text: `"<horizontal> <vertical> <distance>"`, e.g. "front view eye-level shot medium shot"."""
    return f"{horizontal_term(horizontal_angle)} {vertical_term(vertical_angle)} {distance_term(zoom)}"


def zoom_factor(zoom: float) -> float:
    """The zoom widget (0..10) as camera_info's zoom factor, linear from 1.0 to 1.875."""
    return MIN_ZOOM_FACTOR + (MAX_ZOOM_FACTOR - MIN_ZOOM_FACTOR) * (zoom / ZOOM_RANGE[1])


def camera_info(horizontal_angle: float, vertical_angle: float, zoom: float) -> dict[str, Any]:
    """The LOAD3D_CAMERA dict of a camera orbiting the subject at SUBJECT_DISTANCE (yaw = horizontal,
    pitch = vertical, in degrees), looking at it."""
    yaw, pitch = math.radians(horizontal_angle), math.radians(vertical_angle)
    cx, cy, cz = SUBJECT_CENTER
    ring = SUBJECT_DISTANCE * math.cos(pitch)  # the radius of the horizontal circle at this elevation
    return {
        "position": {"x": cx + ring * math.sin(yaw), "y": cy + SUBJECT_DISTANCE * math.sin(pitch),
                     "z": cz + ring * math.cos(yaw)},
        "target": {"x": cx, "y": cy, "z": cz},
        "zoom": zoom_factor(zoom),
        "cameraType": "perspective",
        "fov": CAMERA_FOV,
    }


def _clamped(value: Any, name: str, bounds: tuple[float, float], kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise NodeInputError(name, f"a number in {bounds[0]}..{bounds[1]}", describe(value))
    low, high = bounds
    return max(kind(low), min(kind(high), kind(value)))


@v3_node("CameraAngle", display_name="Compose Camera Angle Prompt", category="3d", python_module=MODULE,
         search_aliases=("multi angle", "camera view", "orbit camera", "shot angle", "camera prompt"),
         description="Pick a camera angle around a subject with a 3D preview. Outputs a camera_info "
                     "for 3D nodes and a plain-English shot description for prompts.",
         inputs=[Int("horizontal_angle", default=0, min=HORIZONTAL_RANGE[0], max=HORIZONTAL_RANGE[1], step=1,
                     tooltip="Azimuth around the subject in degrees. 0 is the front, 90 the right side, "
                             "180 the back."),
                 Int("vertical_angle", default=0, min=VERTICAL_RANGE[0], max=VERTICAL_RANGE[1], step=1,
                     tooltip="Elevation in degrees. Negative looks up from below, positive looks down from above."),
                 Float("zoom", default=5.0, min=ZOOM_RANGE[0], max=ZOOM_RANGE[1], step=0.1,
                       tooltip="Lens zoom on the subject: 0 is a wide shot, 10 a close-up. Carried into "
                               "camera_info.zoom."),
                 Socket("image", "IMAGE", optional=True,
                        tooltip="Optional reference image shown on the front of the subject cube in the 3D preview."),
                 # the editor's 3-D preview widget: saved with the workflow, meaningless here
                 String("view", default="", optional=True, socketless=True, widgetType="CAMERA_ANGLE_VIEW")],
         outputs=[Output("LOAD3D_CAMERA", "camera_info"), Output("STRING", "prompt")])
def camera_angle(horizontal_angle: int, vertical_angle: int, zoom: float, image: Any = None,
                 view: Any = None) -> tuple[dict[str, Any], str]:
    horizontal_angle = _clamped(horizontal_angle, "horizontal_angle", HORIZONTAL_RANGE, int)
    vertical_angle = _clamped(vertical_angle, "vertical_angle", VERTICAL_RANGE, int)
    zoom = _clamped(zoom, "zoom", ZOOM_RANGE, float)
    return (camera_info(horizontal_angle, vertical_angle, zoom),
            describe_camera_angle(horizontal_angle, vertical_angle, zoom))

"""WanCameraEmbedding, ComfyUI 0.3.64's camera trajectory node (comfy_extras/
nodes_camera_trajectory.py): a preset camera motion over the video as the Plücker-ray control
latent `[1, 24, (length - 1) // 4 + 1, height, width]` (WAN_CAMERA_EMBEDDING) that
WanCameraImageToVideo passes to Wan's Fun Camera models as `camera_conditions`, and the width,
height and length it was made for. The maths is comfy_core/latent/camera_trajectory.py.
"""
from __future__ import annotations

from graph.native import Combo, Float, Output, node
import nodes.checks as checks
import nodes.wan_conditioning as wan
from nodes.errors import NodeInputError

CAMERA_POSES = ["Static", "Pan Up", "Pan Down", "Pan Left", "Pan Right", "Zoom In", "Zoom Out",
                "Anti Clockwise (ACW)", "ClockWise (CW)"]


def _focal(value: float, input_name: str) -> float:
    # The widget allows 0, but a zero focal length sends every ray to infinity (NaN embeddings).
    value = checks.number(value, input_name, 0.0)
    if value == 0:
        raise NodeInputError(input_name, "a focal length above 0", repr(value))
    return value


@node("WanCameraEmbedding", display_name=None, category="camera", python_module="comfy_extras.nodes_camera_trajectory",
      inputs=[Combo("camera_pose", CAMERA_POSES, default="Static"), *wan.size_inputs(batch=False),
              Float("speed", default=1.0, min=0, max=10.0, step=0.1, optional=True),
              Float("fx", default=0.5, min=0, max=1, step=0.000000001, optional=True),
              Float("fy", default=0.5, min=0, max=1, step=0.000000001, optional=True),
              Float("cx", default=0.5, min=0, max=1, step=0.01, optional=True),
              Float("cy", default=0.5, min=0, max=1, step=0.01, optional=True)],
      outputs=[Output("WAN_CAMERA_EMBEDDING", "camera_embedding"), Output("INT", "width"), Output("INT", "height"),
               Output("INT", "length")])
def wan_camera_embedding(camera_pose: str, width: int, height: int, length: int, speed: float = 1.0,
                         fx: float = 0.5, fy: float = 0.5, cx: float = 0.5, cy: float = 0.5) -> tuple:
    """The preset's Plücker embedding, and the size it was made for."""
    from comfy_core.latent.camera_trajectory import camera_embedding

    camera_pose = checks.choice(camera_pose, CAMERA_POSES, "camera_pose")
    width, height, length, _ = wan.video_size(width, height, length)
    speed = checks.number(speed, "speed", 0.0)
    fx, fy = _focal(fx, "fx"), _focal(fy, "fy")
    cx, cy = checks.number(cx, "cx"), checks.number(cy, "cy")
    embedding = camera_embedding(camera_pose, width, height, length, speed, fx, fy, cx, cy)
    return embedding, width, height, length

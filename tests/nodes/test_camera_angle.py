"""CameraAngle ("Compose Camera Angle Prompt", today's ComfyUI nodes_camera_angle.py): the shot description's
words for each bucket of the three widgets, and the camera_info of a camera on a sphere around the origin."""
from __future__ import annotations

import math
import uuid

import pytest

from nodes.camera_angle import camera_angle
from nodes.errors import NodeInputError
from tests.nodes.workflow_2026 import Runner, node


def _prompt(horizontal: int = 0, vertical: int = 0, zoom: float = 5.0) -> str:
    return camera_angle(horizontal, vertical, zoom)[1]


@pytest.mark.parametrize("angle, words", [
    # eight 45-degree sectors centred on 0, 45, ..., 315: a sector starts 22.5 degrees before its centre
    (0, "front view"), (22, "front view"), (23, "front-right quarter view"), (45, "front-right quarter view"),
    (67, "front-right quarter view"), (68, "right side view"), (90, "right side view"),
    (113, "back-right quarter view"), (135, "back-right quarter view"), (158, "back view"), (180, "back view"),
    (202, "back view"), (203, "back-left quarter view"), (225, "back-left quarter view"),
    (248, "left side view"), (270, "left side view"), (293, "front-left quarter view"),
    (333, "front-left quarter view"), (337, "front-left quarter view"), (338, "front view"), (360, "front view"),
])
def test_horizontal_angle_words(angle, words):
    assert _prompt(horizontal=angle) == f"{words} eye-level shot medium shot"


@pytest.mark.parametrize("angle, words", [
    (-30, "low-angle shot"), (-16, "low-angle shot"), (-15, "eye-level shot"), (0, "eye-level shot"),
    (14, "eye-level shot"), (15, "elevated shot"), (44, "elevated shot"), (45, "high-angle shot"),
    (60, "high-angle shot"),
])
def test_vertical_angle_words(angle, words):
    assert _prompt(vertical=angle) == f"front view {words} medium shot"


@pytest.mark.parametrize("zoom, words", [
    (0.0, "wide shot"), (1.9, "wide shot"), (2.0, "medium shot"), (5.9, "medium shot"), (6.0, "close-up"),
    (10.0, "close-up"),
])
def test_zoom_words(zoom, words):
    assert _prompt(zoom=zoom) == f"front view eye-level shot {words}"


@pytest.mark.parametrize("horizontal, vertical, zoom", [(0, 0, 0.0), (90, 0, 5.0), (180, 30, 10.0), (333, 17, 5.0),
                                                        (270, -30, 2.5), (45, 60, 7.3)])
def test_camera_on_the_sphere_of_radius_6_around_the_origin(horizontal, vertical, zoom):
    info = camera_angle(horizontal, vertical, zoom)[0]
    # Spherical coordinates, Y up: azimuth yaw from +Z towards +X, elevation pitch above the XZ plane.
    yaw, pitch = math.radians(horizontal), math.radians(vertical)
    expected = {"x": 6 * math.cos(pitch) * math.sin(yaw), "y": 6 * math.sin(pitch),
                "z": 6 * math.cos(pitch) * math.cos(yaw)}
    assert info["position"] == pytest.approx(expected, abs=1e-12)
    assert math.dist(tuple(info["position"].values()), (0, 0, 0)) == pytest.approx(6.0)
    assert info["target"] == {"x": 0.0, "y": 0.0, "z": 0.0}
    # the zoom widget does not move the camera: it is a zoom factor from 1.0 (zoom 0) to 1.875 (zoom 10)
    assert info["zoom"] == pytest.approx(1.0 + 0.875 * zoom / 10)
    assert (info["cameraType"], info["fov"]) == ("perspective", 35.0)
    assert set(info) == {"position", "target", "zoom", "cameraType", "fov"}


def test_axes_front_right_back_and_above():
    front, right, back = (camera_angle(h, 0, 5.0)[0]["position"] for h in (0, 90, 180))
    assert front == pytest.approx({"x": 0.0, "y": 0.0, "z": 6.0}, abs=1e-12)
    assert right == pytest.approx({"x": 6.0, "y": 0.0, "z": 0.0}, abs=1e-12)
    assert back == pytest.approx({"x": 0.0, "y": 0.0, "z": -6.0}, abs=1e-12)
    assert camera_angle(0, 60, 5.0)[0]["position"]["y"] == pytest.approx(6 * math.sqrt(3) / 2)


def test_values_are_clamped_and_angles_truncated_as_comfyui_does():
    # ComfyUI's execute clamps to the widget ranges (a pack may call it directly) and takes int() of the angles
    assert camera_angle(400, 90, 12.0) == camera_angle(360, 60, 10.0)
    assert camera_angle(-5, -45, -1.0) == camera_angle(0, -30, 0.0)
    assert camera_angle(22.9, 14.9, 5.0)[1] == "front view eye-level shot medium shot"
    with pytest.raises(NodeInputError, match="zoom"):
        camera_angle(0, 0, "close")
    with pytest.raises(NodeInputError, match="horizontal_angle"):
        camera_angle(float("nan"), 0, 5.0)


async def test_the_templates_widgets_through_a_workflow(tmp_path):
    # template_qwen_multiangle.app saves the node with widgets [333, 17, 5, "camera"] (the last is the
    # editor's preview widget `view`) and feeds `prompt` to the edit model's text encoder
    runner = Runner(tmp_path)
    prompt = {"1": node("EmptyImage", width=8, height=8, batch_size=1, color=0),
              "2": node("CameraAngle", horizontal_angle=333, vertical_angle=17, zoom=5, image=["1", 0], view="camera"),
              "3": node("PreviewAny", source=["2", 1])}
    out = await runner.run(prompt, str(uuid.uuid4()))
    assert out.status == "success", out.error
    assert out.ui_outputs["3"] == {"text": ["front-left quarter view elevated shot medium shot"]}

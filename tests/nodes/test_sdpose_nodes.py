"""SDPose nodes (nodes/sdpose_nodes.py, nodes/pose_draw.py): COCO-WholeBody -> OpenPose frames, the
extractor on the tiny SDPose checkpoint (full-image batches, box crops mapped back), the whole-body
drawing's rules, and the face boxes."""
from __future__ import annotations

import colorsys

import numpy as np
import pytest
import torch

from nodes.errors import NodeInputError
from nodes.pose_draw import COLORS, draw_wholebody
from nodes.sdpose_nodes import (openpose_frames, openpose_order, sdpose_draw_keypoints, sdpose_face_bboxes,
                                sdpose_keypoint_extractor)
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.template_models_sdpose import tiny_sdpose_state_dict


def _coco(count: int = 133) -> tuple[np.ndarray, np.ndarray]:
    points = np.stack([np.arange(count) * 2.0, np.arange(count) * 3.0], 1)
    return points, np.linspace(0.31, 0.99, count)


def test_openpose_order_inserts_the_neck_and_reorders_the_body():
    points, scores = _coco()
    p, s = openpose_order(points, scores)
    assert p.shape == (134, 2) and s.shape == (134,)
    np.testing.assert_allclose(p[1], (points[5] + points[6]) / 2)
    assert s[1] == pytest.approx(min(scores[5], scores[6]))
    # OpenPose: nose, neck, R shoulder/elbow/wrist, L shoulder/elbow/wrist, R hip/knee/ankle, L hip/knee/ankle,
    # R eye, L eye, R ear, L ear; COCO: nose, L eye, R eye, L ear, R ear, L/R shoulder, L/R elbow, ...
    coco_of = {0: 0, 2: 6, 3: 8, 4: 10, 5: 5, 6: 7, 7: 9, 8: 12, 9: 14, 10: 16, 11: 11, 12: 13, 13: 15,
               14: 2, 15: 1, 16: 4, 17: 3}
    for openpose, coco in coco_of.items():
        np.testing.assert_array_equal(p[openpose], points[coco])
    np.testing.assert_array_equal(p[18:], points[17:])  # feet, face, hands follow unchanged
    low = scores.copy()
    low[6] = 0.2
    assert openpose_order(points, low)[1][1] == 0  # a shoulder at or under 0.3: no neck


def test_openpose_frames_have_comfyuis_lists():
    points, scores = _coco()
    (frame,) = openpose_frames([[points]], [[scores]], 50, 40)
    assert (frame["canvas_width"], frame["canvas_height"]) == (40, 50)
    (person,) = frame["people"]
    lengths = {k: len(v) for k, v in person.items()}
    assert lengths == {"pose_keypoints_2d": 54, "foot_keypoints_2d": 18, "face_keypoints_2d": 210,
                       "hand_right_keypoints_2d": 63, "hand_left_keypoints_2d": 63}
    face = np.array(person["face_keypoints_2d"]).reshape(70, 3)
    p, s = openpose_order(points, scores)
    np.testing.assert_allclose(face[68, :2], p[14]) and np.testing.assert_allclose(face[69, :2], p[15])
    np.testing.assert_allclose(np.array(person["hand_left_keypoints_2d"]).reshape(21, 3)[:, 2], s[113:], rtol=1e-6)


def _person(body: dict[int, tuple[float, float]], extra: dict[int, tuple[float, float]] | None = None,
            score: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    points, scores = np.full((134, 2), -1.0), np.zeros(134)
    for i, xy in {**body, **(extra or {})}.items():
        points[i], scores[i] = xy, score
    return points, scores


def test_a_limb_is_an_ellipse_in_its_colour_and_the_head_switches_apart():
    points, scores = _person({1: (20, 20), 2: (60, 20), 0: (20, 60)})  # neck, right shoulder, nose
    canvas = draw_wholebody(np.zeros((80, 80, 3), np.uint8), points, scores, 0.3, stick_width=4)
    assert tuple(canvas[20, 40]) == COLORS[0]  # limb 0 (neck - right shoulder), mid-way
    assert all(tuple(canvas[y, 40]) == COLORS[0] for y in range(16, 25))  # half-width 4 (+0.5), edges filled
    assert not canvas[25, 40].any() and not canvas[15, 40].any()
    assert tuple(canvas[40, 20]) == COLORS[12]  # limb 12: nose - neck (the first head limb)
    assert tuple(canvas[60, 20]) == COLORS[0]  # the nose's point
    no_head = draw_wholebody(np.zeros((80, 80, 3), np.uint8), points, scores, 0.3, draw_head=False)
    assert not no_head[40, 20].any() and not no_head[60, 20].any() and tuple(no_head[20, 40]) == COLORS[0]
    head_only = draw_wholebody(np.zeros((80, 80, 3), np.uint8), points, scores, 0.3, draw_body=False)
    assert tuple(head_only[40, 20]) == COLORS[12] and not head_only[20, 40].any()
    assert tuple(head_only[20, 20]) == COLORS[1]  # the neck's point with the head alone
    faint = draw_wholebody(np.zeros((80, 80, 3), np.uint8), points, scores, 0.95)
    assert not faint.any()


def test_feet_hands_and_face_follow_their_rules():
    base = 92
    points, scores = _person({}, {18: (10, 10), base: (30, 30), base + 1: (50, 30), 30: (70, 70)})
    canvas = draw_wholebody(np.zeros((90, 90, 3), np.uint8), points, scores, 0.3, draw_feet=False, face_point_size=2)
    assert not canvas[10, 10].any()  # feet off
    r, g, b = colorsys.hsv_to_rgb(0.0, 1.0, 1.0)
    assert tuple(canvas[30, 40]) == (int(r * 255), int(g * 255), int(b * 255))  # bone 0: red
    assert tuple(canvas[30, 30]) == (0, 0, 255)  # hand points: blue discs of radius 4
    assert tuple(canvas[30, 26]) == (0, 0, 255) and not canvas[30, 25].any()
    assert tuple(canvas[70, 72]) == (255, 255, 255) and not canvas[70, 73].any()  # face: white, radius 2
    feet = draw_wholebody(np.zeros((90, 90, 3), np.uint8), points, scores, 0.3, draw_feet=True)
    assert tuple(feet[10, 10]) == COLORS[0]  # foot 18: colour 18 % 18


def test_draw_node_draws_every_frame_and_an_empty_list_is_a_black_square():
    (empty,) = sdpose_draw_keypoints([], True, True, True, False, 4, 3, 0.3)
    assert empty.shape == (1, 64, 64, 3) and not empty.any()
    points, scores = _coco()
    frames = openpose_frames([[points], [points * 0.5]], [[scores], [scores]], 420, 300)
    (images,) = sdpose_draw_keypoints(frames, True, True, True, True, 4, 3, 0.3)
    assert images.shape == (2, 420, 300, 3) and images.dtype == torch.float32
    assert all(image.any() for image in images) and not torch.equal(images[0], images[1])
    with pytest.raises(NodeInputError):
        sdpose_draw_keypoints({"people": []}, True, True, True, True, 4, 3, 0.3)


def test_face_boxes_grow_the_face_and_square_them():
    face = np.zeros((70, 3))
    face[:, 0] = np.linspace(40, 60, 70)
    face[:, 1] = np.linspace(50, 90, 70)
    face[:, 2] = 1.0
    frames = [{"canvas_width": 200, "canvas_height": 200, "people": [{"face_keypoints_2d": face.ravel().tolist()},
                                                                        {"face_keypoints_2d": []}]}]
    # 20 x 40 face, area x 2 at its aspect: 28.28 x 56.57; sideways 4.14 each, up 3 x 4.14, down 4.14
    ((box,),) = sdpose_face_bboxes(frames, 2.0, False)[0]
    assert box == {"x": 35, "y": 37, "width": 29, "height": 57}
    ((square,),) = sdpose_face_bboxes(frames, 2.0, True)[0]
    assert square == {"x": 21, "y": 37, "width": 57, "height": 57}


@pytest.fixture(scope="module")
def sdpose(tmp_path_factory):
    from comfy_core.loading import load_checkpoint

    path = save(tiny_sdpose_state_dict(seed=4), tmp_path_factory.mktemp("sdpose") / "sdpose_wholebody.safetensors")
    model, _clip, vae = load_checkpoint(path)
    return model, vae


def _points(frame: dict) -> np.ndarray:
    return np.array(frame["people"][0]["pose_keypoints_2d"]).reshape(18, 3)


def test_the_extractor_batches_full_images_and_maps_boxes_back(sdpose):
    model, vae = sdpose
    gen = torch.Generator().manual_seed(0)
    image = torch.rand(3, 48, 40, 3, generator=gen)
    (frames,) = sdpose_keypoint_extractor(model, vae, image, 2)  # batches of 2 and 1
    assert len(frames) == 3 and all(len(f["people"]) == 1 for f in frames)
    assert (frames[0]["canvas_width"], frames[0]["canvas_height"]) == (40, 48)
    whole = [{"x": 0, "y": 0, "width": 40, "height": 48}]
    boxes = [whole, [{"x": 8, "y": 12, "width": 24, "height": 30}, {"x": 50, "y": 0, "width": 10, "height": 10}], []]
    (cropped,) = sdpose_keypoint_extractor(model, vae, image, 16, bboxes=boxes)
    np.testing.assert_allclose(_points(cropped[0]), _points(frames[0]), atol=0.05)  # same pixels, another batch
    assert len(cropped[1]["people"]) == 1  # the box outside the image is skipped
    inside = _points(cropped[1])
    found = inside[:, 2] > 0
    assert found.any()
    assert (inside[found, 0] >= 8 - 1).all() and (inside[found, 0] <= 32 + 1).all()
    assert (inside[found, 1] >= 12 - 1).all() and (inside[found, 1] <= 42 + 1).all()
    assert len(cropped[2]["people"]) == 1  # no box for this image: the whole image
    np.testing.assert_allclose(_points(cropped[2]), _points(frames[2]), atol=0.05)


def test_the_extractor_refuses_a_model_without_a_heatmap_head(tmp_path):
    from comfy_core.loading import load_checkpoint
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    model, _clip, vae = load_checkpoint(write_tiny_checkpoint(tmp_path, "sd2"))
    with pytest.raises(NodeInputError, match="heatmap_head"):
        sdpose_keypoint_extractor(model, vae, torch.rand(1, 16, 16, 3), 16)


def test_an_unlinked_bboxes_socket_sends_no_box(tmp_path):
    """`bboxes` is a BoundingBox input with forceInput: a socket in the editor (the templates save only
    batch_size), so an unlinked one sends nothing and the extractor runs on whole images."""
    import json

    from graph.editor_workflow import editor_to_prompt
    from graph.registry import Registry
    from nodes import register_builtin_nodes
    from nodes.environment import Environment

    registry = Registry()
    register_builtin_nodes(registry)
    info = json.loads(json.dumps(registry.object_info(Environment.rooted_at(tmp_path))))
    sockets = [("model", "MODEL", 1), ("vae", "VAE", 2), ("image", "IMAGE", 3), ("bboxes", "BOUNDING_BOX", None)]
    workflow = {"nodes": [
        {"id": 1, "type": "CheckpointLoaderSimple", "mode": 0, "inputs": [], "widgets_values": ["sdpose.safetensors"],
         "outputs": [{"name": "MODEL", "type": "MODEL", "links": [1]}, {"name": "CLIP", "type": "CLIP", "links": []},
                     {"name": "VAE", "type": "VAE", "links": [2]}]},
        {"id": 2, "type": "LoadImage", "mode": 0, "inputs": [], "widgets_values": ["dancer.png", "image"],
         "outputs": [{"name": "IMAGE", "type": "IMAGE", "links": [3]}, {"name": "MASK", "type": "MASK", "links": []}]},
        {"id": 3, "type": "SDPoseKeypointExtractor", "mode": 0, "widgets_values": [16],
         "inputs": [{"name": n, "type": t, "link": link} for n, t, link in sockets],
         "outputs": [{"name": "keypoints", "type": "POSE_KEYPOINT", "links": []}]}],
        "links": [[1, 1, 0, 3, 0, "MODEL"], [2, 1, 2, 3, 1, "VAE"], [3, 2, 0, 3, 2, "IMAGE"]]}
    prompt = editor_to_prompt(workflow, info)
    assert prompt["3"]["inputs"] == {"batch_size": 16, "model": ["1", 0], "vae": ["1", 2], "image": ["2", 0]}

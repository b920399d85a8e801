"""RTDETR_detect and DrawBBoxes (nodes/detection_nodes.py): ComfyUI's post-processing of the
detector's output (threshold, class filter, best first, at most max_detections, boxes in the
image's pixels) and its drawing (frame normalisation, colours, canvases)."""
from __future__ import annotations

import pytest
import torch

from comfy_core.models.rtdetr_classes import COCO_CLASSES
from nodes.detection_nodes import PALETTE, draw_bboxes, frames_for, rtdetr_detect
from nodes.errors import NodeInputError
from tests.fixtures.template_models_rtdetr import write_tiny_rtdetr


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    from comfy_core.split import load_diffusion_model

    path = tmp_path_factory.mktemp("models") / "rt_detr_v4-x-hgnet_fp16.safetensors"
    write_tiny_rtdetr(path, seed=5)
    return load_diffusion_model(path)


@pytest.fixture(scope="module")
def image():
    return torch.rand(2, 40, 72, 3, generator=torch.Generator().manual_seed(7))


@pytest.fixture(scope="module")
def everything(detector, image):
    """Every (query, class) pair the network keeps (300 per image), unfiltered."""
    return rtdetr_detect(detector, image, -1.0, "all", 1000)[0]


def test_boxes_are_the_networks_in_image_pixels(detector, image, everything):
    from comfy_core.image.resize import upscale_samples

    scaled = upscale_samples(image.movedim(-1, 1), 640, 640, "bilinear", "disabled")
    with torch.inference_mode(), detector.applied() as module:
        raw = module.diffusion_model(scaled, (72, 40))
    assert len(everything) == 2 and all(len(frame) == 300 for frame in everything)
    for frame, det in zip(everything, raw):
        order = torch.argsort(det["scores"], descending=True, stable=True)
        assert [d["score"] for d in frame] == pytest.approx(det["scores"][order].tolist())
        x1, y1, x2, y2 = det["boxes"][order[0]].tolist()
        first = frame[0]
        assert (first["x"], first["y"], first["width"], first["height"]) == pytest.approx((x1, y1, x2 - x1, y2 - y1))
        assert first["label"] == COCO_CLASSES[int(det["labels"][order[0]])]
        assert set(first) == {"x", "y", "width", "height", "label", "score"}


def test_threshold_class_and_count(detector, image, everything):
    scores = sorted(d["score"] for d in everything[0])
    threshold = scores[len(scores) // 2]
    (kept,) = rtdetr_detect(detector, image, threshold, "all", 1000)
    assert [d["score"] for d in kept[0]] == [d["score"] for d in everything[0] if d["score"] > threshold]
    label = everything[0][0]["label"]
    (person,) = rtdetr_detect(detector, image, -1.0, label, 1000)
    assert person[0] == [d for d in everything[0] if d["label"] == label]
    (two,) = rtdetr_detect(detector, image, -1.0, "all", 2)
    assert two == [frame[:2] for frame in everything]
    # the tiny detector's score head favours people: the template's "person" boxes exist
    assert person[0] and label == "person"


def test_refuses_a_model_that_is_not_a_detector(image):
    with pytest.raises(NodeInputError, match="RT-DETR"):
        rtdetr_detect(object(), image, 0.5, "all", 10)
    with pytest.raises(NodeInputError, match="class_name"):
        rtdetr_detect(object(), image, 0.5, "unicorn", 10)


def test_frames_normalised_as_comfyui():
    box = {"x": 1, "y": 2, "width": 3, "height": 4}
    assert frames_for(box, 3) == [[box]] * 3
    assert frames_for([box, box], 2) == [[box, box]] * 2
    assert frames_for([[box], []], 3) == [[box], [], []]
    assert frames_for([[box], [], [box]], 2) == [[box], []]
    assert frames_for(None, 2) == [[], []] and frames_for([], 1) == [[]]


def test_draws_each_frame_on_its_image():
    image = torch.full((2, 50, 60, 3), 0.5)
    person = {"x": 10, "y": 10, "width": 30, "height": 20, "label": "person", "score": 0.9}
    car = {"x": 5, "y": 5, "width": 10, "height": 10, "label": "car", "score": 0.8}
    (out,) = draw_bboxes([[person], [car]], image)
    assert out.shape == image.shape
    untouched = torch.full((3,), int(0.5 * 255) / 255)  # 8 bits by truncation, then / 255
    assert torch.allclose(out[0, 45, 55], untouched) and torch.allclose(out[1, 45, 55], untouched)
    red = torch.tensor(PALETTE[COCO_CLASSES.index("person") % 8], dtype=torch.float32) / 255
    blue = torch.tensor(PALETTE[COCO_CLASSES.index("car") % 8], dtype=torch.float32) / 255
    assert torch.allclose(out[0, 20, 10], red)  # the left edge (3 px wide)
    assert torch.allclose(out[0, 30, 39], red)  # the bottom-right corner
    assert torch.allclose(out[1, 10, 5], blue) and torch.allclose(out[1, 40, 40], untouched)
    assert torch.allclose(out[1, 20, 10], untouched)  # the person is not on the second image


def test_labels_outside_coco_and_blank_canvases():
    boxes = [{"x": 0, "y": 0, "width": 20, "height": 20, "label": "robot"},
             {"x": 30, "y": 5, "width": 40, "height": 25, "label": "alien", "score": 0.3},
             {"x": 2, "y": 40, "width": 10, "height": 8}]
    (out,) = draw_bboxes(boxes)
    assert out.shape == (1, 48, 70, 3)  # as far as the boxes reach
    colours = [torch.tensor(c, dtype=torch.float32) / 255 for c in PALETTE]
    assert torch.allclose(out[0, 10, 0], colours[0])  # "robot": the first other label
    assert torch.allclose(out[0, 15, 30], colours[1])  # "alien": the second
    assert torch.allclose(out[0, 44, 2], colours[0])  # no label: the first colour, no text
    (empty,) = draw_bboxes([])
    assert empty.shape == (1, 640, 640, 3) and not bool(empty.any())

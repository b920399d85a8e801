"""SAM3_Detect (nodes/sam3_nodes.py) on the tiny SAM 3.1 network: its text, box and point paths,
the threshold, the per-category detection count, refinement and the mask / box outputs as
ComfyUI's comfy_extras/nodes_sam3.py makes them."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.image.resize import upscale_samples
from comfy_core.loading import load_sam3
from nodes.errors import NodeInputError
from nodes.sam3_nodes import sam3_detect
from tests.fixtures.template_models_sam3 import tiny_sam3_file_state

VIT_DIM = 48  # one ViT head (Sam3Config's reading): see the loaded-network fixture


@pytest.fixture(scope="module")
def loaded():
    # a one-head ViT (vit_dim 48): the nodes under test do not depend on the trunk's heads, and the
    # 1008-pixel trunk runs ~10x faster on every frame
    with CheckpointFile(tiny_sam3_file_state(seed=4, vit_dim=VIT_DIM)) as file:
        return load_sam3(file)


@pytest.fixture(scope="module")
def image():
    return torch.rand(1, 40, 48, 3, generator=torch.Generator().manual_seed(2))


def _frame(image):
    return upscale_samples(image[..., :3].movedim(-1, 1), 1008, 1008, "bilinear", "disabled")


def test_text_detections_pass_the_threshold_best_first(loaded, image):
    model, clip = loaded
    cond = clip.encode_from_tokens_scheduled(clip.tokenize("cat:3"))
    with torch.no_grad():
        out = model.model.diffusion_model(_frame(image), text_embeddings=cond[0][1]["sam3_multi_cond"][0]["cond"],
                                          text_mask=cond[0][1]["attention_mask"], orig_size=(40, 48))
    probs = out["scores"][0].sigmoid()
    order = probs.argsort(descending=True)
    threshold = float(probs[order[1]]) - 1e-6  # exactly two queries pass
    masks, boxes = sam3_detect(model, image, conditioning=cond, threshold=threshold, refine_iterations=0,
                               individual_masks=True)
    assert [round(b["score"], 5) for b in boxes[0]] == [round(float(probs[i]), 5) for i in order[:2]]
    first = out["boxes"][0][order[0]]
    assert boxes[0][0]["x"] == pytest.approx(float(first[0]), abs=1e-4)
    assert boxes[0][0]["width"] == pytest.approx(float(first[2] - first[0]), abs=1e-4)
    # refine_iterations 0: the detector's masks themselves, resized and > 0
    want = torch.stack([(F.interpolate(out["masks"][0][i][None, None], size=(40, 48), mode="bilinear",
                                       align_corners=False)[0, 0] > 0).float() for i in order[:2]])
    assert masks.shape == (2, 40, 48) and torch.equal(masks, want)
    union, _ = sam3_detect(model, image, conditioning=cond, threshold=threshold, refine_iterations=0)
    assert union.shape == (1, 40, 48) and torch.equal(union[0], want.amax(0))
    # one detection per category without ":N"
    _, single = sam3_detect(model, image, conditioning=clip.encode_from_tokens_scheduled(clip.tokenize("cat")),
                            threshold=0.0, refine_iterations=0)
    assert len(single[0]) == 1


def test_nothing_passes_a_threshold_of_one(loaded, image):
    model, clip = loaded
    cond = clip.encode_from_tokens_scheduled(clip.tokenize("dog"))
    masks, boxes = sam3_detect(model, image, conditioning=cond, threshold=1.0)
    assert boxes == [[]] and masks.shape == (1, 40, 48) and not masks.any()
    masks, _ = sam3_detect(model, image, conditioning=cond, threshold=1.0, individual_masks=True)
    assert masks.shape == (0, 40, 48)


def test_refinement_unites_sam_with_the_coarse_mask(loaded, image):
    model, clip = loaded
    cond = clip.encode_from_tokens_scheduled(clip.tokenize("cat"))
    coarse, _ = sam3_detect(model, image, conditioning=cond, threshold=0.0, refine_iterations=0)
    refined, _ = sam3_detect(model, image, conditioning=cond, threshold=0.0, refine_iterations=1)
    assert ((refined >= coarse).all()) and set(refined.unique().tolist()) <= {0.0, 1.0}


def test_box_and_point_prompts_go_through_sam(loaded, image):
    model, _ = loaded
    network = model.model.diffusion_model
    box = {"x": 8, "y": 4, "width": 24, "height": 20}
    masks, boxes = sam3_detect(model, image, bboxes=[box], refine_iterations=1)
    corners = torch.tensor([[[8 / 48 * 1008, 4 / 40 * 1008], [32 / 48 * 1008, 24 / 40 * 1008]]])
    with torch.no_grad():
        logits = network.forward_segment(_frame(image), box_inputs=corners)
    want = (F.interpolate(logits, size=(40, 48), mode="bilinear", align_corners=False)[0] > 0).float()
    assert boxes == [[]] and torch.allclose(masks, want)
    points, _ = sam3_detect(model, image, positive_coords='[{"x": 10, "y": 12}]', negative_coords="[]",
                            refine_iterations=1)
    with torch.no_grad():
        logits = network.forward_segment(_frame(image), point_inputs={
            "point_coords": torch.tensor([[[10 / 48 * 1008, 12 / 40 * 1008]]]),
            "point_labels": torch.tensor([[1]], dtype=torch.int32)})
    assert torch.equal(points[0], (F.interpolate(logits, size=(40, 48), mode="bilinear",
                                                 align_corners=False)[0, 0] > 0).float())
    with pytest.raises(NodeInputError, match="positive_coords"):
        sam3_detect(model, image, positive_coords="not json")


def test_the_model_must_be_sam3(image):
    with pytest.raises(NodeInputError, match="SAM 3"):
        sam3_detect(object(), image)


def test_track_to_mask_unites_the_chosen_objects():
    from comfy_core.families.wan.scail_masks import pack_masks
    from nodes.sam3_nodes import sam3_track_to_mask

    masks = torch.zeros(2, 3, 4, 8, dtype=torch.bool)  # 2 frames, 3 objects, 4 x 8
    masks[0, 0, 0, :2] = True
    masks[0, 2, 3, 5:] = True
    masks[1, 1, 1, 1] = True
    track = {"packed_masks": pack_masks(masks), "orig_size": (4, 8), "n_frames": 2}
    (out,) = sam3_track_to_mask(track, "2, 0, x, -1, 7")
    assert torch.equal(out, (masks[:, 0] | masks[:, 2]).float())
    (every,) = sam3_track_to_mask(track, "")
    assert torch.equal(every, masks.any(1).float())
    (bigger,) = sam3_track_to_mask({**track, "orig_size": (8, 16)}, "1")
    want = F.interpolate(masks[:, 1:2].float(), size=(8, 16), mode="bilinear", align_corners=False)[:, 0]
    assert torch.equal(bigger, want)
    (none,) = sam3_track_to_mask({"packed_masks": None, "orig_size": (4, 8), "n_frames": 3}, "")
    assert none.shape == (3, 4, 8) and not none.any()
    assert not sam3_track_to_mask(track, "9")[0].any()
    with pytest.raises(NodeInputError, match="track_data"):
        sam3_track_to_mask(None, "")
